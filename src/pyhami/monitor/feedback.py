"""The 5-second priority and utilisation feedback, as HAMi does it.

1. Activity census: `recentKernel` > 0 is decremented and written back; if still > 0 the
   container is active, counted per device UUID at its priority (when priority >= 0).
2. Per container at priority p: *blocking* when a more urgent level (index < p) is active on
   one of its devices -> `recentKernel = -1` (libvgpu then sleeps before each launch); not
   blocking and frozen -> `recentKernel = 0`. *Contended* when blocking or more than one active
   container at p shares a device -> `utilizationSwitch = 1`, else 0.

Devices are keyed by the full 96-byte UUID slot on both sides, as HAMi does.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

FROZEN = -1


class FeedbackTarget(Protocol):
    """The part of a region the loop reads and writes (`FeedbackFields` is one); the loop
    changes the two fields only through their write methods, which write the region."""

    recent_kernel: int
    utilization_switch: int
    priority: int
    device_keys: tuple[bytes, ...]

    def write_recent_kernel(self, value: int) -> None: ...

    def write_utilization_switch(self, value: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one tick decided for one container (same order as the targets passed in)."""

    active: bool
    blocked: bool
    contended: bool


# Per device UUID: how many active containers at each priority level. A mapping, not a list
# indexed by priority: the priority is the container's to write, and 2**31 - 1 must not make
# the monitor allocate billions of counters.
Census = dict[bytes, Counter[int]]


def take_census(targets: Sequence[FeedbackTarget]) -> tuple[Census, list[bool]]:
    census: Census = {}
    active: list[bool] = []
    for target in targets:
        recent = target.recent_kernel - 1
        is_active = recent > 0 and target.priority >= 0
        if is_active:
            for key in target.device_keys:
                census.setdefault(key, Counter())[target.priority] += 1
        if recent >= 0:  # only a positive count is decremented
            target.write_recent_kernel(recent)
        active.append(is_active)
    return census, active


def _blocking(census: Census, keys: tuple[bytes, ...], priority: int) -> bool:
    """A more urgent level (a smaller number) is active on one of the devices."""
    return any(
        level < priority and count > 0
        for key in keys
        for level, count in census.get(key, Counter()).items()
    )


def _shared_at_level(census: Census, keys: tuple[bytes, ...], priority: int) -> bool:
    return priority >= 0 and any(census.get(key, Counter())[priority] > 1 for key in keys)


def observe(targets: Sequence[FeedbackTarget]) -> list[Verdict]:
    """One feedback tick over every open region; returns what it decided for each."""
    census, active = take_census(targets)
    verdicts = []
    for target, was_active in zip(targets, active, strict=True):
        keys, priority = target.device_keys, target.priority
        blocked = _blocking(census, keys, priority)
        recent = target.recent_kernel
        if blocked and recent >= 0:
            target.write_recent_kernel(FROZEN)
        elif not blocked and recent < 0:
            target.write_recent_kernel(0)
        contended = blocked or _shared_at_level(census, keys, priority)
        switch = 1 if contended else 0
        if target.utilization_switch != switch:
            target.write_utilization_switch(switch)
        verdicts.append(Verdict(active=was_active, blocked=blocked, contended=contended))
    return verdicts
