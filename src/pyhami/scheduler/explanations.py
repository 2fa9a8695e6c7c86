"""What `/explain` shows: the last decision per pod, kept within bounds, and the latest
preemption (`explain_wire` encodes them); the pod it is asked about."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pyhami.engine import Decision
from pyhami.model import NodeName

EXPLANATIONS_KEPT = 2048
ANSWERS_KEPT = 256  # the latest preemption answers kept for inspection, oldest dropped first
# Also bound what /explain keeps by node verdicts: at 1,000 nodes 2,048 decisions would hold
# two million verdict tuples (hundreds of MB, all walked by every full GC collection).
EXPLAINED_VERDICTS_KEPT = 100_000
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def keep_newest(table: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    """`table[key] = value` as its newest entry, the oldest dropped beyond `limit` entries."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


@dataclass(frozen=True, slots=True)
class PodRef:
    """namespace/name of a pod, parsed from `ns/name` (the `/explain?pod=` form)."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str) -> PodRef:
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"pod reference {text!r} must look like namespace/name")
        return cls(namespace=namespace, name=name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Explanation:
    """A decision, the annotations it writes, and why some nodes' registrations cannot be read."""

    decision: Decision
    annotations: Mapping[str, str]
    registration_errors: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PreemptionExplanation:
    """A pod's latest preemption: every node's answer and, where pyhami chose the victims
    (`victims` not None), the node and the victims chosen."""

    path: str
    outcome: str
    nodes: Mapping[NodeName, str]
    node: NodeName | None = None
    victims: tuple[str, ...] | None = None


class Explanations:
    """The last decision per pod, with the annotations it writes, oldest dropped first."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str], tuple[Decision, Mapping[str, str]]] = OrderedDict()
        self._verdicts = 0

    def remember(self, decision: Decision, written: Mapping[str, str]) -> None:
        ref = (decision.namespace, decision.name)
        replaced = self._kept.pop(ref, None)
        if replaced is not None:
            self._verdicts -= len(replaced[0].verdicts)
        self._kept[ref] = (decision, written)
        self._verdicts += len(decision.verdicts)
        while len(self._kept) > 1 and (
            len(self._kept) > EXPLANATIONS_KEPT or self._verdicts > EXPLAINED_VERDICTS_KEPT
        ):
            _, (oldest, _) = self._kept.popitem(last=False)
            self._verdicts -= len(oldest.verdicts)

    def get(self, namespace: str, name: str) -> tuple[Decision, Mapping[str, str]] | None:
        return self._kept.get((namespace, name))
