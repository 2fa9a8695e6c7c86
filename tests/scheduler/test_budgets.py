"""PodDisruptionBudgets as preemption counts them (scheduler/budgets.py)."""

import pytest

from pyhami.kube.views import read_budget, read_pod
from pyhami.model import PodView
from pyhami.model.views import Budget, BudgetError
from pyhami.scheduler.budgets import protected, violations


def read_budgets(pdbs: list[dict[str, object]]) -> list[Budget]:
    return [read_budget(pdb) for pdb in pdbs]


def pdb(
    name: str,
    selector: object,
    allowed: int,
    *,
    generation: int = 1,
    observed: int = 1,
    disrupted: tuple[str, ...] = (),
) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "team", "generation": generation},
        "spec": {"selector": selector},
        "status": {
            "disruptionsAllowed": allowed,
            "observedGeneration": observed,
            "disruptedPods": {p: "2026-01-01T00:00:00Z" for p in disrupted},
        },
    }


def pod(name: str, namespace: str = "team", **labels: str) -> PodView:
    return read_pod({"metadata": {"name": name, "namespace": namespace, "labels": labels}})


def test_selectors_cover_pods_of_their_namespace_only() -> None:
    [tier] = read_budgets(
        [
            pdb(
                "tier",
                {
                    "matchLabels": {"app": "db"},
                    "matchExpressions": [
                        {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
                        {"key": "canary", "operator": "DoesNotExist"},
                    ],
                },
                1,
            )
        ]
    )
    assert tier.covers(pod("a", app="db", tier="gold"))
    assert not tier.covers(pod("b", app="db", tier="bronze"))
    assert not tier.covers(pod("c", app="db", tier="gold", canary="yes"))
    assert not tier.covers(pod("d", "other", app="db", tier="gold"))
    everyone, no_one = read_budgets([pdb("all", {}, 1), pdb("none", None, 1)])
    assert everyone.covers(pod("e")) and not no_one.covers(pod("e"))
    [absent] = read_budgets(
        [pdb("x", {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}, 1)]
    )
    assert absent.covers(pod("f")) and not absent.covers(pod("g", app="db"))


def test_a_budget_the_controller_has_not_seen_allows_nothing() -> None:
    assert read_budget(pdb("new", {}, 3, generation=2, observed=1)).allowed == 0
    assert read_budget({"metadata": {"name": "bare"}, "spec": {"selector": {}}}).allowed == 0


def test_victims_take_disruptions_in_order_and_the_excess_violates() -> None:
    budgets = read_budgets([pdb("one", {"matchLabels": {"app": "db"}}, 1, disrupted=("gone",))])
    victims = [pod("a", app="db"), pod("gone", app="db"), pod("b", app="db"), pod("c")]
    assert violations(victims, budgets) == ["team/b: team/one"]
    assert protected([("k", pod("a", app="db"))], budgets) == frozenset()
    closed = read_budgets([pdb("zero", {"matchLabels": {"app": "db"}}, 0)])
    assert protected([("k", pod("a", app="db")), ("j", pod("c"))], closed) == {"k"}


def test_an_unreadable_selector_is_named() -> None:
    unknown = r"team/bad: spec\.selector: unknown label selector operator 'Near'"
    with pytest.raises(BudgetError, match=unknown):
        read_budgets([pdb("bad", {"matchExpressions": [{"key": "a", "operator": "Near"}]}, 1)])
    with pytest.raises(BudgetError, match=r"spec\.selector: label selector is not an object"):
        read_budgets([pdb("bad", ["app"], 1)])


def test_a_pod_two_budgets_cover_cannot_be_evicted() -> None:
    """The Eviction API refuses a pod under more than one budget, whatever they allow."""
    budgets = read_budgets([pdb("one", {"matchLabels": {"app": "db"}}, 5), pdb("two", {}, 5)])
    assert violations([pod("a", app="db")], budgets) == ["team/a: team/one, team/two"]
    assert violations([pod("b")], budgets) == []
    assert protected([("k", pod("a", app="db")), ("j", pod("b"))], budgets) == {"k"}
