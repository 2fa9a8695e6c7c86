"""An in-memory NVML for tests and the demo: GPUs, links, XID events and failures on demand.

    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(numa=1))
    nvml.link(0, 1, nvlinks=12)          # both directions, 12 NVLinks
    nvml.fail("device_memory", index=1)  # every later call for card 1 raises NvmlError
    nvml.inject_xid(0, 79)               # wakes a waiting XidWatch

MIG: A100-40G/A100-80G/H100-80G cards carry NVIDIA's GI profile tables (`mig_profiles`); GPU
instances occupy memory slices, so an overlapping create fails as NVML's does. A card starts
with MIG on when built with `mig=True`; `hold_mig_mode_pending` makes a mode change wait
for a GPU reset, `set_mig_processes` puts work on a MIG device.

`FakeNVML` implements `pyhami.nvml.Nvml`; `open()` stands in for `pyhami.nvml.open_nvml`.
"""

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial

from pyhami.model import MigPlacement
from pyhami.nvml import (
    SLICE_PROFILE_IDS,
    GpuInstance,
    GpuInstanceProfile,
    MemoryInfo,
    MigDevice,
    MigMode,
    NvLink,
    Nvml,
    NvmlError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    RunningProcess,
    TopologyLevel,
    Utilization,
    XidEvent,
)

MIB = 1024 * 1024

# Every Nvml method a test can make fail (`close` cannot), plus "open" (NVML init) and
# "xid_wait" (an XidWatch's wait); the dynamic-MIG ones are those about MIG or its instances.
OPERATIONS = frozenset(
    {name for name in vars(Nvml) if not name.startswith("_")} - {"close"} | {"open", "xid_wait"}
)
MIG_OPERATIONS = frozenset(op for op in OPERATIONS if "mig" in op or "instance" in op)

# NVML return codes the MIG model answers with.
_NOT_SUPPORTED = 3
_INVALID_ARGUMENT = 2
_NOT_FOUND = 6
_IN_USE = 19
_INSUFFICIENT_RESOURCES = 23


@dataclass(frozen=True, slots=True)
class FakeGiProfile:
    """One GI profile of a MIG-capable model: NVML's info plus the placements it may take."""

    info: GpuInstanceProfile
    placements: tuple[MigPlacement, ...]

    @property
    def name(self) -> str:
        return self.info.name


def _profile(
    name: str,
    profile_id: int,
    smi_id: int,
    memory_mib: int,
    sm_count: int,
    *,
    starts: tuple[int, ...],
    size: int,
) -> FakeGiProfile:
    slices = int(name.split("g.", 1)[0])
    return FakeGiProfile(
        info=GpuInstanceProfile(
            profile_id=profile_id,
            id=smi_id,
            slice_count=slices,
            memory_mib=memory_mib,
            sm_count=sm_count,
            instance_count=len(starts) if not name.endswith("+me") else 1,
            name=name,
        ),
        placements=tuple(MigPlacement(start, size) for start in starts),
    )


_ONE_SLICE_STARTS = (0, 1, 2, 3, 4, 5, 6)

# NVML GI profile enum values (nvml.h NVML_GPU_INSTANCE_PROFILE_*): 1_SLICE 0, 2_SLICE 1,
# 3_SLICE 2, 4_SLICE 3, 7_SLICE 4, 1_SLICE_REV1 (+me) 7, 1_SLICE_REV2 (double memory) 9.
# Ids, memory (nvidia-smi's GiB x 1024), SMs and placements follow NVIDIA's MIG user guide; the
# A100-40GB and H100-80GB rows match published `nvidia-smi mig -lgip` output.
_A100_40G_PROFILES = (
    _profile("1g.5gb", 0, 19, 4864, 14, starts=_ONE_SLICE_STARTS, size=1),
    _profile("1g.5gb+me", 7, 20, 4864, 14, starts=_ONE_SLICE_STARTS, size=1),
    _profile("1g.10gb", 9, 15, 9984, 14, starts=(0, 2, 4, 6), size=2),
    _profile("2g.10gb", 1, 14, 9984, 28, starts=(0, 2, 4), size=2),
    _profile("3g.20gb", 2, 9, 20096, 42, starts=(0, 4), size=4),
    _profile("4g.20gb", 3, 5, 20096, 56, starts=(0,), size=4),
    _profile("7g.40gb", 4, 0, 40448, 98, starts=(0,), size=8),
)
_A100_80G_PROFILES = (
    _profile("1g.10gb", 0, 19, 9728, 14, starts=_ONE_SLICE_STARTS, size=1),
    _profile("1g.10gb+me", 7, 20, 9728, 14, starts=_ONE_SLICE_STARTS, size=1),
    _profile("1g.20gb", 9, 15, 19968, 14, starts=(0, 2, 4, 6), size=2),
    _profile("2g.20gb", 1, 14, 19968, 28, starts=(0, 2, 4), size=2),
    _profile("3g.40gb", 2, 9, 40192, 42, starts=(0, 4), size=4),
    _profile("4g.40gb", 3, 5, 40192, 56, starts=(0,), size=4),
    _profile("7g.80gb", 4, 0, 80640, 98, starts=(0,), size=8),
)
_H100_80G_PROFILES = (
    _profile("1g.10gb", 0, 19, 9984, 16, starts=_ONE_SLICE_STARTS, size=1),
    _profile("1g.10gb+me", 7, 20, 9984, 16, starts=_ONE_SLICE_STARTS, size=1),
    _profile("1g.20gb", 9, 15, 20096, 26, starts=(0, 2, 4, 6), size=2),
    _profile("2g.20gb", 1, 14, 20096, 32, starts=(0, 2, 4), size=2),
    _profile("3g.40gb", 2, 9, 40448, 60, starts=(0, 4), size=4),
    _profile("4g.40gb", 3, 5, 40448, 64, starts=(0,), size=4),
    _profile("7g.80gb", 4, 0, 81152, 132, starts=(0,), size=8),
)

# CI profile enum value -> compute slices.
_CI_SLICES = {profile: slices for slices, profile in SLICE_PROFILE_IDS.items()}


def mig_profiles(gpu_name: str) -> tuple[FakeGiProfile, ...]:
    """The GI profiles the fake offers for a card name; () for a card without MIG."""
    if "A100" in gpu_name:
        return _A100_80G_PROFILES if "80GB" in gpu_name else _A100_40G_PROFILES
    if "H100" in gpu_name:
        return _H100_80G_PROFILES
    return ()


@dataclass(slots=True)
class _MigState:
    """MIG mode and the live GIs/CIs of one card."""

    current: bool
    pending: bool
    hold_pending: bool = False
    instances: dict[int, GpuInstance] = field(default_factory=dict)
    devices: dict[tuple[int, int], MigDevice] = field(default_factory=dict)
    ci_slices: dict[tuple[int, int], int] = field(default_factory=dict)
    processes: dict[str, tuple[RunningProcess, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FakeGpu:
    """One card as the fake reports it. Empty uuid / bus_id are filled in from the index."""

    name: str
    memory_total_mib: int | None  # None: NVML says NOT_SUPPORTED (unified-memory boards)
    numa: int | None = 0
    uuid: str = ""
    bus_id: str = ""
    memory_used_mib: int = 0
    utilization: Utilization = field(default_factory=lambda: Utilization(gpu=0, memory=0))
    processes: tuple[RunningProcess, ...] = ()
    mig: bool = False  # MIG mode on from the start


a100_80g = partial(FakeGpu, "NVIDIA A100-SXM4-80GB", 81920)
a100_40g = partial(FakeGpu, "NVIDIA A100-PCIE-40GB", 40960)
h100_80g = partial(FakeGpu, "NVIDIA H100 80GB HBM3", 81559)
v100_32g = partial(FakeGpu, "Tesla V100-PCIE-32GB", 32768)
t4 = partial(FakeGpu, "Tesla T4", 15360)
gb10 = partial(FakeGpu, "NVIDIA GB10", None)  # unified memory: NVML cannot report it


@dataclass(slots=True)
class _Failure:
    error: NvmlError
    remaining: int | None  # None: until healed


@dataclass(slots=True)
class _State:
    gpus: list[FakeGpu]
    links: dict[int, list[NvLink]] = field(default_factory=dict)
    levels: dict[frozenset[int], TopologyLevel] = field(default_factory=dict)
    failures: dict[tuple[str, int | None], _Failure] = field(default_factory=dict)
    unwatchable: set[int] = field(default_factory=set)
    driver_present: bool = True
    mig: dict[int, _MigState] = field(default_factory=dict)
    created_mig_devices: int = 0


class FakeXidWatch:
    """Delivers events injected with `FakeNVML.inject_xid`, in order."""

    def __init__(self, owner: "FakeNVML", unwatched: tuple[int, ...]) -> None:
        self._owner = owner
        self.unwatched = unwatched
        self._events: deque[XidEvent] = deque()
        self._ready = threading.Condition()
        self._waiting = 0
        self.closed = False
        # Real NVML must not free an event set while a thread waits on it; the fake records it.
        self.closed_while_waiting = False

    def push(self, event: XidEvent) -> None:
        with self._ready:
            self._events.append(event)
            self._ready.notify_all()

    def wait(self, timeout_ms: int) -> XidEvent | None:
        self._owner.check("xid_wait", None)
        with self._ready:
            self._waiting += 1
            try:
                if not self._events:
                    self._ready.wait(timeout_ms / 1000)
                return self._events.popleft() if self._events else None
            finally:
                self._waiting -= 1

    def close(self) -> None:
        with self._ready:
            self.closed_while_waiting = self.closed_while_waiting or self._waiting > 0
        self.closed = True
        self._owner.forget_watch(self)


class FakeNVML:
    """A scriptable NVML session. Thread-safe: the device plugin calls it from worker threads."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        filled = [
            replace(
                gpu,
                uuid=gpu.uuid or f"GPU-{index:08x}-7a1e-4c2b-9d3f-{index:012x}",
                bus_id=gpu.bus_id or f"0000:{0x10 + index:02x}:00.0",
            )
            for index, gpu in enumerate(gpus)
        ]
        self._state = _State(
            gpus=filled,
            mig={
                index: _MigState(current=gpu.mig, pending=gpu.mig)
                for index, gpu in enumerate(filled)
                if mig_profiles(gpu.name)
            },
        )
        self._lock = threading.Lock()
        self._watches: list[FakeXidWatch] = []
        self.created_watches: list[FakeXidWatch] = []
        self.opened = 0
        self.closed = 0
        self.driver = "570.86.15"  # what `driver_version` answers
        self.cuda_version = 12080  # what `cuda_driver_version` answers (CUDA 12.8)

    @classmethod
    def with_gpus(cls, *gpus: FakeGpu) -> "FakeNVML":
        return cls(list(gpus))

    # ----- scripting -----

    def link(self, first: int, second: int, *, nvlinks: int, one_way: bool = False) -> None:
        """Add `nvlinks` direct NVLinks from `first` to `second` (and back unless `one_way`)."""
        with self._lock:
            self._add_links(first, self._gpu(second).bus_id, nvlinks, is_switch=False)
            if not one_way:
                self._add_links(second, self._gpu(first).bus_id, nvlinks, is_switch=False)

    def connect_switch(self, index: int, *, nvlinks: int) -> None:
        """Add `nvlinks` NVLinks from the card to an NVSwitch."""
        with self._lock:
            self._add_links(index, "0000:c0:00.0", nvlinks, is_switch=True)

    def set_topology(self, first: int, second: int, level: TopologyLevel) -> None:
        with self._lock:
            self._gpu(first)
            self._gpu(second)
            self._state.levels[frozenset((first, second))] = level

    def set_usage(
        self,
        index: int,
        *,
        memory_used_mib: int | None = None,
        utilization: Utilization | None = None,
        processes: tuple[RunningProcess, ...] | None = None,
    ) -> None:
        with self._lock:
            gpu = self._gpu(index)
            self._state.gpus[index] = replace(
                gpu,
                memory_used_mib=gpu.memory_used_mib if memory_used_mib is None else memory_used_mib,
                utilization=gpu.utilization if utilization is None else utilization,
                processes=gpu.processes if processes is None else processes,
            )

    def fail(
        self,
        operation: str,
        index: int | None = None,
        *,
        error: NvmlError | None = None,
        times: int | None = None,
    ) -> None:
        """Make `operation` raise for card `index` (None: every card), `times` times or forever."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown NVML operation {operation!r}; one of {sorted(OPERATIONS)}")
        injected = error or NvmlError(operation, "injected failure (FakeNVML)", code=999)
        with self._lock:
            self._state.failures[(operation, index)] = _Failure(injected, times)

    def heal(self, operation: str | None = None, index: int | None = None) -> None:
        """Undo `fail` for one operation/card, or every injected failure when called bare."""
        with self._lock:
            if operation is None:
                self._state.failures.clear()
            else:
                self._state.failures.pop((operation, index), None)

    def remove_driver(self) -> None:
        """From now on `open()` raises NvmlUnavailableError, as on a node without a driver."""
        with self._lock:
            self._state.driver_present = False

    def make_unwatchable(self, index: int) -> None:
        """Event registration fails for this card in the next `watch_xids()`."""
        with self._lock:
            self._gpu(index)
            self._state.unwatchable.add(index)

    def inject_xid(self, index: int, xid: int) -> None:
        """Report XID `xid` on card `index` to every open watch."""
        with self._lock:
            event = XidEvent(uuid=self._gpu(index).uuid, xid=xid)
            watches = list(self._watches)
        for watch in watches:
            watch.push(event)

    def forget_watch(self, watch: FakeXidWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def hold_mig_mode_pending(self, index: int) -> None:
        """Later MIG mode changes on this card stay pending, as when the GPU cannot be reset."""
        with self._lock:
            self._mig(index, "hold_mig_mode_pending").hold_pending = True

    def set_mig_processes(
        self, index: int, mig_uuid: str, processes: tuple[RunningProcess, ...]
    ) -> None:
        with self._lock:
            state = self._mig(index, "set_mig_processes")
            if not any(device.uuid == mig_uuid for device in state.devices.values()):
                raise ValueError(f"card {index} has no MIG device {mig_uuid!r}")
            state.processes[mig_uuid] = processes

    @property
    def open_watches(self) -> int:
        """How many XidWatch objects are open (tests wait for the plugin to start watching)."""
        with self._lock:
            return len(self._watches)

    @property
    def gpus(self) -> tuple[FakeGpu, ...]:
        with self._lock:
            return tuple(self._state.gpus)

    def check(self, operation: str, index: int | None) -> None:
        """Raise the failure injected for this call, if any (used by the fake's own methods)."""
        with self._lock:
            for key in ((operation, index), (operation, None)):
                failure = self._state.failures.get(key)
                if failure is None:
                    continue
                if failure.remaining is not None:
                    failure.remaining -= 1
                    if failure.remaining <= 0:
                        del self._state.failures[key]
                raise failure.error

    # ----- the Nvml interface -----

    def open(self) -> "FakeNVML":
        """Like `pyhami.nvml.open_nvml()`: this fake, or NvmlUnavailableError without a driver."""
        with self._lock:
            present = self._state.driver_present
        if not present:
            raise NvmlUnavailableError("nvmlInit", "NVML Shared Library Not Found (FakeNVML)", 12)
        self.check("open", None)
        self.opened += 1
        return self

    def device_count(self) -> int:
        with self._calling("device_count", None):
            return len(self._state.gpus)

    def driver_version(self) -> str:
        self.check("driver_version", None)
        return self.driver

    def cuda_driver_version(self) -> int:
        self.check("cuda_driver_version", None)
        return self.cuda_version

    def device_uuid(self, index: int) -> str:
        return self._read("device_uuid", index).uuid

    def device_name(self, index: int) -> str:
        return self._read("device_name", index).name

    def device_memory(self, index: int) -> MemoryInfo:
        gpu = self._read("device_memory", index)
        if gpu.memory_total_mib is None:
            raise NvmlNotSupportedError("nvmlDeviceGetMemoryInfo", "Not Supported", code=3)
        return MemoryInfo(total=gpu.memory_total_mib * MIB, used=gpu.memory_used_mib * MIB)

    def device_bus_id(self, index: int) -> str:
        return self._read("device_bus_id", index).bus_id

    def device_numa_node(self, index: int) -> int | None:
        return self._read("device_numa_node", index).numa

    def topology_level(self, first: int, second: int) -> TopologyLevel:
        a = self._read("topology_level", first)
        b = self._read("topology_level", second)
        with self._lock:
            level = self._state.levels.get(frozenset((first, second)))
        if level is not None:
            return level
        return TopologyLevel.NODE if a.numa == b.numa else TopologyLevel.SYSTEM

    def nvlinks(self, index: int) -> tuple[NvLink, ...]:
        self._read("nvlinks", index)
        with self._lock:
            return tuple(self._state.links.get(index, ()))

    def utilization(self, index: int) -> Utilization:
        return self._read("utilization", index).utilization

    def running_processes(self, index: int) -> tuple[RunningProcess, ...]:
        return self._read("running_processes", index).processes

    def watch_xids(self) -> FakeXidWatch:
        with self._calling("watch_xids", None):
            watch = FakeXidWatch(self, tuple(sorted(self._state.unwatchable)))
            self._watches.append(watch)
            self.created_watches.append(watch)
        return watch

    # ----- dynamic MIG -----

    def mig_mode(self, index: int) -> MigMode:
        with self._calling("mig_mode", index):
            state = self._mig(index, "nvmlDeviceGetMigMode")
            return MigMode(current=state.current, pending=state.pending)

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        with self._calling("set_mig_mode", index):
            state = self._mig(index, "nvmlDeviceSetMigMode")
            if not enabled and state.instances:
                raise NvmlError("nvmlDeviceSetMigMode", "In use by another client", _IN_USE)
            state.pending = enabled
            if not state.hold_pending:
                state.current = enabled

    def gpu_instance_profile(self, index: int, profile: int) -> GpuInstanceProfile:
        operation = "nvmlDeviceGetGpuInstanceProfileInfo"
        with self._calling("gpu_instance_profile", index):
            self._enabled_mig(index, operation)
            return self._profile(index, operation, lambda p: p.info.profile_id == profile).info

    def gpu_instance_placements(self, index: int, gi_profile_id: int) -> tuple[MigPlacement, ...]:
        with self._calling("gpu_instance_placements", index):
            operation = "nvmlDeviceGetGpuInstancePossiblePlacements"
            return self._gi_profile(index, gi_profile_id, operation).placements

    def create_gpu_instance(
        self, index: int, gi_profile_id: int, placement: MigPlacement
    ) -> GpuInstance:
        operation = "nvmlDeviceCreateGpuInstanceWithPlacement"
        with self._calling("create_gpu_instance", index):
            profile = self._gi_profile(index, gi_profile_id, operation)
            state = self._state.mig[index]
            if placement not in profile.placements:
                raise NvmlError(
                    operation, f"Invalid Argument (placement {placement})", _INVALID_ARGUMENT
                )
            same_profile = sum(
                1 for gi in state.instances.values() if gi.profile_id == gi_profile_id
            )
            if same_profile >= profile.info.instance_count or any(
                _overlaps(gi.placement, placement) for gi in state.instances.values()
            ):
                raise NvmlError(operation, "Insufficient Resources", _INSUFFICIENT_RESOURCES)
            # The fake's id rule: the full-GPU profile gets 0, others the lowest free id from 1.
            ids = [0] if profile.info.slice_count >= 7 else range(1, 16)
            gi_id = next(i for i in ids if i not in state.instances)
            instance = GpuInstance(id=gi_id, profile_id=gi_profile_id, placement=placement)
            state.instances[gi_id] = instance
            return instance

    def create_compute_instance(
        self, index: int, gpu_instance_id: int, ci_profile: int
    ) -> MigDevice:
        operation = "nvmlGpuInstanceCreateComputeInstance"
        with self._calling("create_compute_instance", index):
            state = self._enabled_mig(index, operation)
            instance = self._instance(state, gpu_instance_id, operation)
            gi_slices = self._gi_profile(index, instance.profile_id, operation).info.slice_count
            ci_slices = _CI_SLICES.get(ci_profile)
            if ci_slices is None or ci_slices > gi_slices:
                raise NvmlError(
                    operation, f"Not Supported (CI profile {ci_profile})", _NOT_SUPPORTED
                )
            used = sum(
                slices for key, slices in state.ci_slices.items() if key[0] == gpu_instance_id
            )
            if used + ci_slices > gi_slices:
                raise NvmlError(operation, "Insufficient Resources", _INSUFFICIENT_RESOURCES)
            ci_id = next(i for i in range(8) if (gpu_instance_id, i) not in state.devices)
            self._state.created_mig_devices += 1
            serial = self._state.created_mig_devices
            device = MigDevice(
                uuid=f"MIG-{index:08x}-{gpu_instance_id:04x}-{ci_id:04x}-0000-{serial:012x}",
                gpu_instance_id=gpu_instance_id,
                compute_instance_id=ci_id,
            )
            state.devices[(gpu_instance_id, ci_id)] = device
            state.ci_slices[(gpu_instance_id, ci_id)] = ci_slices
            return device

    def gpu_instances(self, index: int) -> tuple[GpuInstance, ...]:
        with self._calling("gpu_instances", index):
            state = self._enabled_mig(index, "nvmlDeviceGetGpuInstances")
            return tuple(state.instances[gi_id] for gi_id in sorted(state.instances))

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        with self._calling("mig_devices", index):
            state = self._mig(index, "nvmlDeviceGetMigDeviceHandleByIndex")
            return tuple(state.devices[key] for key in sorted(state.devices))

    def destroy_compute_instance(
        self, index: int, gpu_instance_id: int, compute_instance_id: int
    ) -> None:
        operation = "nvmlComputeInstanceDestroy"
        with self._calling("destroy_compute_instance", index):
            state = self._enabled_mig(index, operation)
            device = state.devices.get((gpu_instance_id, compute_instance_id))
            if device is None:
                raise NvmlError(
                    operation,
                    f"Not Found (GI {gpu_instance_id} CI {compute_instance_id})",
                    _NOT_FOUND,
                )
            if state.processes.get(device.uuid):
                raise NvmlError(operation, "In use by another client", _IN_USE)
            del state.devices[(gpu_instance_id, compute_instance_id)]
            del state.ci_slices[(gpu_instance_id, compute_instance_id)]
            state.processes.pop(device.uuid, None)

    def destroy_gpu_instance(self, index: int, gpu_instance_id: int) -> None:
        operation = "nvmlGpuInstanceDestroy"
        with self._calling("destroy_gpu_instance", index):
            state = self._enabled_mig(index, operation)
            self._instance(state, gpu_instance_id, operation)
            if any(key[0] == gpu_instance_id for key in state.devices):
                raise NvmlError(operation, "In use by another client", _IN_USE)
            del state.instances[gpu_instance_id]

    def mig_device_processes(self, index: int, mig_uuid: str) -> tuple[RunningProcess, ...]:
        with self._calling("mig_device_processes", index):
            state = self._mig(index, "nvmlDeviceGetHandleByUUID")
            if not any(device.uuid == mig_uuid for device in state.devices.values()):
                raise NvmlError("nvmlDeviceGetHandleByUUID", f"Not Found ({mig_uuid})", _NOT_FOUND)
            return state.processes.get(mig_uuid, ())

    def close(self) -> None:
        self.closed += 1

    # ----- internals -----

    @contextlib.contextmanager
    def _calling(self, operation: str, index: int | None) -> Iterator[None]:
        """One Nvml call: the failure injected for it, if any, else the state, locked."""
        self.check(operation, index)
        with self._lock:
            yield

    def _gpu(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self._state.gpus):
            raise NvmlError(
                f"nvmlDeviceGetHandleByIndex({index})", "Invalid Argument (no such index)", code=2
            )
        return self._state.gpus[index]

    def _mig(self, index: int, operation: str) -> _MigState:
        gpu = self._gpu(index)
        state = self._state.mig.get(index)
        if state is None:
            raise NvmlNotSupportedError(
                operation, f"Not Supported ({gpu.name} has no MIG)", _NOT_SUPPORTED
            )
        return state

    def _enabled_mig(self, index: int, operation: str) -> _MigState:
        state = self._mig(index, operation)
        if not state.current:
            raise NvmlNotSupportedError(
                operation, "Not Supported (MIG mode is disabled)", _NOT_SUPPORTED
            )
        return state

    def _profile(
        self, index: int, operation: str, wanted: Callable[[FakeGiProfile], bool]
    ) -> FakeGiProfile:
        for profile in mig_profiles(self._gpu(index).name):
            if wanted(profile):
                return profile
        raise NvmlNotSupportedError(operation, "Not Supported (no such GI profile)", _NOT_SUPPORTED)

    def _gi_profile(self, index: int, gi_profile_id: int, operation: str) -> FakeGiProfile:
        """The profile with NVML's profile id `gi_profile_id` (placements, create, instances)."""
        self._enabled_mig(index, operation)
        return self._profile(index, operation, lambda p: p.info.id == gi_profile_id)

    @staticmethod
    def _instance(state: _MigState, gpu_instance_id: int, operation: str) -> GpuInstance:
        instance = state.instances.get(gpu_instance_id)
        if instance is None:
            raise NvmlError(operation, f"Not Found (GPU instance {gpu_instance_id})", _NOT_FOUND)
        return instance

    def _read(self, operation: str, index: int) -> FakeGpu:
        with self._calling(operation, index):
            return self._gpu(index)

    def _add_links(self, index: int, remote_bus_id: str, count: int, *, is_switch: bool) -> None:
        self._gpu(index)
        link = NvLink(remote_bus_id=remote_bus_id, remote_is_switch=is_switch)
        self._state.links.setdefault(index, []).extend([link] * count)


def _overlaps(first: MigPlacement, second: MigPlacement) -> bool:
    return first.start < second.start + second.size and second.start < first.start + first.size
