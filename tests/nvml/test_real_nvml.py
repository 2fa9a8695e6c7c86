"""The pynvml-backed Nvml: error translation and parsing, plus a real-driver check (gpu)."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from pyhami.nvml import (
    NvmlError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    TopologyLevel,
    driver_available,
    open_nvml,
    real,
)
from pyhami.nvml.real import sysfs_bus_id


@pytest.mark.parametrize(
    "nvml_id, want",
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000001:AF:00.0\n", "0001:af:00.0"),
    ],
)
def test_sysfs_bus_id(nvml_id: str, want: str) -> None:
    assert sysfs_bus_id(nvml_id) == want


def test_without_a_driver_open_names_the_fix() -> None:
    if driver_available():
        pytest.skip("a driver is present here")
    with pytest.raises(NvmlUnavailableError, match="NVIDIA runtime"):
        open_nvml()


@pytest.mark.parametrize(
    "code, kind",
    [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, NvmlNotSupportedError),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, NvmlNotSupportedError),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, NvmlUnavailableError),
        (pynvml.NVML_ERROR_GPU_IS_LOST, NvmlError),
    ],
)
def test_nvml_codes_map_to_our_errors(code: int, kind: type[NvmlError]) -> None:
    translated = real._translate("nvmlDeviceGetUUID", pynvml.NVMLError(code))
    assert type(translated) is kind
    assert translated.code == code
    assert "nvmlDeviceGetUUID" in str(translated)


class _FakeDriver:
    """Stands in for libnvidia-ml under pynvml's Python functions, to exercise our wrapper."""

    def __init__(self, links: list[tuple[int, str, int]]) -> None:
        self.links = links  # (state, remote bus id, remote type), one per link index

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def nvlink_state(_handle: Any, link: int) -> int:
            if link >= len(self.links):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return self.links[link][0]

        patches: dict[str, Any] = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: 1,
            "nvmlDeviceGetHandleByIndex": lambda index: f"handle{index}",
            "nvmlDeviceGetPciInfo": lambda _h: SimpleNamespace(busId=b"00000000:3B:00.0"),
            "nvmlDeviceGetNvLinkState": nvlink_state,
            "nvmlDeviceGetNvLinkRemotePciInfo": lambda _h, link: SimpleNamespace(
                busId=self.links[link][1]
            ),
            "nvmlDeviceGetNvLinkRemoteDeviceType": lambda _h, link: self.links[link][2],
            "nvmlDeviceGetTopologyCommonAncestor": lambda _a, _b: 30,
            "nvmlDeviceGetComputeRunningProcesses": lambda _h: [
                SimpleNamespace(pid=7, usedGpuMemory=None)
            ],
            "nvmlDeviceGetGraphicsRunningProcesses": lambda _h: [
                SimpleNamespace(pid=7, usedGpuMemory=5),
                SimpleNamespace(pid=8, usedGpuMemory=5),
            ],
        }
        for name, fn in patches.items():
            monkeypatch.setattr(pynvml, name, fn)


def test_wrapper_reads_numa_links_and_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _FakeDriver(
        [
            (pynvml.NVML_FEATURE_ENABLED, "00000000:5E:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_GPU),
            (0, "00000000:5E:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_GPU),
            (
                pynvml.NVML_FEATURE_ENABLED,
                "00000000:C0:00.0",
                pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH,
            ),
        ]
    ).install(monkeypatch)
    numa = tmp_path / "bus/pci/devices/0000:3b:00.0/numa_node"
    numa.parent.mkdir(parents=True)
    numa.write_text("1\n")
    nvml = open_nvml(sys_root=tmp_path)
    assert nvml.device_bus_id(0) == "0000:3b:00.0"
    assert nvml.device_numa_node(0) == 1
    numa.write_text("-1\n")
    assert nvml.device_numa_node(0) is None
    links = nvml.nvlinks(0)
    assert [(link.remote_bus_id, link.remote_is_switch) for link in links] == [
        ("0000:5e:00.0", False),
        ("0000:c0:00.0", True),
    ]
    assert nvml.topology_level(0, 0) is TopologyLevel.HOSTBRIDGE
    assert [(p.pid, p.used_memory) for p in nvml.running_processes(0)] == [(7, 0), (8, 5)]
    nvml.close()


def test_a_gi_profile_the_driver_does_not_know_is_not_supported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Old drivers answer INVALID_ARGUMENT for GI profile enums newer than themselves; callers
    walking every profile id see that as the GPU lacking the profile, as NOT_SUPPORTED says."""
    _FakeDriver([]).install(monkeypatch)

    def profile_info(_handle: Any, profile: int) -> Any:
        if profile == 0:
            return SimpleNamespace(
                id=19,
                sliceCount=1,
                memorySizeMB=9984,
                multiprocessorCount=16,
                instanceCount=7,
                name=b"MIG 1g.10gb",
            )
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceProfileInfo", profile_info)
    nvml = open_nvml(sys_root=tmp_path)
    assert nvml.gpu_instance_profile(0, 0).name == "1g.10gb"
    with pytest.raises(NvmlNotSupportedError) as caught:
        nvml.gpu_instance_profile(0, 17)
    assert caught.value.code == pynvml.NVML_ERROR_INVALID_ARGUMENT
    nvml.close()


@pytest.mark.gpu
def test_real_driver_inventory() -> None:
    if not driver_available():
        pytest.skip("no NVIDIA driver on this machine")
    nvml = open_nvml()
    try:
        count = nvml.device_count()
        assert count >= 1
        for index in range(count):
            assert nvml.device_uuid(index).startswith(("GPU-", "MIG-"))
            assert nvml.device_memory(index).total > 0
            print(
                index,
                nvml.device_name(index),
                nvml.device_bus_id(index),
                nvml.device_numa_node(index),
                nvml.utilization(index),
                nvml.nvlinks(index),
            )
        watch = nvml.watch_xids()
        assert watch.wait(10) is None
        watch.close()
    finally:
        nvml.close()


def test_xid_watch_over_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT),
        SimpleNamespace(
            eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=79, device="handle0"
        ),
        pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST),
    ]

    def wait(_set: Any, timeout_ms: int) -> Any:
        item = events.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def register(handle: Any, mask: int, _set: Any) -> None:
        if handle == "handle1":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        assert mask == pynvml.nvmlEventTypeXidCriticalError

    patches: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 3,
        "nvmlDeviceGetHandleByIndex": lambda index: f"handle{index}",
        "nvmlDeviceGetUUID": lambda handle: f"GPU-{handle}",
        "nvmlEventSetCreate": lambda: "set",
        "nvmlEventSetFree": lambda _set: None,
        "nvmlDeviceGetSupportedEventTypes": lambda handle: (
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED) if handle == "handle2" else 0xFF
        ),
        "nvmlDeviceRegisterEvents": register,
        "nvmlEventSetWait_v2": wait,
    }
    for name, fn in patches.items():
        monkeypatch.setattr(pynvml, name, fn)
    nvml = open_nvml()
    watch = nvml.watch_xids()
    assert watch.unwatched == (1,)  # handle2 has no events (old GPU): not a fault
    assert watch.wait(10) is None
    event = watch.wait(10)
    assert event is not None and (event.uuid, event.xid) == ("GPU-handle0", 79)
    with pytest.raises(NvmlError, match="nvmlEventSetWait"):
        watch.wait(10)
    watch.close()
    nvml.close()


def _raise(code: int) -> Any:
    raise pynvml.NVMLError(code)
