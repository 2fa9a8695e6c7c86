"""`Nvml` on the real driver through nvidia-ml-py (`pynvml`)."""

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from pyhami.nvml.api import (
    MemoryInfo,
    NvLink,
    NvmlError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    RunningProcess,
    TopologyLevel,
    Utilization,
    XidEvent,
    sysfs_bus_id,
)

T = TypeVar("T")

_NO_DRIVER_HINT = (
    "no usable NVIDIA driver here; check that the driver is installed on the node and that this "
    "container runs with the NVIDIA runtime (NVIDIA_VISIBLE_DEVICES=all)"
)
_UNAVAILABLE_CODES = frozenset(
    {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_UNINITIALIZED,
    }
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


def _call(operation: str, fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except pynvml.NVMLError as error:
        raise _translate(operation, error) from error


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class PynvmlXidWatch:
    """XID critical errors of every device through one NVML event set."""

    def __init__(self, handles: list[Any]) -> None:
        self._set = _call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        unwatched: list[int] = []
        for index, handle in enumerate(handles):
            try:
                supported = _call(
                    "nvmlDeviceGetSupportedEventTypes",
                    pynvml.nvmlDeviceGetSupportedEventTypes,
                    handle,
                )
                mask = supported & pynvml.nvmlEventTypeXidCriticalError
                _call(
                    "nvmlDeviceRegisterEvents",
                    pynvml.nvmlDeviceRegisterEvents,
                    handle,
                    mask,
                    self._set,
                )
            except NvmlNotSupportedError:
                continue  # an old GPU without events: nothing to watch, not a fault
            except NvmlError:
                unwatched.append(index)
        self._unwatched = tuple(unwatched)

    @property
    def unwatched(self) -> tuple[int, ...]:
        return self._unwatched

    def wait(self, timeout_ms: int) -> XidEvent | None:
        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError as error:
            if getattr(error, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise _translate("nvmlEventSetWait", error) from error
        if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
            return None
        uuid = _text(_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, data.device))
        return XidEvent(uuid=uuid, xid=int(data.eventData))

    def close(self) -> None:
        _call("nvmlEventSetFree", pynvml.nvmlEventSetFree, self._set)


class PynvmlNvml:
    """An NVML session on the real driver. Use `open_nvml()`; `close()` shuts NVML down."""

    def __init__(self, sys_root: Path = Path("/sys")) -> None:
        _call("nvmlInit", pynvml.nvmlInit)
        self._sys_root = sys_root
        self._handles: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _handle(self, index: int) -> Any:
        with self._lock:
            if index not in self._handles:
                self._handles[index] = _call(
                    f"nvmlDeviceGetHandleByIndex({index})",
                    pynvml.nvmlDeviceGetHandleByIndex,
                    index,
                )
            return self._handles[index]

    def device_count(self) -> int:
        return int(_call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))

    def device_uuid(self, index: int) -> str:
        return _text(_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, self._handle(index)))

    def device_name(self, index: int) -> str:
        return _text(_call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, self._handle(index)))

    def device_memory(self, index: int) -> MemoryInfo:
        info = _call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, self._handle(index))
        return MemoryInfo(total=int(info.total), used=int(info.used))

    def device_bus_id(self, index: int) -> str:
        pci = _call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, self._handle(index))
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
            "nvmlDeviceGetTopologyCommonAncestor",
            pynvml.nvmlDeviceGetTopologyCommonAncestor,
            self._handle(first),
            self._handle(second),
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
                state = _call(
                    "nvmlDeviceGetNvLinkState", pynvml.nvmlDeviceGetNvLinkState, handle, link
                )
            except NvmlError:
                break  # past the device's last link, or no NVLink at all
            if state != pynvml.NVML_FEATURE_ENABLED:
                continue
            pci = _call(
                "nvmlDeviceGetNvLinkRemotePciInfo",
                pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                handle,
                link,
            )
            try:
                kind = _call(
                    "nvmlDeviceGetNvLinkRemoteDeviceType",
                    pynvml.nvmlDeviceGetNvLinkRemoteDeviceType,
                    handle,
                    link,
                )
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
        rates = _call(
            "nvmlDeviceGetUtilizationRates",
            pynvml.nvmlDeviceGetUtilizationRates,
            self._handle(index),
        )
        return Utilization(gpu=int(rates.gpu), memory=int(rates.memory))

    def running_processes(self, index: int) -> tuple[RunningProcess, ...]:
        handle = self._handle(index)
        seen: dict[int, RunningProcess] = {}
        for operation, query in (
            ("nvmlDeviceGetComputeRunningProcesses", pynvml.nvmlDeviceGetComputeRunningProcesses),
            ("nvmlDeviceGetGraphicsRunningProcesses", pynvml.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            for process in _call(operation, query, handle):
                used = process.usedGpuMemory
                seen.setdefault(
                    int(process.pid),
                    RunningProcess(pid=int(process.pid), used_memory=int(used or 0)),
                )
        return tuple(seen.values())

    def watch_xids(self) -> PynvmlXidWatch:
        return PynvmlXidWatch([self._handle(i) for i in range(self.device_count())])

    def close(self) -> None:
        _call("nvmlShutdown", pynvml.nvmlShutdown)


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
