"""One scheduling decision: which node and which cards a pending pod gets, and why not elsewhere.

`decide` is pure: it reads the ledger (never writes it), the pod's plan and the configuration,
and returns a `Decision`, structured data only: the winner node, the allocation to reserve in the
ledger (each container's devices, once), and every candidate's verdict. The caller encodes
the annotations (`protocol.filter_annotations`) and the texts it answers with.

It makes HAMi's decision (score every candidate, pick by node policy) without HAMi's cost:
candidate nodes are visited in policy order straight from the ledger's sorted node scores, so
the first node that fits is the winner and the rest need no work. Ties between equal node
scores, which HAMi leaves to goroutine timing, go to the smaller node name.

Each node is first given the cheapest exact evaluation (`evaluate.py`: quick or screened);
only a node that passes gets the full, policy-ordered evaluation that picks the cards.
"""

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from pyhami.engine.evaluate import (
    SEQUENTIAL_NODES,
    UNREGISTERED,
    NodeFailure,
    NodeVerdict,
    Screen,
    evaluate,
    make_cycle,
)
from pyhami.engine.ledger import Ledger, PodAllocation, PodKey
from pyhami.engine.pod import EngineConfig, PodPlan
from pyhami.engine.quota import QuotaBook
from pyhami.model import NodeName
from pyhami.protocol import NodePolicy, ProtocolError, parse_device_scoring_weights


class Outcome(enum.Enum):
    SCHEDULED = "scheduled"
    UNSCHEDULABLE = "unschedulable"  # no candidate fits; every one has its reason
    NO_DEVICE_REQUEST = "no-device-request"  # not a HAMi pod: the filter passes every node
    ERROR = "error"  # the pod itself is wrong (e.g. a bad scoring-weights annotation)


@dataclass(frozen=True, slots=True)
class Decision:
    """Where one pod goes and why not elsewhere: the winner, its allocation, every verdict."""

    key: PodKey
    namespace: str
    name: str
    outcome: Outcome
    node: NodeName | None = None
    score: float | None = None
    verdicts: Mapping[NodeName, NodeVerdict] = field(default_factory=lambda: MappingProxyType({}))
    # What to reserve in the ledger when scheduled: each container's devices, init first.
    allocation: PodAllocation | None = None
    error: str | None = None
    plan: PodPlan | None = None  # the pod as decided (None when it cannot be read): bind reuses it

    @property
    def failed_nodes(self) -> dict[NodeName, str]:
        """HAMi's FailedNodes: each candidate that does not fit, with its reason text."""
        return {name: v.reason for name, v in self.verdicts.items() if not v.fits}


def decide(
    plan: PodPlan,
    candidates: Sequence[NodeName],
    ledger: Ledger,
    *,
    config: EngineConfig,
    quotas: QuotaBook | None,
    all_reasons: bool = False,
    explain: bool = False,
) -> Decision:
    """Decide where the planned pod goes among `candidates`. Pure: reads the ledger.

    The caller reads the pod once (`plan_pod`; its PodSpecError is the caller's to answer) and
    removes the pod's own earlier reservation from the ledger first (as HAMi does), so a
    re-filtered pod does not compete with itself.
    By default a scheduled decision carries no failed nodes (HAMi's `/filter` answer on
    success) and the search stops at the winner. With `all_reasons`, every candidate gets its
    verdict (fits, or the reason) through the cheap paths — enough for events on every filter.
    With `explain`, every candidate is evaluated in full and its per-card checks are kept.
    ValueError when the ledger books another vendor than `config.vendor`.
    """
    if ledger.vendor_name != config.vendor.name:
        raise ValueError(
            f"the ledger books {ledger.vendor_name!r} devices but the configured vendor "
            f"is {config.vendor.name!r}"
        )
    if not plan.wants_devices:
        return Decision(plan.key, plan.namespace, plan.name, Outcome.NO_DEVICE_REQUEST, plan=plan)
    try:
        weights = parse_device_scoring_weights(plan.weights_annotation)
    except ProtocolError as err:
        return Decision(
            plan.key,
            plan.namespace,
            plan.name,
            Outcome.ERROR,
            error=f"calcScore failed {err.reason} for pod {plan.name}",
            plan=plan,
        )
    cycle = make_cycle(plan, weights, ledger, config, quotas)
    wanted = set(candidates)
    verdicts: dict[NodeName, NodeVerdict] = {}
    winner: NodeVerdict | None = None
    spread = plan.node_policy == NodePolicy.SPREAD
    screen: Screen | None = None
    for visited, node in enumerate(ledger.preferred_nodes(spread, wanted), start=1):
        if explain:
            verdict = evaluate(node, cycle, trace=True)
        else:
            cheap: NodeVerdict | None = None
            searched = visited > SEQUENTIAL_NODES or winner is not None
            if cycle.screen and not node.has_mig and searched:
                # Many nodes tried and none fits yet (or the rest only need their verdicts):
                # screen the whole cluster in one pass.
                screen = screen or Screen(ledger, cycle)
                cheap = screen.verdict(node)
                if cheap is None and winner is not None and cycle.one_app_step:
                    cheap = NodeVerdict(node.name, True, node.score)
            elif cycle.order_free and not node.has_mig:
                quick = evaluate(node, cycle, quick=True)
                if not quick.fits or (winner is not None and cycle.one_app_step):
                    cheap = quick
            verdict = evaluate(node, cycle) if cheap is None else cheap
        verdicts[node.name] = verdict
        if winner is None and verdict.fits:
            winner = verdict
            if not (all_reasons or explain):
                break
    if winner is None or all_reasons or explain:
        # Every registered candidate has been evaluated; the others are not in the ledger.
        for name in candidates:
            if name not in verdicts:
                verdicts[name] = NodeVerdict(
                    name, False, failure=NodeFailure.UNREGISTERED, reason=UNREGISTERED
                )
    ordered = {name: verdicts[name] for name in candidates if name in verdicts}
    if winner is None:
        return Decision(
            plan.key, plan.namespace, plan.name, Outcome.UNSCHEDULABLE, verdicts=ordered, plan=plan
        )
    return Decision(
        plan.key,
        plan.namespace,
        plan.name,
        Outcome.SCHEDULED,
        node=winner.node,
        score=winner.score,
        verdicts=ordered,
        allocation=PodAllocation(
            key=plan.key,
            namespace=plan.namespace,
            name=plan.name,
            node=winner.node,
            containers=winner.devices,
            init_count=plan.init_count,
            sidecars=plan.sidecars,
            mig_allocations=winner.mig_allocations,
        ),
        plan=plan,
    )
