"""What the harness records: one outcome per scheduling attempt, and running metrics."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


class Result(enum.StrEnum):
    BOUND = "bound"
    UNSCHEDULABLE = "unschedulable"  # no node passed the predicates and the extender
    FILTER_ERROR = "filter-error"  # the extender failed or answered Error
    BIND_ERROR = "bind-error"  # the extender's bind (or pods/binding) failed


@dataclass(frozen=True, slots=True)
class ScheduleOutcome:
    """One scheduling attempt of one pod."""

    namespace: str
    name: str
    uid: str
    attempt: int
    result: Result
    node: str = ""
    failed_nodes: Mapping[str, str] = field(default_factory=dict)
    error: str = ""
    filter_s: float = 0.0
    bind_s: float = 0.0
    extender_called: bool = False


def _percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(slots=True)
class HarnessMetrics:
    attempts: int = 0
    results: dict[Result, int] = field(default_factory=lambda: dict.fromkeys(Result, 0))
    filter_latencies_s: list[float] = field(default_factory=list)
    bind_latencies_s: list[float] = field(default_factory=list)

    def filter_p(self, fraction: float) -> float:
        return _percentile(self.filter_latencies_s, fraction)

    def bind_p(self, fraction: float) -> float:
        return _percentile(self.bind_latencies_s, fraction)
