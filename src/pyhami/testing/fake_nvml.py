"""An in-memory NVML for tests and the demo: GPUs, links, XID events and failures on demand.

    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(numa=1))
    nvml.link(0, 1, nvlinks=12)          # both directions, 12 NVLinks
    nvml.fail("device_memory", index=1)  # every later call for card 1 raises NvmlError
    nvml.inject_xid(0, 79)               # wakes a waiting XidWatch

`FakeNVML` implements `pyhami.nvml.Nvml`; `open()` stands in for `pyhami.nvml.open_nvml`.
"""

import threading
from collections import deque
from dataclasses import dataclass, field, replace

from pyhami.nvml import (
    MemoryInfo,
    NvLink,
    NvmlError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    RunningProcess,
    TopologyLevel,
    Utilization,
    XidEvent,
)

MIB = 1024 * 1024

# The Nvml methods a test can make fail, plus "open" (NVML init).
OPERATIONS = frozenset(
    {
        "open",
        "device_count",
        "device_uuid",
        "device_name",
        "device_memory",
        "device_bus_id",
        "device_numa_node",
        "topology_level",
        "nvlinks",
        "utilization",
        "running_processes",
        "watch_xids",
        "xid_wait",
    }
)


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


def a100_80g(numa: int | None = 0, uuid: str = "") -> FakeGpu:
    return FakeGpu("NVIDIA A100-SXM4-80GB", 81920, numa=numa, uuid=uuid)


def a100_40g(numa: int | None = 0, uuid: str = "") -> FakeGpu:
    return FakeGpu("NVIDIA A100-PCIE-40GB", 40960, numa=numa, uuid=uuid)


def h100_80g(numa: int | None = 0, uuid: str = "") -> FakeGpu:
    return FakeGpu("NVIDIA H100 80GB HBM3", 81559, numa=numa, uuid=uuid)


def v100_32g(numa: int | None = 0, uuid: str = "") -> FakeGpu:
    return FakeGpu("Tesla V100-PCIE-32GB", 32768, numa=numa, uuid=uuid)


def t4(numa: int | None = 0, uuid: str = "") -> FakeGpu:
    return FakeGpu("Tesla T4", 15360, numa=numa, uuid=uuid)


def gb10(numa: int | None = 0, uuid: str = "") -> FakeGpu:
    """A unified-memory board: NVML cannot report its memory."""
    return FakeGpu("NVIDIA GB10", None, numa=numa, uuid=uuid)


def _default_uuid(index: int) -> str:
    return f"GPU-{index:08x}-7a1e-4c2b-9d3f-{index:012x}"


def _default_bus_id(index: int) -> str:
    return f"0000:{0x10 + index:02x}:00.0"


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


class FakeXidWatch:
    """Delivers events injected with `FakeNVML.inject_xid`, in order."""

    def __init__(self, owner: "FakeNVML", unwatched: tuple[int, ...]) -> None:
        self._owner = owner
        self._unwatched = unwatched
        self._events: deque[XidEvent] = deque()
        self._ready = threading.Condition()
        self._waiting = 0
        self.closed = False
        # Real NVML must not free an event set while a thread waits on it; the fake records it.
        self.closed_while_waiting = False

    @property
    def unwatched(self) -> tuple[int, ...]:
        return self._unwatched

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
                uuid=gpu.uuid or _default_uuid(index),
                bus_id=gpu.bus_id or _default_bus_id(index),
            )
            for index, gpu in enumerate(gpus)
        ]
        self._state = _State(gpus=filled)
        self._lock = threading.Lock()
        self._watches: list[FakeXidWatch] = []
        self.created_watches: list[FakeXidWatch] = []
        self.opened = 0
        self.closed = 0

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

    def connect_switch(
        self, index: int, *, nvlinks: int, switch_bus_id: str = "0000:c0:00.0"
    ) -> None:
        """Add `nvlinks` NVLinks from the card to an NVSwitch."""
        with self._lock:
            self._add_links(index, switch_bus_id, nvlinks, is_switch=True)

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
        self.check("device_count", None)
        with self._lock:
            return len(self._state.gpus)

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
        self.check("watch_xids", None)
        with self._lock:
            watch = FakeXidWatch(self, tuple(sorted(self._state.unwatchable)))
            self._watches.append(watch)
            self.created_watches.append(watch)
        return watch

    def close(self) -> None:
        self.closed += 1

    # ----- internals -----

    def _gpu(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self._state.gpus):
            raise NvmlError(
                f"nvmlDeviceGetHandleByIndex({index})", "Invalid Argument (no such index)", code=2
            )
        return self._state.gpus[index]

    def _read(self, operation: str, index: int) -> FakeGpu:
        self.check(operation, index)
        with self._lock:
            return self._gpu(index)

    def _add_links(self, index: int, remote_bus_id: str, count: int, *, is_switch: bool) -> None:
        self._gpu(index)
        link = NvLink(remote_bus_id=remote_bus_id, remote_is_switch=is_switch)
        self._state.links.setdefault(index, []).extend([link] * count)
