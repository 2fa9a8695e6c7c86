"""Label and field selector parsing (Kubernetes "Labels and Selectors", "Field Selectors")."""

import pytest

from pyhami.testing.fake_apiserver.objects import StoredObject
from pyhami.testing.fake_apiserver.resources import NODES, PODS
from pyhami.testing.fake_apiserver.selectors import (
    LabelSelector,
    Selector,
    parse_label_selector,
)
from pyhami.testing.fake_apiserver.status import ApiError


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [
        ("", {}, True),
        ("app=a", {"app": "a"}, True),
        ("app==a", {"app": "b"}, False),
        ("app!=a", {}, True),
        ("app in (a, b)", {"app": "b"}, True),
        ("app notin (a,b)", {"app": "c"}, True),
        ("app notin (a,b)", {}, True),
        ("app", {"app": ""}, True),
        ("!app", {"app": ""}, False),
        ("example.com/tier=x,app", {"example.com/tier": "x", "app": "1"}, True),
        ("app=", {"app": ""}, True),
    ],
)
def test_label_selector(selector: str, labels: dict[str, str], want: bool) -> None:
    assert all(r.holds(labels) for r in parse_label_selector(selector)) is want


@pytest.mark.parametrize("selector", ["app in a", "a=b=c", "Bad Key=1", "a in ()", ",", "a=(b"])
def test_bad_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_label_selector(selector)
    assert caught.value.code == 400


def test_field_selector_per_resource() -> None:
    pod = StoredObject.decode(
        PODS,
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running"},
        },
    )
    assert Selector.parse(PODS, "", "spec.nodeName=n1,status.phase!=Pending").matches(pod)
    assert not Selector.parse(PODS, "", "metadata.namespace==other").matches(pod)
    node = StoredObject.decode(NODES, {"metadata": {"name": "n"}, "spec": {"unschedulable": True}})
    assert Selector.parse(NODES, "", "spec.unschedulable=true").matches(node)
    with pytest.raises(ApiError, match=r"field label not supported: spec\.nodeName"):
        Selector.parse(NODES, "", "spec.nodeName=x")


def test_label_selector_objects_as_webhooks_carry_them() -> None:
    selector = LabelSelector.decode(
        {
            "matchLabels": {"a": "1"},
            "matchExpressions": [
                {"key": "b", "operator": "NotIn", "values": ["x"]},
                {"key": "c", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector == LabelSelector(parse_label_selector("a=1,b notin (x),!c"))
    assert selector.matches({"a": "1"}) and selector.matches({"a": "1", "b": "y"})
    assert not selector.matches({"a": "1", "b": "x"}) and not selector.matches({"a": "1", "c": ""})
    assert LabelSelector.decode(None).matches({"any": "thing"})
    with pytest.raises(ApiError):
        LabelSelector.decode({"matchExpressions": [{"key": "a", "operator": "Near"}]})
