"""Impossible values in a region: logged once and counted, never a crash (issue 7).

Each distinct finding (container, kind, process slot, device) is reported when first seen;
seeing it again on later scrapes does not count again, so the counter's rate is the rate of
new problems. Findings of containers that are gone are forgotten.
"""

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from pyhami.monitor.host import HostCard
from pyhami.monitor.region import RegionSnapshot
from pyhami.monitor.scan import ContainerKey

log = structlog.get_logger(__name__)

MAX_SM_UTIL = 100


class AlarmKind(enum.StrEnum):
    NEGATIVE_COUNTER = "negative_counter"  # a usage counter below zero (an underflow)
    ABOVE_PHYSICAL = "above_physical"  # more memory in use than the card has
    IMPOSSIBLE_UTILIZATION = "impossible_utilization"  # a process above 100 % SM
    UNKNOWN_PID = "unknown_pid"  # a live slot without a pid, or using a card NVML says it is not on


@dataclass(frozen=True, slots=True)
class Finding:
    kind: AlarmKind
    slot: int  # process slot, -1 for region-wide findings
    device: int  # device index, -1 for process-wide findings
    pid: int  # the slot's pid (0 for region-wide), so a reused slot counts anew
    detail: str = field(compare=False)


def findings(snapshot: RegionSnapshot, cards: Mapping[str, HostCard]) -> list[Finding]:
    """Everything impossible in one snapshot; `cards` by UUID (may be empty without NVML)."""
    found: list[Finding] = []
    for process in snapshot.processes:
        if process.pid <= 0 or process.hostpid < 0:
            found.append(
                Finding(
                    AlarmKind.UNKNOWN_PID,
                    process.slot,
                    -1,
                    process.pid,
                    f"live slot with pid {process.pid} hostpid {process.hostpid}",
                )
            )
        for index, values in enumerate(
            zip(
                process.totals,
                process.contexts,
                process.modules,
                process.buffers,
                process.sm_utils,
                strict=True,
            )
        ):
            if min(values) < 0:
                found.append(
                    Finding(
                        AlarmKind.NEGATIVE_COUNTER,
                        process.slot,
                        index,
                        process.pid,
                        f"counters {values}",
                    )
                )
            if values[-1] > MAX_SM_UTIL:
                found.append(
                    Finding(
                        AlarmKind.IMPOSSIBLE_UTILIZATION,
                        process.slot,
                        index,
                        process.pid,
                        f"smUtil {values[-1]} %",
                    )
                )
    for device in snapshot.devices:
        card = cards.get(device.uuid)
        if card is None:
            continue
        if device.used > card.memory.total:
            found.append(
                Finding(
                    AlarmKind.ABOVE_PHYSICAL,
                    -1,
                    device.index,
                    0,
                    f"{device.used} bytes used on a {card.memory.total}-byte card",
                )
            )
        if card.pids is None:
            continue
        for process in snapshot.processes:
            uses = process.totals[device.index] > 0
            if uses and process.hostpid > 0 and process.hostpid not in card.pids:
                found.append(
                    Finding(
                        AlarmKind.UNKNOWN_PID,
                        process.slot,
                        device.index,
                        process.pid,
                        f"hostpid {process.hostpid} uses {device.uuid} but NVML does not list it",
                    )
                )
    return found


class SanityAlarms:
    """Counts distinct findings per kind; `check` is called with each fresh snapshot."""

    def __init__(self) -> None:
        self.counts: dict[AlarmKind, int] = dict.fromkeys(AlarmKind, 0)
        self._seen: dict[ContainerKey, set[Finding]] = {}

    def check(
        self, key: ContainerKey, snapshot: RegionSnapshot, cards: Mapping[str, HostCard]
    ) -> None:
        seen = self._seen.setdefault(key, set())
        for finding in findings(snapshot, cards):
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

    def forget_all_but(self, keys: Iterable[ContainerKey]) -> None:
        keep = set(keys)
        for key in [k for k in self._seen if k not in keep]:
            del self._seen[key]
