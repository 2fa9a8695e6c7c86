"""Preemption for GPU pods: which lower-priority pods must go so that a pending pod fits a node.

kube-scheduler finds candidate nodes and victims with its own filters, which cannot see GPU
memory, cores or cards; it then asks the extender (`preemptVerb`) to answer, per node, the
victims that really make room. This module is that answer, pure: for each proposed node it
evaluates the pending pod on the node's cards without a set of victims (the same `decide` as
`/filter`, on a scratch ledger of that node alone), and answers

* the fewest lower-priority pods on the node whose removal lets the pod fit (its memory,
  cores, slots, card type and UUID selectors, GPU policy and namespace quota, all through
  `decide`), preferring kube-scheduler's own victims, then lower priorities; every victim is
  needed: giving any one of them back makes the pod not fit. Pods a PodDisruptionBudget
  protects (`PreemptionInput.protected`) are victims only where the others cannot make room;
* kube-scheduler's proposal unchanged when the cards are not what keeps the pod out (it fits
  them already: its victims free something else, such as CPU);
* nothing (the node is dropped) when even removing every lower-priority pod there leaves the
  pod without cards.

A pod that holds no card on the node frees nothing there and is never a victim. kube-scheduler
deletes what the answer names and nominates the node; the claim in `NodePreemption.allocation`
is what the scheduler holds for the pod there while the victims terminate.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from pyhami.engine.collapse import collapse_init_usage
from pyhami.engine.decide import Decision, Outcome, decide
from pyhami.engine.ledger import Ledger, PodAllocation, PodKey
from pyhami.engine.pod import EngineConfig, PodPlan, plan_pod
from pyhami.engine.quota import QuotaBook
from pyhami.model import ContainerDevice, NodeName, PodSpecError, PodView
from pyhami.protocol import NVIDIA_VENDOR

# Victim sets tried in order of size before the search turns greedy (a node holds few pods;
# this bounds the work for one that holds many).
MAX_EXACT_TRIES = 400
# Where the scratch ledger books the rest of the namespace's usage, for its quota.
_ELSEWHERE = NodeName("")


@dataclass(frozen=True, slots=True)
class Proposal:
    """kube-scheduler's candidate victims on one node and its count of PDB violations."""

    victims: frozenset[PodKey]
    pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class NodePreemption:
    """The answer for one node: the victims (empty: the node is dropped) and why."""

    node: NodeName
    victims: tuple[PodKey, ...]
    # kube-scheduler's count where the victims are its own; a victim of ours outside its
    # proposal counts as a possible violation (its PDBs are kube-scheduler's knowledge).
    pdb_violations: int
    reason: str
    allocation: PodAllocation | None = None  # the pod's cards once the victims are gone

    @property
    def kept(self) -> bool:
        return bool(self.victims)


@dataclass(frozen=True, slots=True)
class PreemptionInput:
    """What one preemption question reads besides the ledger."""

    pod: PodView
    priority: int
    priorities: Mapping[PodKey, int]  # of the pods on the proposed nodes; absent means 0
    names: Mapping[PodKey, str]  # namespace/name of those pods, for the reasons
    # Pods whose eviction a PodDisruptionBudget forbids now: victims only where the others
    # cannot make room.
    protected: frozenset[PodKey] = frozenset()


def preempt(
    question: PreemptionInput,
    proposals: Mapping[NodeName, Proposal],
    ledger: Ledger,
    *,
    config: EngineConfig,
    quotas: QuotaBook | None,
    exact_tries: int = MAX_EXACT_TRIES,
) -> dict[NodeName, NodePreemption]:
    """The answer for every proposed node (kept or dropped, each with its reason).

    `exact_tries` bounds the search by size before it turns greedy (tests lower it)."""
    try:
        plan = plan_pod(question.pod, config)  # once for every node and every victim set
    except PodSpecError as err:
        return {node: NodePreemption(node, (), 0, f"dropped: {err}") for node in proposals}
    return {
        node: _node_answer(
            question,
            plan,
            node,
            proposal,
            ledger,
            config=config,
            quotas=quotas,
            exact_tries=exact_tries,
        )
        for node, proposal in proposals.items()
    }


class _Scratch:
    """One node's cards and pods in a ledger of their own, where victims come and go."""

    def __init__(self, ledger: Ledger, node: NodeName, pod_key: PodKey, namespace: str) -> None:
        live = ledger.node(node)
        assert live is not None
        self.ledger = Ledger()
        self.ledger.upsert_node(node, live.inventory)
        self.pods = {a.key: a for a in ledger.pods_on(node) if a.key != pod_key}
        for allocation in self.pods.values():
            self.ledger.add_pod(allocation)
        # The namespace's usage on other nodes still counts against its quota.
        live_mem, live_cores = ledger.namespace_usage(namespace)
        own = ledger.pod(pod_key)
        if own is not None:  # the pending pod's own claim does not compete with it
            usage = collapse_init_usage(own.containers, own.init_count, NVIDIA_VENDOR, own.sidecars)
            live_mem -= sum(device.usedmem for device in usage)
            live_cores -= sum(device.usedcores for device in usage)
        here_mem, here_cores = self.ledger.namespace_usage(namespace)
        rest = ContainerDevice("", NVIDIA_VENDOR, live_mem - here_mem, live_cores - here_cores)
        self.ledger.add_pod(PodAllocation("", namespace, "", _ELSEWHERE, ((rest,),)))

    def decide_without(
        self,
        victims: Sequence[PodKey],
        plan: PodPlan,
        node: NodeName,
        *,
        config: EngineConfig,
        quotas: QuotaBook | None,
    ) -> Decision:
        for key in victims:
            self.ledger.remove_pod(key)
        try:
            return decide(plan, [node], self.ledger, config=config, quotas=quotas)
        finally:
            for key in victims:
                self.ledger.add_pod(self.pods[key])


def _node_answer(
    question: PreemptionInput,
    plan: PodPlan,
    node: NodeName,
    proposal: Proposal,
    ledger: Ledger,
    *,
    config: EngineConfig,
    quotas: QuotaBook | None,
    exact_tries: int,
) -> NodePreemption:
    if ledger.node(node) is None:
        return NodePreemption(node, (), 0, "dropped: the node has no registered GPUs")
    scratch = _Scratch(ledger, node, question.pod.key, question.pod.namespace)

    def attempt(victims: Sequence[PodKey]) -> Decision:
        return scratch.decide_without(victims, plan, node, config=config, quotas=quotas)

    as_is = attempt(())
    if as_is.outcome in (Outcome.SCHEDULED, Outcome.NO_DEVICE_REQUEST):
        return NodePreemption(
            node,
            tuple(sorted(proposal.victims)),
            proposal.pdb_violations,
            "kept as kube-scheduler proposed: the pod's GPUs fit here already, so its "
            "victims make room for something else",
        )
    if as_is.outcome is Outcome.ERROR:
        return NodePreemption(node, (), 0, f"dropped: {as_is.error}")
    pool = _pool(question, scratch, proposal)
    everyone = attempt(pool)
    if everyone.outcome is not Outcome.SCHEDULED:
        why = everyone.failed_nodes.get(node, "no fit")
        return NodePreemption(
            node,
            (),
            0,
            f"dropped: even without all {len(pool)} lower-priority pods holding GPUs "
            f"here the pod does not fit ({why})",
        )
    unprotected = tuple(key for key in pool if key not in question.protected)
    if len(unprotected) < len(pool) and attempt(unprotected).outcome is Outcome.SCHEDULED:
        pool = unprotected
    victims = _fewest(pool, attempt, exact_tries)
    chosen = attempt(victims)
    outside = sum(1 for victim in victims if victim not in proposal.victims)
    inside = len(victims) - outside
    violations = min(proposal.pdb_violations, inside) + outside
    return NodePreemption(
        node,
        victims,
        violations,
        _chosen_reason(question, victims, chosen, as_is, node),
        chosen.allocation,
    )


def best_node(
    answers: Mapping[NodeName, NodePreemption], priorities: Mapping[PodKey, int]
) -> NodePreemption | None:
    """The kept answer kube-scheduler would pick: fewest PDB violations, then the lowest
    highest victim priority, the lowest sum of victim priorities, the fewest victims, then
    the node name. None when no node is kept."""

    def rank(answer: NodePreemption) -> tuple[int, int, int, int, str]:
        ranks = [priorities.get(victim, 0) for victim in answer.victims]
        return (answer.pdb_violations, max(ranks), sum(ranks), len(ranks), answer.node)

    kept = [answer for answer in answers.values() if answer.kept]
    return min(kept, key=rank) if kept else None


def _pool(question: PreemptionInput, scratch: _Scratch, proposal: Proposal) -> tuple[PodKey, ...]:
    """The pods that may go, most preferred victim first: kube-scheduler's own, then the
    lowest priority, then the key. Only lower-priority pods that hold a card here."""
    eligible = [
        key
        for key, allocation in scratch.pods.items()
        if question.priorities.get(key, 0) < question.priority
        and any(devices for devices in allocation.containers)
    ]
    return tuple(
        sorted(
            eligible,
            key=lambda k: (k not in proposal.victims, question.priorities.get(k, 0), k),
        )
    )


Attempt = Callable[[Sequence[PodKey]], Decision]


def _fewest(pool: Sequence[PodKey], attempt: Attempt, exact_tries: int) -> tuple[PodKey, ...]:
    """The first fitting set by size, then preference; past `exact_tries`, the greedy
    search: all gone, then each given back (most important first) while the pod still fits.
    Either way no victim can be given back."""
    tries = 0
    for size in range(1, len(pool) + 1):
        for victims in combinations(pool, size):
            tries += 1
            if tries > exact_tries:
                return _greedy(pool, attempt)
            if attempt(victims).outcome is Outcome.SCHEDULED:
                return victims
    return tuple(pool)


def _greedy(pool: Sequence[PodKey], attempt: Attempt) -> tuple[PodKey, ...]:
    victims = list(pool)
    for key in reversed(pool):
        trial = [victim for victim in victims if victim != key]
        if attempt(trial).outcome is Outcome.SCHEDULED:
            victims = trial
    return tuple(victim for victim in pool if victim in victims)


def _chosen_reason(
    question: PreemptionInput,
    victims: Sequence[PodKey],
    chosen: Decision,
    as_is: Decision,
    node: NodeName,
) -> str:
    described = (
        f"{question.names.get(v, v)} (priority {question.priorities.get(v, 0)})" for v in victims
    )
    named = ", ".join(sorted(described))  # by name: the same victims always read the same
    placed = chosen.allocation.containers if chosen.allocation else ()
    cards = sorted({d.uuid for devices in placed for d in devices})
    fewest = "the only victim" if len(victims) == 1 else f"the fewest {len(victims)} victims"
    return (
        f"evict {named}: {fewest} whose removal lets the pod fit (it gets "
        f"{', '.join(cards)}); now it does not ({as_is.failed_nodes.get(node, 'no fit')})"
    )
