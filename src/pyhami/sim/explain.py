"""`pyhami explain`: every node and every card for one pending pod, and the check that said no."""

from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.devices.reasons import CardCheck
from pyhami.engine import Decision, EngineConfig, NodeFailure, NodeVerdict, Outcome
from pyhami.model import DeviceUsage, NodeName
from pyhami.protocol import NVIDIA_VENDOR
from pyhami.sim.inputs import ClusterInput, InputError
from pyhami.sim.simulate import prepare, schedule


@dataclass(frozen=True, slots=True)
class Explanation:
    decision: Decision
    cards: Mapping[NodeName, tuple[DeviceUsage, ...]]  # every node's cards as the pod saw them
    unregistered: Mapping[NodeName, str]  # why each node without cards has none


def explain(cluster: ClusterInput, config: EngineConfig, pod_ref: str, now: int) -> Explanation:
    """Decide the pending pods before `pod_ref` as simulate would, then explain that one."""
    simulation = prepare(cluster, config)
    for pod in cluster.pending:
        metadata = pod.get("metadata") or {}
        name = str(metadata.get("name"))
        namespace = str(metadata.get("namespace") or "default")
        if pod_ref in (name, f"{namespace}/{name}"):
            ledger = simulation.ledger
            cards = {node: ledger.device_usage(node) for node in ledger.node_names()}
            decision = schedule(simulation, pod, now, explain=True)
            return Explanation(decision, cards, cluster.unregistered)
        schedule(simulation, pod, now)
    raise InputError(f"no pending pod {pod_ref!r} in the input (use NAME or NAMESPACE/NAME)")


def render(explanation: Explanation) -> str:
    decision = explanation.decision
    lines = [f"pod {decision.namespace}/{decision.name}"]
    if decision.outcome is Outcome.NO_DEVICE_REQUEST:
        return lines[0] + ": asks for no GPU; every node passes the filter\n"
    if decision.outcome is Outcome.ERROR:
        return lines[0] + f": cannot be scheduled: {decision.error}\n"
    lines.append(f"chosen node: {decision.node}" if decision.node else "no node fits")
    for verdict in decision.verdicts.values():
        lines.append("")
        if verdict.failure is NodeFailure.UNREGISTERED:
            why = explanation.unregistered.get(verdict.node, "no usable GPU registration")
            lines.append(f"node {verdict.node}: not registered: {why}")
            continue
        lines.extend(_node_lines(verdict, decision.node, explanation.cards.get(verdict.node, ())))
    return "\n".join(lines) + "\n"


def _node_lines(
    verdict: NodeVerdict, chosen: NodeName | None, cards: tuple[DeviceUsage, ...]
) -> list[str]:
    if verdict.fits:
        mark = "CHOSEN" if verdict.node == chosen else "fits"
        lines = [f"node {verdict.node}: {mark}, node score {verdict.score:.2f}"]
    else:
        which = "" if verdict.container is None else f" (container {verdict.container})"
        lines = [f"node {verdict.node}: rejected{which}: {verdict.reason}"]
    checks: dict[tuple[int, str], CardCheck] = {}
    for check in verdict.checks:  # the last visit of a card is its verdict
        checks[(check.container, check.uuid)] = check
    containers = sorted({container for container, _ in checks}) or [verdict.container or 0]
    for container in containers:
        for card in cards:
            outcome = _outcome(checks.get((container, card.id)), verdict, card)
            lines.append(
                f"    container {container} card {card.id} (index {card.index}, "
                f"{card.used}/{card.count} tasks, {card.usedmem}/{card.totalmem} MiB, "
                f"{card.usedcores}/{card.totalcore} % cores): {outcome}"
            )
    for position, devices in enumerate(verdict.devices):
        for device in devices:
            lines.append(
                f"    container {position} gets {device.uuid}: "
                f"{device.usedmem} MiB, {device.usedcores} % cores"
            )
    return lines


def _outcome(check: CardCheck | None, verdict: NodeVerdict, card: DeviceUsage) -> str:
    if check is not None:
        return "taken" if check.reason is None else f"rejected: {check.reason}"
    if NVIDIA_VENDOR.lower() not in card.type.lower():
        return "not considered: its type does not name NVIDIA"
    if verdict.failure is NodeFailure.INSUFFICIENT_DEVICE:
        return "not checked: the node has fewer cards than requested"
    return "not needed: enough cards were found first"
