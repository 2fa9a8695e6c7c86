"""The slice of NVML that the device plugin and the monitor use, as a small typed interface.

Devices are addressed by their NVML index. Every method raises `NvmlError` (or a subclass) on
failure and nothing else, so callers can report a broken card and keep serving the others.
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pyhami.model import MigPlacement


class NvmlError(Exception):
    """An NVML call failed; `operation` names the call, `code` is NVML's return code if known."""

    def __init__(self, operation: str, detail: str, code: int | None = None) -> None:
        super().__init__(f"NVML {operation} failed: {detail}")
        self.operation = operation
        self.detail = detail
        self.code = code


class NvmlNotSupportedError(NvmlError):
    """The device or driver does not support this query (e.g. memory on unified-memory GPUs)."""


class NvmlUnavailableError(NvmlError):
    """There is no usable NVML at all: library missing, driver not loaded, or init failed."""


class TopologyLevel(enum.IntEnum):
    """Closest common ancestor of two GPUs on the PCIe tree; values are NVML's."""

    INTERNAL = 0  # same board
    SINGLE = 10  # one PCIe switch
    MULTIPLE = 20  # several PCIe switches
    HOSTBRIDGE = 30  # same host bridge
    NODE = 40  # same CPU / NUMA node
    SYSTEM = 50  # across CPUs (SMP interconnect)


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """Device memory in bytes."""

    total: int
    used: int


@dataclass(frozen=True, slots=True)
class Utilization:
    """Percent of time busy over NVML's last sample period."""

    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class RunningProcess:
    """A process holding a context on the device; memory in bytes (0 when NVML cannot tell)."""

    pid: int
    used_memory: int


@dataclass(frozen=True, slots=True)
class NvLink:
    """One active NVLink of a device: the PCI bus id at the far end and whether it is a switch."""

    remote_bus_id: str
    remote_is_switch: bool


@dataclass(frozen=True, slots=True)
class XidEvent:
    """An XID critical error reported by the driver for the device with this UUID."""

    uuid: str
    xid: int


class XidWatch(Protocol):
    """XID critical-error events of every device, registered once."""

    @property
    def unwatched(self) -> tuple[int, ...]:
        """Indices of devices whose events could not be registered (treat them as unhealthy)."""

    def wait(self, timeout_ms: int) -> XidEvent | None:
        """Block up to `timeout_ms` for the next event; None on timeout."""

    def close(self) -> None: ...


# NVML_GPU_INSTANCE_PROFILE_<n>_SLICE and NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE, by slice
# count <n>: the two enums share these values.
SLICE_PROFILE_IDS: Mapping[int, int] = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
# Every GI profile enum value current drivers know (NVML_GPU_INSTANCE_PROFILE_COUNT); a driver
# that lacks one answers NvmlNotSupportedError for it.
GI_PROFILE_ID_COUNT = 18


@dataclass(frozen=True, slots=True)
class MigMode:
    """MIG mode of a GPU: what is in effect and what takes effect after the next GPU reset."""

    current: bool
    pending: bool


@dataclass(frozen=True, slots=True)
class GpuInstanceProfile:
    """NVML's GI profile info. `profile_id` is the enum asked for (0 = 1_SLICE); `id` is NVML's
    profile id (nvidia-smi's number, 19 for 1g.10gb), which placements, creation and
    `GpuInstance.profile_id` use.

    `name` is NVML's without the `MIG ` prefix (`1g.10gb+me`); "" when the driver does not say.
    """

    profile_id: int
    id: int
    slice_count: int
    memory_mib: int
    sm_count: int
    instance_count: int
    name: str = ""


@dataclass(frozen=True, slots=True)
class GpuInstance:
    """A live GPU instance: its id on the GPU, NVML's profile id and its placement."""

    id: int
    profile_id: int
    placement: MigPlacement


@dataclass(frozen=True, slots=True)
class MigDevice:
    """A MIG device (one compute instance of a GI) as CUDA sees it."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int


class Nvml(Protocol):
    """An initialised NVML session; `close()` shuts it down."""

    def device_count(self) -> int: ...

    def driver_version(self) -> str:
        """The kernel driver's version as NVML prints it, e.g. `570.86.15`."""

    def cuda_driver_version(self) -> int:
        """The CUDA version the driver supports, encoded as 1000 * major + 10 * minor."""

    def device_uuid(self, index: int) -> str: ...

    def device_name(self, index: int) -> str: ...

    def device_memory(self, index: int) -> MemoryInfo: ...

    def device_bus_id(self, index: int) -> str:
        """PCI bus id in sysfs form, lower case with a 4-digit domain: `0000:3b:00.0`."""

    def device_numa_node(self, index: int) -> int | None:
        """NUMA node of the device's PCI slot; None when the platform does not say."""

    def topology_level(self, first: int, second: int) -> TopologyLevel: ...

    def nvlinks(self, index: int) -> tuple[NvLink, ...]:
        """The device's active NVLinks (empty when it has none or NVLink is unsupported)."""

    def utilization(self, index: int) -> Utilization: ...

    def running_processes(self, index: int) -> tuple[RunningProcess, ...]:
        """Compute and graphics processes on the device (a pid appears once)."""

    def watch_xids(self) -> XidWatch: ...

    # ----- dynamic MIG (device index = the parent GPU) -----

    def mig_mode(self, index: int) -> MigMode: ...

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        """Request a MIG mode; it may stay pending until the GPU is reset (see `mig_mode`)."""

    def gpu_instance_profile(self, index: int, profile: int) -> GpuInstanceProfile:
        """Info of GI profile enum `profile`; NvmlNotSupportedError when the GPU or the driver
        lacks it."""

    def gpu_instance_placements(self, index: int, gi_profile_id: int) -> tuple[MigPlacement, ...]:
        """Every placement the profile (`GpuInstanceProfile.id`) may take, occupied or not."""

    def create_gpu_instance(
        self, index: int, gi_profile_id: int, placement: MigPlacement
    ) -> GpuInstance: ...

    def create_compute_instance(
        self, index: int, gpu_instance_id: int, ci_profile: int
    ) -> MigDevice:
        """A CI of CI profile enum `ci_profile` (shared engines) in the GI: its MIG device."""

    def gpu_instances(self, index: int) -> tuple[GpuInstance, ...]: ...

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        """Every compute instance on the GPU, with its MIG UUID."""

    def destroy_compute_instance(
        self, index: int, gpu_instance_id: int, compute_instance_id: int
    ) -> None: ...

    def destroy_gpu_instance(self, index: int, gpu_instance_id: int) -> None:
        """Destroy a GI; NVML refuses (IN_USE) while it still holds compute instances."""

    def mig_device_processes(self, index: int, mig_uuid: str) -> tuple[RunningProcess, ...]: ...

    def close(self) -> None: ...
