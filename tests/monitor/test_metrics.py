"""Every exported series and label, from region files written from HAMi-core's offsets."""

import json
from pathlib import Path

import pytest

from pyhami.model import PodUID
from pyhami.monitor.scan import ContainerKey
from pyhami.nvml import RunningProcess, Utilization
from pyhami.testing import FakeNVML
from pyhami.testing.fake_nvml import gb10, t4

from .builders import NODE, NOW, Scraper, StaticPods, pod_object
from .regionfile import Mem, Proc, RegionSpec, uuid_of, write_region

MIB = 1 << 20
UID = "5b1c5d2e-aaaa-bbbb-cccc-000000000001"
HOST_UUID = uuid_of(0)
ALLOCATED = f"{HOST_UUID},NVIDIA,3000,30:;{uuid_of(1)},NVIDIA,1000,10:;"
VGPU = (
    "hami_vgpu_memory_used_bytes",
    "hami_vgpu_memory_limit_bytes",
    "hami_container_device_memory_bytes",
    "hami_container_device_utilization_ratio",
    "hami_vgpu_memory_context_bytes",
    "hami_vgpu_memory_module_bytes",
    "hami_vgpu_memory_buffer_bytes",
)


def _labels(container: str, index: int, uuid: str, pod: str = "gpu-pod") -> dict[str, str]:
    return {
        "namespace": "default",
        "pod": pod,
        "container": container,
        "vdevice_index": str(index),
        "device_uuid": uuid,
        "zone": "vGPU",
    }


def _nvml() -> FakeNVML:
    nvml = FakeNVML.with_gpus(t4(uuid=HOST_UUID), gb10())
    nvml.set_usage(
        0,
        memory_used_mib=5000,
        utilization=Utilization(gpu=37, memory=12),
        processes=(RunningProcess(pid=4242, used_memory=0),),
    )
    return nvml


def _main_region(version: int = 1) -> RegionSpec:
    return RegionSpec(
        version=version,
        uuids=(HOST_UUID,),
        limits=(3000 * MIB,),
        sm_limits=(30,),
        procs=(
            Proc(
                pid=7,
                hostpid=4242,
                used={0: Mem(10 * MIB, 2 * MIB, 100 * MIB, 200 * MIB)},
                sm_util={0: 25},
            ),
            Proc(pid=8, hostpid=4242, used={0: Mem(0, 0, 0, 50 * MIB)}, sm_util={0: 5}),
        ),
        last_kernel_time=int(NOW) - 42,
    )


@pytest.fixture
def scraper(tmp_path: Path) -> Scraper:
    pods = StaticPods([pod_object("gpu-pod", UID, ("main", "side"), allocated=ALLOCATED)])
    write_region(tmp_path / f"{UID}_main" / "1f0e.cache", _main_region())
    (tmp_path / f"{UID}_main" / "libvgpu.so").touch()
    scraper = Scraper(tmp_path, pods, open_nvml=_nvml().open)
    scraper.tick()
    return scraper


def test_host_series_carry_hami_labels(scraper: Scraper) -> None:
    labels = {
        "node": NODE,
        "device_index": "0",
        "device_uuid": HOST_UUID,
        "device_type": "NVIDIA-Tesla T4",
        "zone": "vGPU",
    }
    assert scraper.samples("hami_host_gpu_memory_used_bytes") == [
        ("hami_host_gpu_memory_used_bytes", labels, 5000 * MIB)
    ], "the GB10 (memory NOT_SUPPORTED) is skipped"
    assert scraper.samples("hami_host_gpu_utilization_ratio") == [
        ("hami_host_gpu_utilization_ratio", labels, 37)
    ]
    no_node = {k: v for k, v in labels.items() if k != "node"}
    assert scraper.samples("hami_host_gpu_memory_controller_utilization_ratio") == [
        ("hami_host_gpu_memory_controller_utilization_ratio", no_node, 12)
    ]


def test_container_series_from_the_region(scraper: Scraper) -> None:
    want = {
        "hami_vgpu_memory_used_bytes": 250 * MIB,
        "hami_vgpu_memory_limit_bytes": 3000 * MIB,
        "hami_container_device_memory_bytes": 250 * MIB,
        "hami_container_device_utilization_ratio": 30,
        "hami_vgpu_memory_context_bytes": 10 * MIB,
        "hami_vgpu_memory_module_bytes": 2 * MIB,
        "hami_vgpu_memory_buffer_bytes": 100 * MIB,
        "hami_container_last_kernel_elapsed_seconds": 42,
    }
    for name, value in want.items():
        main = [s for s in scraper.samples(name) if s[1]["container"] == "main"]
        assert main == [(name, _labels("main", 0, HOST_UUID), value)], name


def test_allocated_container_without_region_has_zero_usage_series(scraper: Scraper) -> None:
    """`side` has never run CUDA: its series exist with the allocation's limit and 0 usage."""
    side = _labels("side", 0, uuid_of(1))
    for name in VGPU:
        rows = [s for s in scraper.samples(name) if s[1]["container"] == "side"]
        want = 1000 * MIB if name == "hami_vgpu_memory_limit_bytes" else 0
        assert rows == [(name, side, want)], name
    assert not [
        s
        for s in scraper.samples("hami_container_last_kernel_elapsed_seconds")
        if s[1]["container"] == "side"
    ], "no kernel ever ran"


def test_v0_region_has_no_last_kernel_series(tmp_path: Path) -> None:
    pods = StaticPods([pod_object("gpu-pod", UID, allocated=f"{HOST_UUID},NVIDIA,3000,30:;")])
    write_region(tmp_path / f"{UID}_main" / "a.cache", _main_region(version=0))
    scraper = Scraper(tmp_path, pods)
    scraper.tick()
    assert scraper.samples("hami_vgpu_memory_used_bytes")[0][2] == 250 * MIB
    assert scraper.samples("hami_container_last_kernel_elapsed_seconds") == []


def test_init_containers_and_unlabelled_pods_get_no_usage_series(tmp_path: Path) -> None:
    other = "9999-other-pod"
    pods = StaticPods(
        [pod_object("gpu-pod", UID, ("main",), init=("setup",), allocated=f";{ALLOCATED}")]
    )
    write_region(tmp_path / f"{UID}_setup" / "a.cache", _main_region())
    write_region(tmp_path / f"{other}_main" / "a.cache", _main_region())
    scraper = Scraper(tmp_path, pods)
    scraper.tick()
    rows = scraper.samples("hami_vgpu_memory_used_bytes")
    assert [(s[1]["container"], s[1]["device_uuid"], s[2]) for s in rows] == [
        ("main", HOST_UUID, 0)
    ], "main's allocation is the second segment (init first); setup and the other pod: none"


def test_legacy_twins_only_with_the_flag(tmp_path: Path, scraper: Scraper) -> None:
    assert scraper.samples("vGPU_device_memory_usage_in_bytes") == []
    legacy = Scraper(scraper.root, scraper.pods, open_nvml=_nvml().open, legacy=True)
    legacy.tick()
    old = {
        "podnamespace": "default",
        "podname": "gpu-pod",
        "ctrname": "main",
        "vdeviceid": "0",
        "deviceuuid": HOST_UUID,
        "zone": "vGPU",
    }
    main = lambda name: [s for s in legacy.samples(name) if s[1].get("ctrname") == "main"]  # noqa: E731
    assert main("vGPU_device_memory_usage_in_bytes") == [
        ("vGPU_device_memory_usage_in_bytes", old, 250 * MIB)
    ]
    assert main("vGPU_device_memory_limit_in_bytes")[0][2] == 3000 * MIB
    assert main("Device_utilization_desc_of_container")[0][2] == 30
    assert main("Device_last_kernel_of_container")[0][2] == 42
    desc = main("Device_memory_desc_of_container")
    assert desc == [
        (
            "Device_memory_desc_of_container",
            {
                **old,
                "context": str(10 * MIB),
                "module": str(2 * MIB),
                "data": str(100 * MIB),
                "offset": str(138 * MIB),
            },
            250 * MIB,
        )
    ]
    host = {
        "nodeid": NODE,
        "deviceidx": "0",
        "deviceuuid": HOST_UUID,
        "devicetype": "NVIDIA-Tesla T4",
        "zone": "vGPU",
    }
    assert legacy.samples("HostGPUMemoryUsage") == [("HostGPUMemoryUsage", host, 5000 * MIB)]
    assert legacy.samples("HostCoreUtilization") == [("HostCoreUtilization", host, 37)]
    assert legacy.samples("hami_vgpu_memory_used_bytes"), "legacy names come in addition"


def test_mig_identity_series(tmp_path: Path) -> None:
    mig = json.dumps(
        [
            {
                "containerIndex": 1,
                "deviceIndex": 0,
                "gpuUUID": "GPU-a",
                "profile": "2g.10gb",
                "placement": {"start": 0, "size": 2},
                "migUUID": "MIG-a",
                "gpuInstanceID": 4,
                "computeInstanceID": 0,
            },
            {
                "containerIndex": 1,
                "deviceIndex": 1,
                "gpuUUID": "GPU-a",
                "profile": "1g.5gb",
                "placement": {"start": 6, "size": 1},
            },
        ]
    )
    pods = StaticPods([pod_object("mig-pod", UID, ("main",), init=("setup",), mig=mig)])
    scraper = Scraper(tmp_path, pods, legacy=True)
    base = {
        "namespace": "default",
        "pod": "mig-pod",
        "container": "main",
        "vdevice_index": "0",
        "device_uuid": "GPU-a",
        "zone": "vGPU",
    }
    assert scraper.samples("hami_mig_device_info") == [
        (
            "hami_mig_device_info",
            {
                **base,
                "mig_uuid": "MIG-a",
                "profile": "2g.10gb",
                "gpu_instance_id": "4",
                "compute_instance_id": "0",
            },
            1,
        )
    ], "only the entry with its runtime identity"
    assert scraper.samples("MigInfo") == [
        (
            "MigInfo",
            {
                "podnamespace": "default",
                "podname": "mig-pod",
                "ctrname": "main",
                "vdeviceid": "0",
                "deviceuuid": "GPU-a",
                "instanceid": "4",
                "zone": "vGPU",
            },
            1,
        )
    ]


def test_help_texts_and_zone(scraper: Scraper) -> None:
    helps = scraper.helps()
    assert helps["hami_host_gpu_memory_used_bytes"] == "GPU device memory usage in bytes"
    assert helps["hami_host_gpu_utilization_ratio"] == "GPU core utilization ratio (0-100)"
    assert (
        helps["hami_host_gpu_memory_controller_utilization_ratio"]
        == "GPU memory controller utilization ratio (0-100)"
    )
    assert helps["hami_vgpu_memory_used_bytes"] == "vGPU device memory usage in bytes"
    assert helps["hami_vgpu_memory_limit_bytes"] == "vGPU device memory limit in bytes"
    assert helps["hami_container_device_memory_bytes"] == "Container device memory usage in bytes"
    assert (
        helps["hami_container_device_utilization_ratio"] == "Container device SM utilization ratio"
    )
    assert (
        helps["hami_container_last_kernel_elapsed_seconds"]
        == "Seconds since last kernel execution in container"
    )
    assert (
        helps["hami_vgpu_memory_context_bytes"] == "Container device memory context size in bytes"
    )
    assert helps["hami_vgpu_memory_module_bytes"] == "Container device memory module size in bytes"
    assert helps["hami_vgpu_memory_buffer_bytes"] == "Container device memory buffer size in bytes"
    assert (
        helps["hami_build_info"]
        == "hami build metadata exposed as labels with a constant value of 1."
    )
    text = scraper.text()
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        if line.startswith("hami_build_info"):
            assert "zone=" not in line
        else:
            assert 'zone="vGPU"' in line, line
    assert "process_" not in text and "python_gc" not in text, "private registry"


def test_no_host_metrics_without_a_node_name_or_nvml(tmp_path: Path) -> None:
    pods = StaticPods()
    assert (
        Scraper(tmp_path, pods, open_nvml=_nvml().open, node=None).samples(
            "hami_host_gpu_memory_used_bytes"
        )
        == []
    )
    broken = _nvml()
    broken.remove_driver()
    assert (
        Scraper(tmp_path, pods, open_nvml=broken.open).samples("hami_host_gpu_memory_used_bytes")
        == []
    )


def test_one_failing_card_leaves_the_others(tmp_path: Path) -> None:
    nvml = FakeNVML.with_gpus(t4(), t4())
    nvml.fail("utilization", index=0)
    rows = Scraper(tmp_path, StaticPods(), open_nvml=nvml.open).samples(
        "hami_host_gpu_utilization_ratio"
    )
    assert [s[1]["device_index"] for s in rows] == ["1"]
    assert nvml.closed == nvml.opened == 1, "NVML is shut down after each scrape"


def test_corrupt_region_falls_back_to_the_allocation_and_is_counted(tmp_path: Path) -> None:
    pods = StaticPods([pod_object("gpu-pod", UID, allocated=f"{HOST_UUID},NVIDIA,3000,30:;")])
    write_region(tmp_path / f"{UID}_main" / "a.cache", RegionSpec(magic=1))
    scraper = Scraper(tmp_path, pods)
    scraper.tick()
    assert scraper.samples("hami_vgpu_memory_used_bytes")[0][2] == 0
    assert scraper.samples("pyhami_monitor_regions_refused")[0][2] == 1


def test_pod_that_goes_away_loses_its_series(scraper: Scraper) -> None:
    assert scraper.samples("hami_vgpu_memory_used_bytes")
    scraper.pods.objects.clear()
    scraper.tick()
    assert scraper.samples("hami_vgpu_memory_used_bytes") == []


def test_sanity_alarms_are_counted_once_per_finding(tmp_path: Path) -> None:
    pods = StaticPods([pod_object("gpu-pod", UID, allocated=f"{HOST_UUID},NVIDIA,3000,30:;")])
    bad = RegionSpec(
        uuids=(HOST_UUID,),
        procs=(
            Proc(pid=7, hostpid=4242, used={0: Mem(total=-1)}),
            Proc(pid=0, hostpid=0),  # live slot without a pid
            Proc(pid=9, hostpid=5555, used={0: Mem(total=20_000 * MIB)}, sm_util={0: 150}),
        ),
    )
    write_region(tmp_path / f"{UID}_main" / "a.cache", bad)
    scraper = Scraper(tmp_path, pods, open_nvml=_nvml().open)
    scraper.tick()
    for _ in range(3):
        counts = {s[1]["kind"]: s[2] for s in scraper.samples("pyhami_monitor_sanity_alarms_total")}
    assert counts == {
        "negative_counter": 1,
        "above_physical": 1,  # 20000 MiB on a 15360 MiB T4
        "limit_above_physical": 0,
        "impossible_utilization": 1,
        "unknown_pid": 2,  # pid 0, and hostpid 5555 that NVML does not list on the card
    }
    assert scraper.samples("hami_vgpu_memory_used_bytes")[0][2] == 0, "refused: the allocation's"
    assert scraper.samples("hami_vgpu_memory_limit_bytes")[0][2] == 3000 * MIB
    assert scraper.samples("pyhami_monitor_regions_refused")[0][2] == 1


ABSURD = 1 << 62  # 4.6e18 bytes in one slot; 100 such slots sum to 4.6e20


@pytest.mark.parametrize("with_nvml", [True, False], ids=["nvml", "no-nvml"])
@pytest.mark.parametrize(
    "memory, slots, limit, kind",
    [
        pytest.param(Mem(total=ABSURD), 100, 0, "above_physical", id="used-summed"),
        pytest.param(Mem(total=ABSURD), 1, 0, "above_physical", id="used"),
        pytest.param(Mem(context=ABSURD, total=MIB), 1, 0, "above_physical", id="context"),
        pytest.param(Mem(buffer=ABSURD, total=MIB), 1, 0, "above_physical", id="buffer"),
        pytest.param(Mem(total=MIB), 1, 1 << 63, "limit_above_physical", id="limit"),
    ],
)
def test_impossible_numbers_never_reach_metrics(
    tmp_path: Path, with_nvml: bool, memory: Mem, slots: int, limit: int, kind: str
) -> None:
    """A container writes whatever it likes into its region: a number no card can hold is
    refused with a reason (log, alarm counter, refused gauge), and the pod's series are the
    allocation's, as for an unreadable region."""
    pods = StaticPods([pod_object("gpu-pod", UID, allocated=f"{HOST_UUID},NVIDIA,3000,30:;")])
    liar = RegionSpec(
        uuids=(HOST_UUID,),
        limits=(limit,),
        procs=tuple(Proc(pid=7 + n, hostpid=4242, used={0: memory}) for n in range(slots)),
    )
    write_region(tmp_path / f"{UID}_main" / "a.cache", liar)
    scraper = Scraper(tmp_path, pods, open_nvml=_nvml().open if with_nvml else None)
    scraper.tick()
    text = scraper.text()
    assert "e+18" not in text and "e+20" not in text and str(ABSURD) not in text
    for name in VGPU:
        (sample,) = scraper.samples(name)
        assert sample[2] == (3000 * MIB if name == "hami_vgpu_memory_limit_bytes" else 0), name
    counts = {s[1]["kind"]: s[2] for s in scraper.samples("pyhami_monitor_sanity_alarms_total")}
    assert counts[kind] == 1
    assert scraper.samples("pyhami_monitor_regions_refused")[0][2] == 1


def test_a_symlinked_region_of_another_pod_is_not_exported_as_ours(tmp_path: Path) -> None:
    """An attacker's container links its region name to a neighbour's region file: the monitor
    must neither follow the link nor publish the neighbour's usage under the attacker's pod."""
    victim_uid = "5b1c5d2e-aaaa-bbbb-cccc-000000000002"
    pods = StaticPods(
        [
            pod_object("attacker", UID, allocated=f"{HOST_UUID},NVIDIA,3000,30:;"),
            pod_object("victim", victim_uid, allocated=f"{HOST_UUID},NVIDIA,3000,30:;"),
        ]
    )
    victim = write_region(tmp_path / f"{victim_uid}_main" / "v.cache", _main_region())
    (tmp_path / f"{UID}_main").mkdir()
    (tmp_path / f"{UID}_main" / "a.cache").symlink_to(f"../{victim.parent.name}/{victim.name}")
    scraper = Scraper(tmp_path, pods, open_nvml=_nvml().open)
    scraper.tick()
    used = {s[1]["pod"]: s[2] for s in scraper.samples("hami_vgpu_memory_used_bytes")}
    assert used == {"attacker": 0, "victim": 250 * MIB}
    assert scraper.samples("pyhami_monitor_regions_refused")[0][2] == 1
    assert "symbolic link" in scraper.regions.refused[ContainerKey(PodUID(UID), "main")]


def test_pids_linux_cannot_have_raise_an_alarm(tmp_path: Path) -> None:
    pods = StaticPods([pod_object("gpu-pod", UID, allocated=f"{HOST_UUID},NVIDIA,3000,30:;")])
    spec = RegionSpec(
        uuids=(HOST_UUID,),
        procs=(Proc(pid=1 << 30, hostpid=4242), Proc(pid=5, hostpid=(1 << 31) - 1)),
    )
    write_region(tmp_path / f"{UID}_main" / "a.cache", spec)
    scraper = Scraper(tmp_path, pods)
    scraper.tick()
    counts = {s[1]["kind"]: s[2] for s in scraper.samples("pyhami_monitor_sanity_alarms_total")}
    assert counts["unknown_pid"] == 2
