"""`pyhami simulate`: what the live `/filter` would decide, pod after pod, on offline state.

The same engine path as the service: the ledger is filled from the nodes and existing pods,
each pending pod drops any earlier reservation, `engine.decide` runs on every node as a
candidate, and a scheduled pod is reserved in the ledger before the next one is decided.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyhami import engine
from pyhami.engine import Decision, EngineConfig, Ledger, Outcome, QuotaBook
from pyhami.kube.views import pod_identity, read_pod
from pyhami.model import NodeName, PodSpecError
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
    for key, namespace, hard in cluster.quotas:
        quotas.set_quota(key, namespace, hard)
    candidates = [*cluster.nodes, *(n for n in cluster.unregistered if n not in cluster.nodes)]
    return Simulation(ledger, quotas, candidates, config)


def schedule(
    simulation: Simulation, pod: Mapping[str, Any], now: int, *, explain: bool = False
) -> Decision:
    """One `/filter` call: drop the pod's stale reservation, decide, reserve the choice."""
    ledger = simulation.ledger
    key, namespace, name = pod_identity(pod)
    ledger.remove_pod(key)
    try:
        view = read_pod(pod)
    except PodSpecError as err:
        return Decision(key, namespace, name, Outcome.ERROR, error=str(err))
    decision = engine.decide(
        view,
        simulation.candidates,
        ledger,
        config=simulation.config,
        quotas=simulation.quotas,
        now=now,
        explain=explain,
    )
    if decision.allocation is not None:
        ledger.add_pod(decision.allocation)
    return decision


def simulate(cluster: ClusterInput, config: EngineConfig, now: int) -> list[Decision]:
    simulation = prepare(cluster, config)
    return [schedule(simulation, pod, now) for pod in cluster.pending]


def pods_data(decisions: list[Decision]) -> dict[str, Any]:
    """The `simulate --output json|yaml` contract."""
    return {"pods": [_pod_json(d) for d in decisions]}


def _pod_json(decision: Decision) -> dict[str, Any]:
    return {
        "namespace": decision.namespace,
        "name": decision.name,
        "node": decision.node,
        "score": decision.score,
        "annotations": dict(decision.annotations),
        "failedNodes": dict(decision.failed_nodes),
    }


NAMES_SHOWN = 5


def as_table(decisions: list[Decision], *, wide: bool = False) -> str:
    """A person's view: per pod the node and cards, or why no node took it; `wide` adds the
    annotations the scheduler would write."""
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
            for position, devices in enumerate(decision.devices):
                for device in devices:
                    lines.append(
                        f"  {position:<10} {device.uuid:<44} {device.usedmem:>10} "
                        f"{device.usedcores:>8}"
                    )
            if wide:
                lines.extend(f"  {key}: {value}" for key, value in decision.annotations.items())
        elif decision.outcome is Outcome.UNSCHEDULABLE:
            lines.append(f"{head}  ->  no node fits")
            for node, reason in decision.failed_nodes.items():
                lines.append(f"  {node:<30} {reason}")
        else:
            lines.append(f"{head}  ->  error: {decision.error}")
        lines.append("")
    if without_gpu:
        shown = ", ".join(without_gpu[:NAMES_SHOWN])
        hidden = len(without_gpu) - NAMES_SHOWN
        more = f" and {hidden} more" if hidden > 0 else ""
        lines.extend((f"{len(without_gpu)} pending pods ask for no GPU: {shown}{more}", ""))
    return "\n".join(lines)
