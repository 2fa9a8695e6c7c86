"""kube.manifests: the objects of files and lists read once, a followed pod's status and the
claims its containers use read from the API's JSON, the demo's pod files checked."""

import pytest

from pyhami.kube.manifests import (
    ManifestError,
    NamespaceManifest,
    PodManifest,
    QuotaView,
    Unread,
    read_manifests,
    read_pod_file_object,
    read_pod_state,
)
from pyhami.model import NodeView, PodSpecError, PodView


def test_list_items_without_a_kind_are_of_the_lists_kind() -> None:
    listed = {
        "kind": "List",
        "items": [
            {"kind": "NodeList", "items": [{"metadata": {"name": "n1"}}]},
            {
                "kind": "ResourceQuota",
                "metadata": {"name": "q", "namespace": "ml"},
                "spec": {"hard": {"nvidia.com/gpu": "2"}},
            },
            {"kind": "PodDisruptionBudget", "metadata": {"name": "b"}},
            {"kind": "Pod", "metadata": {"name": "p"}},
        ],
    }
    node, quota, budget, pod = read_manifests(listed)
    assert isinstance(node, NodeView) and node.name == "n1"
    assert quota == QuotaView("ml/q", "ml", {"nvidia.com/gpu": "2"})
    assert budget == Unread(
        "PodDisruptionBudget", {"kind": "PodDisruptionBudget", "metadata": {"name": "b"}}
    )
    assert isinstance(pod, PodView) and pod.ref == "default/p"


@pytest.mark.parametrize(
    ("document", "error", "message"),
    [
        ([1, 2], ManifestError, "expected Kubernetes objects, got list"),
        ({"kind": "PodList", "items": 3}, ManifestError, "PodList.items must be a list"),
        ({"metadata": {"name": "x"}}, ManifestError, "an object without a kind"),
        ({"kind": "ResourceQuota", "metadata": {}}, ManifestError, "needs metadata.name"),
        ({"kind": "Pod", "metadata": {}}, PodSpecError, "pod has no metadata.name"),
    ],
)
def test_unreadable_objects_are_named(
    document: object, error: type[ValueError], message: str
) -> None:
    with pytest.raises(error, match=message):
        list(read_manifests(document))


def test_a_pods_state_names_why_it_waits_and_which_claims_its_containers_use() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "initContainers": [{"name": "init", "resources": {"claims": [{"name": "gpu"}]}}],
            "containers": [
                {"name": "app", "resources": {"claims": [{"name": "gpu", "request": "big"}]}},
                {"name": "side", "resources": {"claims": [{"name": "not-allocated"}]}},
            ],
        },
        "status": {
            "message": "waiting",
            "conditions": [
                {"type": "Ready", "status": "False", "message": "not this one"},
                {"type": "PodScheduled", "status": "False", "message": "0/3 nodes"},
            ],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x1"}],
        },
    }
    state = read_pod_state(pod)
    assert state.pod.ref == "ml/p" and state.message == "waiting"
    assert state.unscheduled == "0/3 nodes"
    assert [(use.container, use.claim, use.request) for use in state.claims] == [
        ("init", "p-gpu-x1", ""),
        ("app", "p-gpu-x1", "big"),
    ]
    assert read_pod_state({"metadata": {"name": "q"}}).unscheduled is None


def test_pod_files_keep_every_field_and_store_quantities_as_strings() -> None:
    pod, namespace = read_pod_file_object(
        {
            "kind": "List",
            "items": [
                {
                    "metadata": {"name": "p"},
                    "spec": {
                        "nodeSelector": {"a": "b"},
                        "containers": [
                            {
                                "name": "c",
                                "image": "i",
                                "resources": {"limits": {"nvidia.com/gpu": 1}},
                            }
                        ],
                    },
                },
                {"kind": "Namespace", "metadata": {"name": "team", "labels": {"n": 1}, "uid": "u"}},
            ],
        },
        "ns",
    )
    assert isinstance(pod, PodManifest) and (pod.namespace, pod.name) == ("ns", "p")
    assert pod.document == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "nodeSelector": {"a": "b"},
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }
    assert namespace == NamespaceManifest("team", {"n": "1"})
    assert namespace.encode() == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team", "labels": {"n": "1"}},
    }
    with pytest.raises(ManifestError, match="item 1: kind 'Service' is neither"):
        read_pod_file_object({"kind": "List", "items": [{"kind": "Service"}]}, "ns")
