"""`pyhami explain`: every node and every card for one pending pod, and the check that said no."""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.devices.reasons import CardCheck
from pyhami.engine import Decision, EngineConfig, NodeFailure, NodeVerdict, Outcome
from pyhami.model import DeviceUsage, NodeName
from pyhami.protocol import NVIDIA_VENDOR
from pyhami.scheduler import explain_wire, explanations
from pyhami.scheduler.explain_wire import ExplanationData
from pyhami.scheduler.outcome import annotations_of
from pyhami.sim.inputs import ClusterInput, InputError
from pyhami.sim.preemption import WhatIf, what_if, what_if_data, what_if_lines
from pyhami.sim.simulate import PreemptionData, prepare, schedule


@dataclass(frozen=True, slots=True)
class Explanation:
    decision: Decision
    annotations: Mapping[str, str]  # what the scheduler would write for the decision
    cards: Mapping[NodeName, tuple[DeviceUsage, ...]]  # every node's cards as the pod saw them
    unregistered: Mapping[NodeName, str]  # why each node without cards has none
    # The pending pods listed before this one: placed first (`after_pending`) or not.
    earlier_pending: int = 0
    after_pending: bool = False
    unreadable: frozenset[NodeName] = frozenset()  # nodes whose registration cannot be read
    # For a pod that fits nowhere: the victims preemption would choose, and why, per node.
    preemption: WhatIf | None = None


class ExplainData(ExplanationData):
    """`explain -o json|yaml`: the scheduler's `/explain` answer, each node with its cards as
    the pod saw them, and whether earlier pending pods were placed first."""

    earlierPending: int
    afterPending: bool


class ExplainWhatIfData(ExplainData):
    preemption: PreemptionData


def find_pending(cluster: ClusterInput, pod_ref: str) -> int:
    """The position of `pod_ref` (NAME or NAMESPACE/NAME) among the pending pods."""
    keys = [pod.ref for pod in cluster.pending]
    # NAMESPACE/NAME names one pod; NAME matches it in every namespace
    matches = [key for key in [*keys, *cluster.not_pending] if pod_ref in (key, key.split("/")[1])]
    if len(matches) > 1:
        raise InputError(
            f"pod name {pod_ref!r} is ambiguous: {', '.join(matches)} (use NAMESPACE/NAME)"
        )
    if not matches:
        raise InputError(f"no pending pod {pod_ref!r} in the input (use NAME or NAMESPACE/NAME)")
    if matches[0] in cluster.not_pending:
        raise InputError(f"pod {matches[0]} is not pending: {cluster.not_pending[matches[0]]}")
    return keys.index(matches[0])


def explain(
    cluster: ClusterInput,
    config: EngineConfig,
    pod_ref: str,
    now: int,
    *,
    after_pending: bool = False,
) -> Explanation:
    """Explain `pod_ref` against the existing allocations, or, with `after_pending`, after
    deciding the pending pods listed before it as simulate would."""
    position = find_pending(cluster, pod_ref)
    simulation = prepare(cluster, config)
    if after_pending:
        for pod in cluster.pending[:position]:
            schedule(simulation, pod)
    ledger = simulation.ledger
    cards = {node: ledger.device_usage(node) for node in ledger.node_names()}
    pod = cluster.pending[position]
    decision = schedule(simulation, pod, explain=True)
    unschedulable = decision.outcome is Outcome.UNSCHEDULABLE
    return Explanation(
        decision,
        annotations_of(decision, config.vendor.keys, now),
        cards,
        cluster.unregistered,
        position,
        after_pending,
        frozenset(cluster.unreadable),
        what_if(simulation, cluster, pod) if unschedulable else None,
    )


def explanation_data(explanation: Explanation) -> ExplainData:
    """`explain -o json|yaml` (`ExplainData`, `ExplainWhatIfData` with a preemption)."""
    unreadable = {str(node): explanation.unregistered[node] for node in explanation.unreadable}
    decided = explanations.Explanation(explanation.decision, explanation.annotations, unreadable)
    answer = explain_wire.explanation_data(decided)
    for node in answer["nodes"]:
        name = NodeName(node["node"])
        node["cardStates"] = [dataclasses.asdict(card) for card in explanation.cards.get(name, ())]
        if name in explanation.unregistered:
            node["notRegistered"] = explanation.unregistered[name]
    data = ExplainData(
        **answer,
        earlierPending=explanation.earlier_pending,
        afterPending=explanation.after_pending,
    )
    if explanation.preemption is None:
        return data
    return ExplainWhatIfData(**data, preemption=what_if_data(explanation.preemption))


def render(explanation: Explanation, *, wide: bool = False) -> str:
    decision = explanation.decision
    lines = [f"pod {decision.namespace}/{decision.name}"]
    if explanation.earlier_pending:
        count = explanation.earlier_pending
        pods = "pod" if count == 1 else "pods"
        lines.append(
            f"(after placing the {count} pending {pods} listed before it, as simulate does)"
            if explanation.after_pending
            else f"(the {count} pending {pods} listed before it {'is' if count == 1 else 'are'} "
            "not counted as placed; --after-pending places them first)"
        )
    if decision.outcome is Outcome.NO_DEVICE_REQUEST:
        lines[0] += ": asks for no GPU; every node passes the filter"
        return "\n".join(lines) + "\n"
    if decision.outcome is Outcome.ERROR:
        lines[0] += f": cannot be scheduled: {decision.error}"
        return "\n".join(lines) + "\n"
    lines.append(f"chosen node: {decision.node}" if decision.node else "no node fits")
    for verdict in decision.verdicts.values():
        lines.append("")
        if verdict.failure is NodeFailure.UNREGISTERED:
            why = explanation.unregistered.get(verdict.node, "no usable GPU registration")
            lines.append(f"node {verdict.node}: not registered: {why}")
            continue
        cards = explanation.cards.get(verdict.node, ())
        lines.extend(_node_lines(verdict, decision.node, cards, wide))
    if explanation.preemption is not None:
        lines.extend(("", *what_if_lines(explanation.preemption)))
    return "\n".join(lines) + "\n"


def _node_lines(
    verdict: NodeVerdict, chosen: NodeName | None, cards: tuple[DeviceUsage, ...], wide: bool
) -> list[str]:
    if verdict.fits:
        mark = "CHOSEN" if verdict.node == chosen else "fits"
        lines = [f"node {verdict.node}: {mark}, node score {verdict.score:.2f}"]
    else:
        which = "" if verdict.container is None else f" (container {verdict.container})"
        lines = [f"node {verdict.node}: rejected{which}: {verdict.reason}"]
    checks: dict[tuple[int, str], CardCheck] = {}
    tried: dict[tuple[int, str], int] = {}  # the policy's order: which card was tried first
    for check in verdict.checks:  # the last visit of a card is its verdict
        checks[(check.container, check.uuid)] = check
        tried.setdefault((check.container, check.uuid), len(tried) + 1)
    containers = sorted({container for container, _ in checks}) or [verdict.container or 0]
    for container in containers:
        for card in cards:
            outcome = _outcome(checks.get((container, card.id)), verdict, card)
            more = ""
            if wide:
                order = tried.get((container, card.id))
                more = f", {card.type}, NUMA {card.numa}" + (f", tried #{order}" if order else "")
            lines.append(
                f"    container {container} card {card.id} (index {card.index}, "
                f"{card.used}/{card.count} tasks, {card.usedmem}/{card.totalmem} MiB, "
                f"{card.usedcores}/{card.totalcore} % cores{more}): {outcome}"
            )
    lines.extend(
        f"    container {position} gets {device.uuid}: "
        f"{device.usedmem} MiB, {device.usedcores} % cores"
        for position, devices in enumerate(verdict.devices)
        for device in devices
    )
    return lines


def _outcome(check: CardCheck | None, verdict: NodeVerdict, card: DeviceUsage) -> str:
    if check is not None:
        return "taken" if check.reason is None else f"rejected: {check.reason}"
    if NVIDIA_VENDOR.lower() not in card.type.lower():
        return "not considered: its type does not name NVIDIA"
    if verdict.failure is NodeFailure.INSUFFICIENT_DEVICE:
        return "not checked: the node has fewer cards than requested"
    full = _full(card)
    if full is not None:  # never a candidate, whatever the order the policy tried cards in
        return f"not usable: full ({full})"
    return "not needed: enough cards were found first"


def _full(card: DeviceUsage) -> str | None:
    if card.used >= card.count:
        return f"all {card.count} task slots taken"
    if card.usedmem >= card.totalmem:
        return "no free memory"
    if card.usedcores >= card.totalcore:
        return "no free cores"
    return None
