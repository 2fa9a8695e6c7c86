"""Impossible values in a region: logged once and counted, never a crash, never exported.

Each distinct finding (container, kind, process slot, device) is reported when first seen;
seeing it again on later scrapes does not count again, so the counter's rate is the rate of
new problems. Findings of containers that are gone are forgotten.

The region is written by the container, so its numbers are claims. Memory above what the card
has, a limit above it, or a process above 100 % SM cannot be true: such a snapshot is refused
(`_REFUSING`) and the container's series fall back to its allocation, so that a
value like 4.6e20 never reaches `/metrics`. Negative counters only count as 0 in the sums.
"""

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import structlog

from pyhami.monitor.host import HostCard
from pyhami.monitor.region import RegionSnapshot, VirtualDevice
from pyhami.monitor.scan import ContainerKey

log = structlog.get_logger(__name__)

MAX_SM_UTIL = 100
# The bound on a device's memory when NVML does not know the card (no NVML, a MIG device):
# 16 TiB, far above any GPU's memory and far below a corrupted counter.
PLAUSIBLE_MEMORY_BYTES = 1 << 44
PID_MAX = 1 << 22  # the largest pid_max Linux accepts


class AlarmKind(enum.StrEnum):
    NEGATIVE_COUNTER = "negative_counter"  # a usage counter below zero (an underflow)
    ABOVE_PHYSICAL = "above_physical"  # more memory in use than the card has
    LIMIT_ABOVE_PHYSICAL = "limit_above_physical"  # a memory limit above what the card has
    IMPOSSIBLE_UTILIZATION = "impossible_utilization"  # a process above 100 % SM
    # A live slot without a pid or with one Linux cannot have, or using a card NVML says it is
    # not on.
    UNKNOWN_PID = "unknown_pid"


# A snapshot with one of these findings must not be exported.
_REFUSING = frozenset(
    {AlarmKind.ABOVE_PHYSICAL, AlarmKind.LIMIT_ABOVE_PHYSICAL, AlarmKind.IMPOSSIBLE_UTILIZATION}
)


@dataclass(frozen=True, slots=True)
class Finding:
    kind: AlarmKind
    slot: int  # process slot, -1 for region-wide findings
    device: int  # device index, -1 for process-wide findings
    pid: int  # the slot's pid (0 for region-wide), so a reused slot counts anew
    detail: str = field(compare=False)


def findings(snapshot: RegionSnapshot, cards: Mapping[str, HostCard]) -> Iterator[Finding]:
    """Everything impossible in one snapshot; `cards` by UUID (may be empty without NVML)."""
    for process in snapshot.processes:
        slot, pid = process.slot, process.pid
        if not 0 < pid <= PID_MAX or not 0 <= process.hostpid <= PID_MAX:
            detail = f"live slot with pid {pid} hostpid {process.hostpid}"
            yield Finding(AlarmKind.UNKNOWN_PID, slot, -1, pid, detail)
        counters = (process.totals, process.contexts, process.modules, process.buffers)
        for index, values in enumerate(zip(*counters, process.sm_utils, strict=True)):
            if min(values) < 0:
                yield Finding(AlarmKind.NEGATIVE_COUNTER, slot, index, pid, f"counters {values}")
            if values[-1] > MAX_SM_UTIL:
                detail = f"smUtil {values[-1]} %"
                yield Finding(AlarmKind.IMPOSSIBLE_UTILIZATION, slot, index, pid, detail)
    for device in snapshot.devices:
        card = cards.get(device.uuid)
        yield from _memory_findings(device, card)
        if card is None or card.pids is None:
            continue
        for process in snapshot.processes:
            uses = process.totals[device.index] > 0
            if uses and process.hostpid > 0 and process.hostpid not in card.pids:
                detail = f"hostpid {process.hostpid} uses {device.uuid} but NVML does not list it"
                yield Finding(
                    AlarmKind.UNKNOWN_PID, process.slot, device.index, process.pid, detail
                )


def _memory_findings(device: VirtualDevice, card: HostCard | None) -> Iterator[Finding]:
    capacity = PLAUSIBLE_MEMORY_BYTES if card is None else card.memory.total
    what = "any GPU" if card is None else "the card"
    usage = {name: getattr(device, name) for name in ("used", "context", "module", "buffer")}
    above = ", ".join(f"{name} {value}" for name, value in usage.items() if value > capacity)
    if above:
        detail = f"{above} bytes on {device.uuid}, more than the {capacity} bytes {what} has"
        yield Finding(AlarmKind.ABOVE_PHYSICAL, -1, device.index, 0, detail)
    if device.limit > capacity:
        detail = (
            f"limit {device.limit} bytes on {device.uuid}, above the {capacity} bytes {what} has"
        )
        yield Finding(AlarmKind.LIMIT_ABOVE_PHYSICAL, -1, device.index, 0, detail)


class SanityAlarms:
    """Counts distinct findings per kind; `check` is called with each fresh snapshot."""

    def __init__(self) -> None:
        self.counts: dict[AlarmKind, int] = dict.fromkeys(AlarmKind, 0)
        self._seen: dict[ContainerKey, set[Finding]] = {}

    def check(
        self, key: ContainerKey, snapshot: RegionSnapshot, cards: Mapping[str, HostCard]
    ) -> list[Finding]:
        """Count and log what is new; returns the findings that refuse the snapshot."""
        seen = self._seen.setdefault(key, set())
        refusing = []
        for finding in findings(snapshot, cards):
            if finding.kind in _REFUSING:
                refusing.append(finding)
            if finding in seen:
                continue
            seen.add(finding)
            self.counts[finding.kind] += 1
            log.warning(
                "impossible value in shared region",
                pod_uid=key.pod_uid,
                container=key.container,
                kind=finding.kind.value,
                slot=finding.slot,
                device=finding.device,
                detail=finding.detail,
            )
        return refusing

    def forget_all_but(self, keys: Iterable[ContainerKey]) -> None:
        for key in self._seen.keys() - keys:
            del self._seen[key]
