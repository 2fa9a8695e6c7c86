"""`pyhami simulate`: what the live `/filter` would decide, pod after pod, on offline state.

The same engine path as the service: the ledger is filled from the nodes and existing pods,
each pending pod drops any earlier reservation, `engine.decide` runs on every node as a
candidate, and a scheduled pod is reserved in the ledger before the next one is decided.
"""

from dataclasses import dataclass
from typing import NotRequired, TypedDict

from pyhami import engine
from pyhami.engine import Decision, EngineConfig, Ledger, Outcome, PodSpecError, QuotaBook
from pyhami.model import NodeName, PodView
from pyhami.protocol import VendorKeys
from pyhami.scheduler.outcome import annotations_of
from pyhami.sim.inputs import ClusterInput


@dataclass(frozen=True, slots=True)
class Simulation:
    """The cluster as the scheduler would hold it, ready to decide pending pods."""

    ledger: Ledger
    quotas: QuotaBook
    candidates: list[NodeName]
    config: EngineConfig


def prepare(cluster: ClusterInput, config: EngineConfig) -> Simulation:
    ledger = engine.build_ledger(cluster.nodes, cluster.existing)
    quotas = QuotaBook(config.nvidia)
    for quota in cluster.quotas:
        quotas.set_quota(quota.key, quota.namespace, quota.hard)
    candidates = [*cluster.nodes, *(n for n in cluster.unregistered if n not in cluster.nodes)]
    return Simulation(ledger, quotas, candidates, config)


def schedule(simulation: Simulation, pod: PodView, *, explain: bool = False) -> Decision:
    """One `/filter` call: drop the pod's stale reservation, decide, reserve the choice."""
    ledger = simulation.ledger
    ledger.remove_pod(pod.key)
    try:
        plan = engine.plan_pod(pod, simulation.config)
    except PodSpecError as err:
        return Decision(pod.key, pod.namespace, pod.name, Outcome.ERROR, error=str(err))
    decision = engine.decide(
        plan,
        simulation.candidates,
        ledger,
        config=simulation.config,
        quotas=simulation.quotas,
        explain=explain,
    )
    if decision.allocation is not None:
        ledger.add_pod(decision.allocation)
    return decision


def simulate(cluster: ClusterInput, config: EngineConfig) -> list[Decision]:
    simulation = prepare(cluster, config)
    return [schedule(simulation, pod) for pod in cluster.pending]


class PreemptionData(TypedDict):
    """The preemption what-if of `simulate -o json|yaml` and `explain -o json|yaml`."""

    node: str | None
    victims: list[str]
    blockedBy: NotRequired[list[str]]
    nodes: dict[str, str]


class PodData(TypedDict):
    """One pod of the `simulate -o json|yaml` contract."""

    namespace: str
    name: str
    node: str | None
    score: float | None
    annotations: dict[str, str]
    failedNodes: dict[str, str]
    preemption: NotRequired[PreemptionData]


def pods_data(decisions: list[Decision], keys: VendorKeys, now: int) -> list[PodData]:
    """The pods of the `simulate -o json|yaml` contract; annotations as written at `now`."""
    return [
        PodData(
            namespace=d.namespace,
            name=d.name,
            node=d.node,
            score=d.score,
            annotations=annotations_of(d, keys, now),
            failedNodes={str(node): why for node, why in d.failed_nodes.items()},
        )
        for d in decisions
    ]


NAMES_SHOWN = 5


def as_table(decisions: list[Decision], keys: VendorKeys, now: int, *, wide: bool = False) -> str:
    """A person's view: per pod the node and cards, or why no node took it; `wide` adds the
    annotations the scheduler would write at `now`."""
    lines = []
    without_gpu = []
    for decision in decisions:
        head = f"{decision.namespace}/{decision.name}"
        if decision.outcome is Outcome.NO_DEVICE_REQUEST:
            without_gpu.append(head)  # one summary line for all, not one line each
            continue
        if decision.outcome is Outcome.SCHEDULED:
            lines.append(f"{head}  ->  {decision.node}  (node score {decision.score:.2f})")
            lines.append(f"  {'container':<10} {'card':<44} {'memory MiB':>10} {'cores %':>8}")
            placed = decision.allocation.containers if decision.allocation else ()
            lines.extend(
                f"  {position:<10} {device.uuid:<44} {device.usedmem:>10} {device.usedcores:>8}"
                for position, devices in enumerate(placed)
                for device in devices
            )
            if wide:
                lines.extend(
                    f"  {key}: {value}"
                    for key, value in annotations_of(decision, keys, now).items()
                )
        elif decision.outcome is Outcome.UNSCHEDULABLE:
            lines.append(f"{head}  ->  no node fits")
            lines.extend(f"  {node:<30} {why}" for node, why in decision.failed_nodes.items())
        else:
            lines.append(f"{head}  ->  error: {decision.error}")
        lines.append("")
    if without_gpu:
        shown = ", ".join(without_gpu[:NAMES_SHOWN])
        hidden = len(without_gpu) - NAMES_SHOWN
        more = f" and {hidden} more" if hidden > 0 else ""
        lines.extend((f"{len(without_gpu)} pending pods ask for no GPU: {shown}{more}", ""))
    return "\n".join(lines)
