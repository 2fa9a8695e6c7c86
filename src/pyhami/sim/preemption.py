"""The preemption what-if on offline state (`simulate --preemption`, `explain`).

Offline there is no kube-scheduler to propose victims, so every node is proposed with all of
its lower-priority pods, and the engine answers as `/preempt` does. Among the nodes kept, the
one kube-scheduler would pick is taken: fewest PDB violations, then the lowest highest victim
priority, the lowest sum of victim priorities, the fewest victims, then the node name.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.engine import Decision, EngineConfig, Outcome
from pyhami.engine.preempt import (
    NodePreemption,
    PreemptionInput,
    Proposal,
    best_node,
    preempt,
)
from pyhami.model import NodeName, PodView
from pyhami.scheduler.budgets import counted, protected, violations
from pyhami.sim.inputs import ClusterInput
from pyhami.sim.simulate import PreemptionData, Simulation, prepare, schedule


@dataclass(frozen=True, slots=True)
class WhatIf:
    """Which node and victims preemption would give a pod that fits nowhere, and why."""

    answers: Mapping[NodeName, NodePreemption]
    node: NodeName | None = None
    victims: tuple[str, ...] = ()  # namespace/name
    decision: Decision | None = None  # the pod decided again once the victims are gone
    # Where the only way breaks a PodDisruptionBudget: the pods and budgets (nothing evicted).
    blocked: tuple[str, ...] = ()


def what_if(simulation: Simulation, cluster: ClusterInput, pod: PodView) -> WhatIf | None:
    """Preempt for `pod` on the simulation's ledger; with a node kept, its victims leave the
    ledger and the pod is scheduled again (reserved there, as simulate does). None when no
    pod anywhere has a lower priority: preemption has nothing to ask."""
    ledger = simulation.ledger
    priority, key = pod.priority, pod.key
    names: dict[str, str] = {}
    priorities: dict[str, int] = {}
    proposals: dict[NodeName, Proposal] = {}
    for node in ledger.node_names():
        lower = set()
        for allocation in ledger.pods_on(node):
            names[allocation.key] = f"{allocation.namespace}/{allocation.name}"
            priorities[allocation.key] = cluster.priorities.get(allocation.key, 0)
            if allocation.key != key and priorities[allocation.key] < priority:
                lower.add(allocation.key)
        proposals[node] = Proposal(frozenset(lower))
    if not any(proposal.victims for proposal in proposals.values()):
        return None
    pods, budgets = cluster.existing_pods, cluster.budgets
    answers = preempt(
        PreemptionInput(pod, priority, priorities, names, protected(pods.items(), budgets)),
        proposals,
        ledger,
        config=simulation.config,
        quotas=simulation.quotas,
    )
    answers = {node: counted(answer, pods, budgets) for node, answer in answers.items()}
    best = best_node(answers, priorities)
    if best is None:
        return WhatIf(answers)
    if best.pdb_violations:
        broken = violations([pods[v] for v in best.victims if v in pods], budgets)
        return WhatIf(answers, best.node, blocked=tuple(broken))
    for victim in best.victims:
        ledger.remove_pod(victim)
    decision = schedule(simulation, pod)
    return WhatIf(answers, best.node, tuple(names[v] for v in best.victims), decision)


def simulate_with_preemption(
    cluster: ClusterInput, config: EngineConfig
) -> tuple[list[Decision], dict[str, WhatIf]]:
    """simulate, where a pod that fits nowhere preempts as it would live (by namespace/name)."""
    simulation = prepare(cluster, config)
    decisions = []
    what_ifs: dict[str, WhatIf] = {}
    for pod in cluster.pending:
        decision = schedule(simulation, pod)
        unschedulable = decision.outcome is Outcome.UNSCHEDULABLE
        result = what_if(simulation, cluster, pod) if unschedulable else None
        if result is not None:
            what_ifs[f"{decision.namespace}/{decision.name}"] = result
            decision = result.decision or decision
        decisions.append(decision)
    return decisions, what_ifs


def what_if_data(result: WhatIf) -> PreemptionData:
    """The JSON form: the chosen node and victims, and every node's answer."""
    nodes = {str(node): answer.reason for node, answer in result.answers.items()}
    victims, blocked = list(result.victims), list(result.blocked)
    if not blocked:  # the key is there only where a budget blocked preemption
        return PreemptionData(node=result.node, victims=victims, nodes=nodes)
    return PreemptionData(node=result.node, victims=victims, blockedBy=blocked, nodes=nodes)


def what_if_lines(result: WhatIf) -> list[str]:
    """A person's view, one line per node."""
    if result.node is None:
        head = "preemption: no eviction makes room"
    elif result.blocked:
        head = (
            f"preemption: on {result.node} only evictions PodDisruptionBudgets forbid make room "
            f"({'; '.join(result.blocked)}); nothing evicted"
        )
    else:
        head = f"preemption: evict {', '.join(result.victims)} on {result.node}"
        if result.decision is not None and result.decision.node is not None:
            head += ", then it runs there"
    return [head, *(f"  {node:<30} {answer.reason}" for node, answer in result.answers.items())]
