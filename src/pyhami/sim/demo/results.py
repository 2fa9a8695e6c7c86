"""What became of each submitted pod, as plain data (the report renders it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CardShare:
    """What one container got on one card."""

    container: str
    node: str
    uuid: str
    model: str
    index: int
    memory_mib: int
    cores: int


@dataclass(frozen=True, slots=True)
class NodeWhy:
    """Why one node was not chosen: the scheduler's reason and its per-card reason counts."""

    node: str
    reason: str
    counts: Mapping[str, int]
    cards: int


@dataclass(frozen=True, slots=True)
class PodResult:
    namespace: str
    name: str
    phase: str  # Running, Failed, Pending (no node), Refused (not admitted by the API)
    node: str = ""
    cards: tuple[CardShare, ...] = ()
    message: str = ""  # the refusal, or kube-scheduler's unschedulable message
    why: tuple[NodeWhy, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.phase == "Running"


@dataclass(frozen=True, slots=True)
class CardInfo:
    node: str
    model: str
    index: int
