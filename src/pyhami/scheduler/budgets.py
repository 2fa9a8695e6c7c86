"""PodDisruptionBudgets as preemption counts them (pure: objects in, answers out).

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
from dataclasses import dataclass, replace
from typing import Any

from pyhami.engine import PodKey
from pyhami.engine.preempt import NodePreemption
from pyhami.model import PodView


class BudgetError(ValueError):
    """A budget whose selector cannot be read; the text names it and what is wrong."""


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str]

    def holds(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        inside = present and labels[self.key] in self.values
        return inside if self.operator == "In" else not inside


@dataclass(frozen=True, slots=True)
class Budget:
    """One PodDisruptionBudget: whom it covers and how many of them may go now."""

    name: str  # namespace/name
    namespace: str
    requirements: tuple[_Requirement, ...] | None  # None: the selector matches no pod
    allowed: int
    disrupted: frozenset[str]  # pod names the budget already counts as going

    @classmethod
    def from_object(cls, pdb: Mapping[str, Any]) -> Budget:
        meta = pdb.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        name = f"{namespace}/{meta.get('name') or ''}"
        status = pdb.get("status") or {}
        allowed = status.get("disruptionsAllowed")
        generation = meta.get("generation") or 0
        observed = status.get("observedGeneration") or 0
        if not isinstance(allowed, int) or observed < generation:
            allowed = 0
        selector = (pdb.get("spec") or {}).get("selector")
        return cls(
            name,
            namespace,
            _requirements(selector, name),
            allowed,
            frozenset(status.get("disruptedPods") or {}),
        )

    def covers(self, pod: PodView) -> bool:
        if self.requirements is None or pod.namespace != self.namespace:
            return False
        return all(requirement.holds(pod.labels) for requirement in self.requirements)


def _requirements(selector: object, name: str) -> tuple[_Requirement, ...] | None:
    if selector is None:
        return None
    if not isinstance(selector, Mapping):
        raise BudgetError(f"PodDisruptionBudget {name}: spec.selector is not an object")
    found = [
        _Requirement(str(key), "In", frozenset({str(value)}))
        for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        operator = expression.get("operator") if isinstance(expression, Mapping) else None
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise BudgetError(f"PodDisruptionBudget {name}: unknown selector operator {operator!r}")
        values = frozenset(str(value) for value in expression.get("values") or ())
        found.append(_Requirement(str(expression.get("key") or ""), operator, values))
    return tuple(found)


def read_budgets(pdbs: Iterable[Mapping[str, Any]]) -> tuple[Budget, ...]:
    return tuple(Budget.from_object(pdb) for pdb in pdbs)


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
