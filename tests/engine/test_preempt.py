"""Preemption answers (engine/preempt.py): the fewest lower-priority pods whose removal makes
room on the cards, each of them needed; nodes no eviction helps are dropped."""

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import (
    EngineConfig,
    Ledger,
    Outcome,
    PodAllocation,
    QuotaBook,
    decide,
    plan_pod,
)
from pyhami.engine.preempt import PreemptionInput, Proposal, preempt
from pyhami.kube.views import read_pod
from pyhami.model import NodeName

from .builders import N, card, gpus, inventory, pod, used

CONFIG = EngineConfig(vendor=NvidiaVendor())


def holder(key: str, node: str, uuid: str, mem: int, namespace: str = "default") -> PodAllocation:
    return PodAllocation(key, namespace, key, N(node), ((used(uuid, mem),),))


def question(the_pod: dict[str, Any], priority: int, priorities: dict[str, int]) -> PreemptionInput:
    the_pod["spec"]["priority"] = priority
    names = {k: f"default/{k}" for k in priorities}
    return PreemptionInput(read_pod(the_pod), priority, priorities, names)


def two_t4s() -> Ledger:
    """card 0: low-a 8000 + low-b 7000; card 1: low-c 3000 + high-e 3000 (not preemptible)."""
    ledger = Ledger()
    ledger.upsert_node(N("n1"), inventory(card("c0", 15360), card("c1", 15360, index=1)))
    for allocation in (holder("low-a", "n1", "c0", 8000), holder("low-b", "n1", "c0", 7000),
                       holder("low-c", "n1", "c1", 3000), holder("high-e", "n1", "c1", 3000)):
        ledger.add_pod(allocation)
    return ledger


PRIORITIES = {"low-a": 0, "low-b": 0, "low-c": 0, "high-e": 1000}


def test_the_two_pods_on_the_card_that_can_be_freed_are_the_victims() -> None:
    ledger = two_t4s()
    big = question(pod("big", gpus(1, mem=14000)), 100, PRIORITIES)
    # kube-scheduler proposed low-c (its own filters saw only CPU or slots)
    answer = preempt(big, {N("n1"): Proposal(frozenset({"low-c"}))}, ledger, config=CONFIG,
                     quotas=None)[N("n1")]
    assert answer.victims == ("low-a", "low-b")
    assert answer.pdb_violations == 2, "victims kube-scheduler did not propose may violate PDBs"
    assert answer.allocation is not None
    assert [d.uuid for d in answer.allocation.containers[0]] == ["c0"]
    assert "evict default/low-a (priority 0), default/low-b (priority 0)" in answer.reason
    assert "it gets c0" in answer.reason


def test_kube_schedulers_own_victims_are_preferred_and_keep_their_pdb_count() -> None:
    ledger = two_t4s()
    # 10000 MiB: card 1 has 9360 free, low-c's going makes 12360; card 0 needs both its pods
    small = question(pod("small", gpus(1, mem=10000)), 100, PRIORITIES)
    proposal = Proposal(frozenset({"low-b", "low-c"}), pdb_violations=0)
    answer = preempt(small, {N("n1"): proposal}, ledger, config=CONFIG, quotas=None)[N("n1")]
    assert answer.victims == ("low-c",)
    assert answer.pdb_violations == 0
    # without kube-scheduler's preference the same single victim wins on size alone
    alone = preempt(small, {N("n1"): Proposal(frozenset({"low-a"}), 1)}, ledger,
                    config=CONFIG, quotas=None)[N("n1")]
    assert (alone.victims, alone.pdb_violations) == (("low-c",), 1)


def test_a_pod_no_eviction_helps_drops_the_node() -> None:
    ledger = two_t4s()
    huge = question(pod("huge", gpus(1, mem=20000)), 100, PRIORITIES)
    answer = preempt(huge, {N("n1"): Proposal(frozenset({"low-a"}))}, ledger, config=CONFIG,
                     quotas=None)[N("n1")]
    assert answer.victims == () and not answer.kept
    assert "even without all 3 lower-priority pods" in answer.reason
    assert "CardInsufficientMemory" in answer.reason


def test_higher_priority_pods_are_never_victims() -> None:
    ledger = two_t4s()
    # only card 1 has a slot-free path if high-e could go: it cannot, so card 0 it is
    modest = question(pod("modest", gpus(2, mem=8000)), 100, PRIORITIES)
    answer = preempt(modest, {N("n1"): Proposal(frozenset())}, ledger, config=CONFIG,
                     quotas=None)[N("n1")]
    assert "high-e" not in answer.victims
    assert set(answer.victims) <= {"low-a", "low-b", "low-c"}


def test_pods_a_budget_protects_go_only_where_the_others_cannot_make_room() -> None:
    ledger = two_t4s()
    ledger.add_pod(holder("low-f", "n1", "c1", 6000))  # card 1: low-c 3000, low-f 6000, high-e
    priorities = {**PRIORITIES, "low-f": 0}
    # 8000 MiB: low-a alone would do (8360 free) and comes first, but a budget protects it;
    # low-f alone does too (9360 free on card 1)
    ask = replace(question(pod("p", gpus(1, mem=8000)), 100, priorities),
                  protected=frozenset({"low-a"}))
    answer = preempt(ask, {N("n1"): Proposal(frozenset())}, ledger, config=CONFIG,
                     quotas=None)[N("n1")]
    assert answer.victims == ("low-f",)
    unguarded = preempt(replace(ask, protected=frozenset()), {N("n1"): Proposal(frozenset())},
                        ledger, config=CONFIG, quotas=None)[N("n1")]
    assert unguarded.victims == ("low-a",)
    # 14000 MiB: only card 0's two pods make room, protected or not
    ask = replace(question(pod("q", gpus(1, mem=14000)), 100, priorities),
                  protected=frozenset({"low-a"}))
    answer = preempt(ask, {N("n1"): Proposal(frozenset())}, ledger, config=CONFIG,
                     quotas=None)[N("n1")]
    assert answer.victims == ("low-a", "low-b")


def test_a_pod_that_fits_the_cards_keeps_kube_schedulers_proposal() -> None:
    ledger = two_t4s()
    tiny = question(pod("tiny", gpus(1, mem=100)), 100, PRIORITIES)
    answer = preempt(tiny, {N("n1"): Proposal(frozenset({"low-c"}), 1)}, ledger, config=CONFIG,
                     quotas=None)[N("n1")]
    assert (answer.victims, answer.pdb_violations) == (("low-c",), 1)


def test_an_unregistered_node_is_dropped() -> None:
    answer = preempt(question(pod("p", gpus(1)), 1, {}), {N("nowhere"): Proposal(frozenset())},
                     Ledger(), config=CONFIG, quotas=None)[N("nowhere")]
    assert not answer.kept and "no registered GPUs" in answer.reason


def test_victims_in_the_namespace_free_its_quota() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("n1"), inventory(card("c0", 15360)))
    ledger.upsert_node(N("n2"), inventory(card("d0", 15360)))
    ledger.add_pod(holder("low-a", "n1", "c0", 3000, namespace="team"))
    ledger.add_pod(holder("low-b", "n2", "d0", 3000, namespace="team"))
    quotas = QuotaBook(NvidiaConfig())
    quotas.set_quota("q", "team", {"limits.nvidia.com/gpumem": "8000"})
    wanting = pod("w", gpus(1, mem=4000), namespace="team")
    ask = question(wanting, 10, {"low-a": 0, "low-b": 0})
    answer = preempt(ask, {N("n1"): Proposal(frozenset())}, ledger, config=CONFIG,
                     quotas=quotas)[N("n1")]
    assert answer.victims == ("low-a",), "6000 + 4000 > 8000: one of the team's pods must go"


# ----- property: every victim is needed, and all of them are enough ----------------------------

holding = st.tuples(st.integers(0, 2), st.integers(500, 9000), st.integers(0, 3))


@settings(max_examples=80, deadline=None)
@given(st.lists(holding, max_size=8), st.integers(1, 2), st.integers(1000, 16000),
       st.sampled_from(["binpack", "spread"]), st.integers(1, 3), st.sampled_from([400, 2]),
       st.one_of(st.none(), st.sets(st.integers(0, 7))))
def test_an_answer_never_names_a_victim_that_is_not_needed(
    holders: list[tuple[int, int, int]], count: int, memory: int, policy: str, priority: int,
    exact_tries: int, guarded: set[int] | None,
) -> None:
    """Both searches: by size (exact), and greedy (where the exact one would take too long).
    Both paths: kube-scheduler's /preempt (it proposes every pod) and the scheduler's own
    (`guarded` not None: no proposal, the pods a PodDisruptionBudget protects are given)."""
    inv = inventory(*(card(f"c{n}", 16000, count=3, index=n) for n in range(3)))
    ledger = Ledger()
    ledger.upsert_node(N("n1"), inv)
    priorities = {}
    for n, (index, mem, prio) in enumerate(holders):
        ledger.add_pod(holder(f"p{n}", "n1", f"c{index}", mem))
        priorities[f"p{n}"] = prio
    the_pod = pod("x", gpus(count, mem=memory),
                  annotations={"hami.io/gpu-scheduler-policy": policy})
    ask = question(the_pod, priority, priorities)
    proposal = Proposal(frozenset(priorities))
    protected: frozenset[str] = frozenset()
    if guarded is not None:
        protected = frozenset(f"p{n}" for n in guarded if n < len(holders))
        ask = replace(ask, protected=protected)
        proposal = Proposal(frozenset())
    answer = preempt(ask, {N("n1"): proposal}, ledger, config=CONFIG, quotas=None,
                     exact_tries=exact_tries)[N("n1")]

    def fits_without(victims: set[str]) -> bool:
        rest = Ledger()
        rest.upsert_node(N("n1"), inv)
        for n, (index, mem, _) in enumerate(holders):
            if f"p{n}" not in victims:
                rest.add_pod(holder(f"p{n}", "n1", f"c{index}", mem))
        decision = decide(
            plan_pod(read_pod(the_pod), CONFIG), [NodeName("n1")], rest, config=CONFIG, quotas=None
        )
        return decision.outcome is Outcome.SCHEDULED

    if fits_without(set()):
        return  # the cards are not the obstacle: kube-scheduler's proposal stands
    lower = {key for key, prio in priorities.items() if prio < priority}
    if not fits_without(lower):
        assert not answer.kept
        return
    assert answer.kept
    victims = set(answer.victims)
    assert victims <= lower
    assert fits_without(victims)
    for victim in victims:
        assert not fits_without(victims - {victim}), f"{victim} is not needed"
    if fits_without(lower - protected):
        assert not victims & protected, "protected pods go only where the others cannot do"
