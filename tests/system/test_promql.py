"""The dashboard test's PromQL evaluator, on hand-made samples: it must compute what
Prometheus would, and refuse what it cannot check."""

import pytest

from .promql import LabelMistake, Series, Unsupported, evaluate, legend_labels, series_from

SAMPLES = series_from(
    {
        "used": [({"namespace": "a", "quota_name": "mem", "limit": "10"}, 3.0)],
        "limit": [({"namespace": "a", "quota_name": "mem"}, 10.0)],
        "cards": [
            ({"node": "n1", "uuid": "u1", "pod": "p"}, 1.0),
            ({"node": "n1", "uuid": "u1", "pod": "q"}, 2.0),
            ({"node": "n2", "uuid": "u2", "pod": "p"}, 5.0),
        ],
    }
)


def values(query: str) -> dict[frozenset[tuple[str, str]], float]:
    return {s.labels: s.value for s in evaluate(query, SAMPLES)}


def labels(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


def test_one_to_one_matching_needs_equal_label_sets_as_in_prometheus() -> None:
    assert values("used / limit") == {}, "the extra `limit` label keeps the two apart"
    assert values("used / ignoring(limit) limit") == {labels(namespace="a", quota_name="mem"): 0.3}
    assert values("used / on(namespace) limit * 100") == {labels(namespace="a"): 30.0}


def test_aggregation_by_and_without_and_matchers() -> None:
    assert values("sum by (node) (cards)") == {labels(node="n1"): 3.0, labels(node="n2"): 5.0}
    assert values('max without (pod) (cards{node="n1"})') == {labels(node="n1", uuid="u1"): 2.0}
    assert values('count(cards{pod!="p"})') == {labels(): 1.0}


def test_grouping_or_matching_on_a_missing_label_is_a_mistake() -> None:
    with pytest.raises(LabelMistake, match="nodeid"):
        evaluate("sum by (nodeid) (cards)", SAMPLES)
    with pytest.raises(LabelMistake, match="quota"):
        evaluate("used / on(quota) limit", SAMPLES)


@pytest.mark.parametrize(
    "query", ["rate(cards[5m])", "cards offset 5m", "topk(1, cards)", "cards > 1", "1 + 1"]
)
def test_what_it_cannot_evaluate_is_refused(query: str) -> None:
    with pytest.raises(Unsupported):
        evaluate(query, SAMPLES)


def test_legend_labels_are_read_from_grafana_templates() -> None:
    assert legend_labels("{{node}} #{{ device_index }}") == ["node", "device_index"]
    assert Series(None, labels(node="n1"), 1.0).get("pod") == ""
