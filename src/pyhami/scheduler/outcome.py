"""What one `/filter` decided to do, as a value: its answer and the effects it asks for.

`filter_outcome` is pure: from the engine's decision it computes the answer for
kube-scheduler, the events, the metric labels and the claim (the reservation and the
annotations bind writes). `FilterBind` carries out such an outcome in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from pyhami.engine import Decision, Outcome, PodAllocation, PodKey
from pyhami.kube.extender_wire import ExtenderFilterResult
from pyhami.model import PodView
from pyhami.protocol import VendorKeys, filter_annotations
from pyhami.scheduler.events import NORMAL, WARNING, reason_events


@dataclass(frozen=True, slots=True)
class Claim:
    """What a /filter of this process decided, which the next /bind of that pod must match and
    carries out: the chosen node and its reservation (neither for a pod that asks for no
    device: it may go to any node kube-scheduler picks), whether HAMi's node lock guards it
    (its lasting containers get devices, as the filter read the pod), and the annotations
    bind writes. No node verdict: a claim lives until its bind, and keeping them would hold
    one per candidate node per pending pod (walked by every full collection) outside the
    bounds /explain keeps."""

    key: PodKey
    namespace: str
    name: str
    node: str | None
    allocation: PodAllocation | None
    needs_lock: bool
    annotations: Mapping[str, str | None]

    @classmethod
    def of(cls, decision: Decision, annotations: Mapping[str, str | None]) -> Claim:
        plan = decision.plan
        return cls(
            decision.key,
            decision.namespace,
            decision.name,
            decision.node,
            decision.allocation,
            plan is not None and bool(plan.lasting_requests),
            annotations,
        )


@dataclass(frozen=True, slots=True)
class PodEvent:
    kind: str  # NORMAL or WARNING
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """One /filter's answer and its effects: the decisions counter's outcome label, the
    failure counts by reason word, the pod's events in order, and the claim to keep for its
    bind (its allocation, if any, is reserved)."""

    answer: ExtenderFilterResult
    label: str
    failures: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    events: tuple[PodEvent, ...] = ()
    claim: Claim | None = None


def filter_outcome(
    pod: PodView,
    decision: Decision,
    node_names: Sequence[str],
    written: Mapping[str, str],
    owned: frozenset[str],
) -> FilterOutcome:
    """The outcome of `decision` for `pod` among `node_names`; `written` are the annotations
    the decision writes, `owned` those an earlier attempt may have left (nulled by bind)."""
    if decision.outcome is Outcome.NO_DEVICE_REQUEST:
        answer = ExtenderFilterResult(node_names=node_names)
        return FilterOutcome(answer, "pass-through", claim=Claim.of(decision, {}))
    if decision.outcome is Outcome.ERROR:
        error = decision.error or "filter failed"
        event = PodEvent(WARNING, "FilteringFailed", error)
        return FilterOutcome(ExtenderFilterResult(error=error), "error", events=(event,))
    words = _failure_words(decision)
    failures = Counter(word for node_words in words.values() for word in node_words)
    per_reason = tuple(PodEvent(WARNING, "FilteringFailed", m) for m in reason_events(words))
    failed = {str(node): reason for node, reason in decision.failed_nodes.items()}
    if decision.outcome is Outcome.UNSCHEDULABLE:
        nowhere = f"no available node, {len(node_names)} nodes do not meet"
        return FilterOutcome(
            ExtenderFilterResult(failed_nodes=failed),
            "unschedulable",
            failures,
            (*per_reason, PodEvent(WARNING, "FilteringFailed", nowhere)),
        )
    # HAMi answers a fit with FailedNodes null; we also name every rejected node with its
    # reason (architecture.md), which kube-scheduler reads as those nodes not fitting.
    succeeded = PodEvent(NORMAL, "FilteringSucceed", _success_message(decision, node_names))
    return FilterOutcome(
        ExtenderFilterResult(node_names=[str(decision.node)], failed_nodes=failed or None),
        "scheduled",
        failures,
        (*per_reason, succeeded),
        Claim.of(decision, _with_stale_nulled(pod, written, owned)),
    )


def annotations_of(decision: Decision, keys: VendorKeys, now: datetime | int) -> dict[str, str]:
    """What a decision writes on its pod at `now` (nothing unless it placed the pod)."""
    chosen = decision.allocation
    if chosen is None:
        return {}
    return filter_annotations(chosen.node, chosen.containers, chosen.mig_allocations, keys, now)


def _with_stale_nulled(
    pod: PodView, written: Mapping[str, str], owned: frozenset[str]
) -> dict[str, str | None]:
    """The decision's annotations, and null for the owned ones an earlier attempt left."""
    stale = {k: None for k in pod.annotations if k in owned and k not in written}
    return {**stale, **written}


def _failure_words(decision: Decision) -> dict[str, list[str]]:
    """Each failed node's reason words, from its verdict's structured reasons (a node failed
    without card reasons, e.g. unregistered, has its text)."""
    return {
        str(v.node): [str(r) for r in v.reasons] or [v.reason]
        for v in decision.verdicts.values()
        if not v.fits
    }


def _success_message(decision: Decision, node_names: Sequence[str]) -> str:
    fits = [v for v in decision.verdicts.values() if v.fits]
    scored = ",".join(f"{v.node}:{(v.score or 0.0):.2f}" for v in fits)
    count = max(len(fits), 1)
    return (
        f"find fit node({decision.node}), {len(node_names) - count} nodes not fit, "
        f"{count} nodes fit({scored or f'{decision.node}:{(decision.score or 0.0):.2f}'})"
    )
