"""The one reader of pod and node JSON: what it keeps, and the errors that name what is wrong."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.kube.views import read_container, read_node, read_pod
from pyhami.model import NodeSpecError, PodSpecError

POD: dict[str, Any] = {
    "metadata": {
        "name": "trainer",
        "namespace": "ml",
        "uid": "u-1",
        "resourceVersion": "42",
        "labels": {"app": "train"},
        "annotations": {"hami.io/vgpu-node": "node1"},
        "deletionTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {
        "schedulerName": "hami-scheduler",
        "nodeName": "node1",
        "priority": 7,
        "initContainers": [
            {"name": "setup", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            {"name": "proxy", "restartPolicy": "Always"},
        ],
        "containers": [
            {
                "name": "main",
                "restartPolicy": "Always",  # not an init container: no sidecar
                "resources": {
                    "limits": {"nvidia.com/gpu": 2},
                    "requests": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"},
                },
            }
        ],
    },
    "status": {
        "phase": "Running",
        "initContainerStatuses": [
            {"name": "setup", "state": {"terminated": {"exitCode": 0}}},
            {"name": "proxy", "state": {"running": {}}},
        ],
    },
}


def test_every_field_is_read_once_into_the_view() -> None:
    view = read_pod(POD)
    assert (view.key, view.ref, view.uid, view.resource_version) == (
        "u-1",
        "ml/trainer",
        "u-1",
        "42",
    )
    assert view.labels == {"app": "train"} and view.annotations == {"hami.io/vgpu-node": "node1"}
    assert (view.scheduler_name, view.node_name, view.phase) == (
        "hami-scheduler",
        "node1",
        "Running",
    )
    assert view.deleting and view.priority == 7 and not view.finished
    assert [c.name for c in view.all_containers] == ["setup", "proxy", "main"]
    assert view.sidecars == frozenset({1})
    assert [s.succeeded for s in view.init_statuses] == [True, False]
    main = view.containers[0]
    assert main.quantity("nvidia.com/gpu") == 2  # limits before requests
    assert main.quantity("nvidia.com/gpumem") == "3000" and main.quantity("cpu") is None
    assert main.asks_for("nvidia.com/gpu") and not view.init_containers[1].asks_for(
        "nvidia.com/gpu"
    )


def test_a_pod_without_uid_is_keyed_by_namespace_and_name() -> None:
    view = read_pod({"metadata": {"name": "p"}})
    assert (view.key, view.namespace, view.all_containers, view.priority) == (
        "default/p",
        "default",
        (),
        0,
    )


def test_the_view_cannot_be_changed_through_its_mappings() -> None:
    view = read_pod(POD)
    with pytest.raises(TypeError):
        view.annotations["hami.io/vgpu-node"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        view.containers[0].limits["nvidia.com/gpu"] = "9"  # type: ignore[index]


@pytest.mark.parametrize(
    ("pod", "match"),
    [
        ({"metadata": []}, r"pod metadata must be an object, got list"),
        ({"metadata": {}}, r"pod has no metadata\.name"),
        (
            {"metadata": {"name": "p", "namespace": 3}},
            r"pod p: metadata\.namespace must be a string",
        ),
        (
            {"metadata": {"name": "p", "annotations": {"a": 1}}},
            r"pod annotation 'a' must be a string",
        ),
        ({"metadata": {"name": "p", "labels": {"l": None}}}, r"pod label 'l' must be a string"),
        ({"metadata": {"name": "p"}, "spec": "x"}, r"pod default/p: spec must be an object"),
        (
            {"metadata": {"name": "p"}, "spec": {"containers": [1]}},
            r"spec\.containers must be a list",
        ),
        (
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": 1}]}},
            r"pod default/p: container 'c': resources must be a mapping",
        ),
        (
            {
                "metadata": {"name": "p"},
                "spec": {"initContainers": [{"resources": {"requests": 1}}]},
            },
            r"container '<unnamed>': resources\.requests must be a mapping",
        ),
        (
            {"metadata": {"name": "p"}, "status": {"initContainerStatuses": [3]}},
            r"pod default/p: status\.initContainerStatuses\[\] must be an object",
        ),
    ],
)
def test_unreadable_pods_name_the_field(pod: dict[str, Any], match: str) -> None:
    with pytest.raises(PodSpecError, match=match):
        read_pod(pod)


def test_a_container_name_must_be_text() -> None:
    with pytest.raises(PodSpecError, match=r"container name must be a string, got 5"):
        read_container({"name": 5}, init=False)


def test_env_keeps_literal_values_and_names_from_elsewhere() -> None:
    env = [
        {"name": "A", "value": "1"},
        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"value": "nameless"},
        "junk",
    ]
    assert read_container({"name": "c", "env": env}, init=False).env == (("A", "1"), ("B", None))
    with pytest.raises(PodSpecError, match=r"container 'c': env must be a list"):
        read_container({"name": "c", "env": {"A": "1"}}, init=False)


def test_nodes_keep_labels_annotations_and_resources() -> None:
    node = read_node(
        {
            "metadata": {"name": "n1", "labels": {"gpu": "on"}, "annotations": {"a": "b"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "0"}},
        }
    )
    assert (node.name, node.labels, node.annotations) == ("n1", {"gpu": "on"}, {"a": "b"})
    assert node.allocatable == {"nvidia.com/gpu": "0"}
    with pytest.raises(NodeSpecError, match=r"node n1: status\.allocatable must be an object"):
        read_node({"metadata": {"name": "n1"}, "status": {"allocatable": []}})
    with pytest.raises(NodeSpecError, match=r"node annotation 'a' must be a string"):
        read_node({"metadata": {"name": "n1", "annotations": {"a": 1}}})


json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
container_like = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {},
        optional={
            "name": json_value,
            "restartPolicy": json_value | st.just("Always"),
            "resources": st.one_of(
                json_value,
                st.dictionaries(
                    st.sampled_from(["limits", "requests"]),
                    json_value
                    | st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]), json_value),
                ),
            ),
        },
    ),
)
pod_like = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(
            json_value,
            st.fixed_dictionaries(
                {},
                optional={
                    "name": json_value | st.text(min_size=1, max_size=4),
                    "namespace": json_value,
                    "uid": json_value,
                    "labels": json_value,
                    "annotations": json_value
                    | st.dictionaries(st.text(max_size=6), st.text(max_size=6)),
                    "deletionTimestamp": json_value,
                },
            ),
        ),
        "spec": st.one_of(
            json_value,
            st.fixed_dictionaries(
                {},
                optional={
                    "containers": json_value | st.lists(container_like, max_size=3),
                    "initContainers": json_value | st.lists(container_like, max_size=3),
                    "priority": json_value,
                    "nodeName": json_value,
                },
            ),
        ),
        "status": st.one_of(
            json_value,
            st.fixed_dictionaries(
                {},
                optional={
                    "phase": json_value,
                    "initContainerStatuses": st.lists(json_value, max_size=2),
                },
            ),
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(pod_like)
def test_hostile_pod_json_is_a_view_or_a_named_refusal(pod: dict[str, Any]) -> None:
    try:
        view = read_pod(pod)
    except PodSpecError as err:
        assert str(err).startswith("pod ")
        return
    assert view.name and view.key in (view.uid, view.ref)
    assert all(isinstance(value, str) for value in view.annotations.values())
    assert all(isinstance(c.name, str) for c in view.all_containers)
    assert view.sidecars <= frozenset(range(len(view.init_containers)))
