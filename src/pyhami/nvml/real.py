"""`Nvml` on the real driver through nvidia-ml-py (`pynvml`)."""

import ctypes
import logging
import threading
from pathlib import Path
from typing import Any

import pynvml

from pyhami.model import MigPlacement
from pyhami.nvml.api import (
    GI_PROFILE_ID_COUNT,
    GpuInstance,
    GpuInstanceProfile,
    MemoryInfo,
    MigDevice,
    MigMode,
    NvLink,
    NvmlError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    RunningProcess,
    TopologyLevel,
    Utilization,
    XidEvent,
)

log = logging.getLogger(__name__)

_MAX_PLACEMENTS = 16  # a GPU has at most 8 memory slices, so at most 8 placements per profile

_NO_DRIVER_HINT = (
    "no usable NVIDIA driver here; check that the driver is installed on the node and that this "
    "container runs with the NVIDIA runtime (NVIDIA_VISIBLE_DEVICES=all)"
)
_UNAVAILABLE_CODES = (
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_UNINITIALIZED,
)


def _translate(operation: str, error: Exception) -> NvmlError:
    code = getattr(error, "value", None)
    detail = str(error)
    # A function missing from an old driver library means "this driver cannot", like NOT_SUPPORTED.
    if code in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
        return NvmlNotSupportedError(operation, detail, code)
    if code in _UNAVAILABLE_CODES:
        return NvmlUnavailableError(operation, f"{detail}; {_NO_DRIVER_HINT}", code)
    return NvmlError(operation, detail, code)


def _call(function: str, *args: Any, operation: str = "") -> Any:
    """`pynvml.<function>(*args)`; an NVML error becomes ours, naming `operation` (default: the
    function)."""
    try:
        return getattr(pynvml, function)(*args)
    except pynvml.NVMLError as error:
        raise _translate(operation or function, error) from error


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _processes(handle: Any) -> tuple[RunningProcess, ...]:
    """Compute and graphics processes on a GPU or MIG device handle, each pid once."""
    seen: dict[int, RunningProcess] = {}
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for process in _call(query, handle):
            pid, used = int(process.pid), int(process.usedGpuMemory or 0)
            seen.setdefault(pid, RunningProcess(pid=pid, used_memory=used))
    return tuple(seen.values())


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's `00000000:3B:00.0` as sysfs names it, `0000:3b:00.0` (8-digit domain cut to 4)."""
    bus_id = nvml_bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) > 4:
        return f"{domain[-4:]}:{rest}"
    return bus_id


class PynvmlXidWatch:
    """XID critical errors of every device through one NVML event set."""

    def __init__(self, handles: list[Any]) -> None:
        self._set = _call("nvmlEventSetCreate")
        unwatched: list[int] = []
        for index, handle in enumerate(handles):
            try:
                supported = _call("nvmlDeviceGetSupportedEventTypes", handle)
                mask = supported & pynvml.nvmlEventTypeXidCriticalError
                _call("nvmlDeviceRegisterEvents", handle, mask, self._set)
            except NvmlNotSupportedError:
                continue  # an old GPU without events: nothing to watch, not a fault
            except NvmlError:
                unwatched.append(index)
        self.unwatched = tuple(unwatched)

    def wait(self, timeout_ms: int) -> XidEvent | None:
        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError as error:
            if getattr(error, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise _translate("nvmlEventSetWait", error) from error
        if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
            return None
        uuid = _text(_call("nvmlDeviceGetUUID", data.device))
        return XidEvent(uuid=uuid, xid=int(data.eventData))

    def close(self) -> None:
        _call("nvmlEventSetFree", self._set)


class PynvmlNvml:
    """An NVML session on the real driver. Use `open_nvml()`; `close()` shuts NVML down."""

    def __init__(self, sys_root: Path = Path("/sys")) -> None:
        _call("nvmlInit")
        self._sys_root = sys_root
        self._handles: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _handle(self, index: int) -> Any:
        with self._lock:
            if index not in self._handles:
                self._handles[index] = _call(
                    "nvmlDeviceGetHandleByIndex",
                    index,
                    operation=f"nvmlDeviceGetHandleByIndex({index})",
                )
            return self._handles[index]

    def device_count(self) -> int:
        return int(_call("nvmlDeviceGetCount"))

    def driver_version(self) -> str:
        return _text(_call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> int:
        return int(_call("nvmlSystemGetCudaDriverVersion_v2"))

    def device_uuid(self, index: int) -> str:
        return _text(_call("nvmlDeviceGetUUID", self._handle(index)))

    def device_name(self, index: int) -> str:
        return _text(_call("nvmlDeviceGetName", self._handle(index)))

    def device_memory(self, index: int) -> MemoryInfo:
        info = _call("nvmlDeviceGetMemoryInfo", self._handle(index))
        return MemoryInfo(total=int(info.total), used=int(info.used))

    def device_bus_id(self, index: int) -> str:
        pci = _call("nvmlDeviceGetPciInfo", self._handle(index))
        return sysfs_bus_id(_text(pci.busId))

    def device_numa_node(self, index: int) -> int | None:
        # Read from sysfs as HAMi does: NVML's own NUMA query is missing on older drivers.
        path = self._sys_root / "bus/pci/devices" / self.device_bus_id(index) / "numa_node"
        try:
            node = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None

    def topology_level(self, first: int, second: int) -> TopologyLevel:
        level = _call(
            "nvmlDeviceGetTopologyCommonAncestor", self._handle(first), self._handle(second)
        )
        try:
            return TopologyLevel(int(level))
        except ValueError as error:
            raise NvmlError(
                "nvmlDeviceGetTopologyCommonAncestor", f"unknown level {level}"
            ) from error

    def nvlinks(self, index: int) -> tuple[NvLink, ...]:
        handle = self._handle(index)
        links: list[NvLink] = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                state = _call("nvmlDeviceGetNvLinkState", handle, link)
            except NvmlError:
                break  # past the device's last link, or no NVLink at all
            if state != pynvml.NVML_FEATURE_ENABLED:
                continue
            pci = _call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            try:
                kind = _call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            except NvmlNotSupportedError:
                kind = pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN
            links.append(
                NvLink(
                    remote_bus_id=sysfs_bus_id(_text(pci.busId)),
                    remote_is_switch=kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH,
                )
            )
        return tuple(links)

    def utilization(self, index: int) -> Utilization:
        rates = _call("nvmlDeviceGetUtilizationRates", self._handle(index))
        return Utilization(gpu=int(rates.gpu), memory=int(rates.memory))

    def running_processes(self, index: int) -> tuple[RunningProcess, ...]:
        return _processes(self._handle(index))

    def watch_xids(self) -> PynvmlXidWatch:
        return PynvmlXidWatch([self._handle(i) for i in range(self.device_count())])

    # ----- dynamic MIG: written from the NVML docs, not yet run on MIG hardware -----

    def mig_mode(self, index: int) -> MigMode:
        current, pending = _call("nvmlDeviceGetMigMode", self._handle(index))
        enabled = pynvml.NVML_DEVICE_MIG_ENABLE
        return MigMode(current=current == enabled, pending=pending == enabled)

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        _call("nvmlDeviceSetMigMode", self._handle(index), mode)

    def gpu_instance_profile(self, index: int, profile: int) -> GpuInstanceProfile:
        operation = "nvmlDeviceGetGpuInstanceProfileInfo"
        try:
            info = _call(operation, self._handle(index), profile)
        except NvmlError as error:
            if error.code == pynvml.NVML_ERROR_INVALID_ARGUMENT:  # an enum newer than the driver
                raise NvmlNotSupportedError(operation, str(error), error.code) from error
            raise
        return GpuInstanceProfile(
            profile_id=profile,
            id=int(info.id),
            slice_count=int(info.sliceCount),
            memory_mib=int(info.memorySizeMB),
            sm_count=int(info.multiprocessorCount),
            instance_count=int(info.instanceCount),
            name=_text(info.name).removeprefix("MIG "),
        )

    def gpu_instance_placements(self, index: int, gi_profile_id: int) -> tuple[MigPlacement, ...]:
        placements = (pynvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
        count = ctypes.c_uint(len(placements))
        _call(
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            self._handle(index),
            gi_profile_id,
            placements,
            ctypes.byref(count),
        )
        return tuple(MigPlacement(int(p.start), int(p.size)) for p in placements[: count.value])

    def create_gpu_instance(
        self, index: int, gi_profile_id: int, placement: MigPlacement
    ) -> GpuInstance:
        wanted = pynvml.c_nvmlGpuInstancePlacement_t()
        wanted.start, wanted.size = placement.start, placement.size
        handle = _call(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            self._handle(index),
            gi_profile_id,
            ctypes.byref(wanted),
        )
        return self._gpu_instance(handle)

    def create_compute_instance(
        self, index: int, gpu_instance_id: int, ci_profile: int
    ) -> MigDevice:
        gpu_instance = self._gi_handle(index, gpu_instance_id)
        ci_info = _call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            gpu_instance,
            ci_profile,
            pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        handle = _call("nvmlGpuInstanceCreateComputeInstance", gpu_instance, int(ci_info.id))
        try:
            ids = (gpu_instance_id, int(_call("nvmlComputeInstanceGetInfo", handle).id))
            for device in self.mig_devices(index):
                if (device.gpu_instance_id, device.compute_instance_id) == ids:
                    return device
            raise NvmlError(
                "nvmlDeviceGetMigDeviceHandleByIndex",
                f"no MIG device for GI {ids[0]} CI {ids[1]} after creating it",
            )
        except NvmlError:
            # The caller never learns this CI's id, so it cannot destroy it, and its GI cannot
            # be destroyed while the CI lives: undo it here.
            try:
                _call("nvmlComputeInstanceDestroy", handle)
            except NvmlError as cleanup:
                log.error("GI %d: new compute instance left behind: %s", gpu_instance_id, cleanup)
            raise

    def gpu_instances(self, index: int) -> tuple[GpuInstance, ...]:
        return tuple(
            self._gpu_instance(handle)
            for profile in range(GI_PROFILE_ID_COUNT)
            for handle in self._gi_handles(index, profile)
        )

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        parent = self._handle(index)
        slots = _call("nvmlDeviceGetMaxMigDeviceCount", parent)
        found: list[MigDevice] = []
        for slot in range(int(slots)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
            except pynvml.NVMLError_NotFound:
                continue  # an empty slot
            except pynvml.NVMLError as error:
                raise _translate("nvmlDeviceGetMigDeviceHandleByIndex", error) from error
            found.append(
                MigDevice(
                    uuid=_text(_call("nvmlDeviceGetUUID", mig)),
                    gpu_instance_id=int(_call("nvmlDeviceGetGpuInstanceId", mig)),
                    compute_instance_id=int(_call("nvmlDeviceGetComputeInstanceId", mig)),
                )
            )
        return tuple(found)

    def destroy_compute_instance(
        self, index: int, gpu_instance_id: int, compute_instance_id: int
    ) -> None:
        handle = _call(
            "nvmlGpuInstanceGetComputeInstanceById",
            self._gi_handle(index, gpu_instance_id),
            compute_instance_id,
        )
        _call("nvmlComputeInstanceDestroy", handle)

    def destroy_gpu_instance(self, index: int, gpu_instance_id: int) -> None:
        _call("nvmlGpuInstanceDestroy", self._gi_handle(index, gpu_instance_id))

    def mig_device_processes(self, index: int, mig_uuid: str) -> tuple[RunningProcess, ...]:
        return _processes(_call("nvmlDeviceGetHandleByUUID", mig_uuid))

    def close(self) -> None:
        _call("nvmlShutdown")

    def _gi_handle(self, index: int, gpu_instance_id: int) -> Any:
        return _call("nvmlDeviceGetGpuInstanceById", self._handle(index), gpu_instance_id)

    def _gi_handles(self, index: int, profile: int) -> list[Any]:
        try:
            info = self.gpu_instance_profile(index, profile)
        except NvmlNotSupportedError:
            return []  # this GPU or driver has no such profile
        handles = (pynvml.c_nvmlGpuInstance_t * max(info.instance_count, 1))()
        count = ctypes.c_uint(0)
        _call(
            "nvmlDeviceGetGpuInstances", self._handle(index), info.id, handles, ctypes.byref(count)
        )
        return list(handles[: count.value])

    @staticmethod
    def _gpu_instance(handle: Any) -> GpuInstance:
        info = _call("nvmlGpuInstanceGetInfo", handle)
        return GpuInstance(
            id=int(info.id),
            profile_id=int(info.profileId),
            placement=MigPlacement(int(info.placement.start), int(info.placement.size)),
        )


def open_nvml(sys_root: Path = Path("/sys")) -> PynvmlNvml:
    """Initialise NVML; raises `NvmlUnavailableError` with a hint when there is no driver."""
    try:
        return PynvmlNvml(sys_root)
    except NvmlUnavailableError:
        raise
    except NvmlError as error:
        raise NvmlUnavailableError(
            "nvmlInit", f"{error.detail}; {_NO_DRIVER_HINT}", error.code
        ) from error


def driver_available() -> bool:
    """Whether NVML initialises here (for tests and tools that skip without a GPU)."""
    try:
        open_nvml().close()
    except NvmlError:
        return False
    return True
