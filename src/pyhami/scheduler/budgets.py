"""PodDisruptionBudgets as preemption counts them (pure: the views `kube.views.read_budget`
reads in, answers out).

A budget (policy/v1) covers the pods of its namespace that its label selector matches (an
empty selector matches all of them, a missing one none). `status.disruptionsAllowed` is how
many of them may go now; while the disruption controller has not seen the budget's latest
spec (`status.observedGeneration` behind `metadata.generation`) the API server refuses every
eviction it covers, so it allows none. Counted as kube-scheduler counts them: victims in
order, each taking one disruption from every budget that covers it (unless the budget already
lists it as disrupted); a victim violates when one of its budgets is left below zero. A pod
that more than one budget covers always does: the Eviction API refuses to evict it (500).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from pyhami.engine import PodKey
from pyhami.engine.preempt import NodePreemption
from pyhami.model import PodView
from pyhami.model.views import Budget


def protected(pods: Iterable[tuple[str, PodView]], budgets: Sequence[Budget]) -> frozenset[str]:
    """The keys of the pods that cannot be evicted now, even alone."""
    found = set()
    for key, pod in pods:
        covering = [budget for budget in budgets if budget.covers(pod)]
        if len(covering) > 1 or any(budget.allowed <= 0 for budget in covering):
            found.add(key)
    return frozenset(found)


def violations(victims: Sequence[PodView], budgets: Sequence[Budget]) -> list[str]:
    """For each violating victim, in order, `pod: budget` (its budgets left below zero)."""
    left = {budget.name: budget.allowed for budget in budgets}
    found = []
    for pod in victims:
        covering = [budget for budget in budgets if budget.covers(pod)]
        broken = []
        for budget in covering:
            if pod.name in budget.disrupted:
                continue
            left[budget.name] -= 1
            if left[budget.name] < 0 or len(covering) > 1:
                broken.append(budget.name)
        if broken:
            found.append(f"{pod.ref}: {', '.join(broken)}")
    return found


def counted(
    answer: NodePreemption, pods: Mapping[PodKey, PodView], budgets: Sequence[Budget]
) -> NodePreemption:
    """The answer with its exact count of budget violations, for a question with no
    kube-scheduler proposal (where the engine counts every victim as a possible one)."""
    if not answer.kept:
        return answer
    count = len(violations([pods[v] for v in answer.victims if v in pods], budgets))
    return replace(answer, pdb_violations=count)
