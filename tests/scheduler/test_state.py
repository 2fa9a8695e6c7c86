"""Node registry and pod cache rules of ClusterState (real annotation decoding)."""

from typing import Any

from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import EngineConfig, PodAllocation
from pyhami.kube.manifests import read_quota
from pyhami.kube.views import read_node, read_pod
from pyhami.model import ContainerDevice, NodeName, NodeView, PodView
from pyhami.protocol import KEY_DEVICE_CORDON, KEY_NODE_LOCK, KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE
from pyhami.scheduler.ownership import registered_inventory
from pyhami.scheduler.state import ClusterState

from .builders import card, gpu_pod
from .cluster import node_object

ENGINE_CONFIG = EngineConfig(vendor=NvidiaVendor())


def _state(**selector: str) -> tuple[ClusterState, list[str]]:
    decoded: list[str] = []

    def counting(node: NodeView) -> Any:
        decoded.append(node.name)
        return registered_inventory(node)

    return ClusterState(ENGINE_CONFIG, counting, node_selector=selector), decoded


def test_registration_is_decoded_only_when_it_changes() -> None:
    state, decoded = _state()
    node = node_object("n1", [card("GPU-a")])
    state.on_node(read_node(node))
    node["metadata"]["annotations"][KEY_NODE_LOCK] = "2026-01-01T00:00:00Z,default,p"
    state.on_node(read_node(node))
    assert decoded == ["n1"]
    node["metadata"]["annotations"][KEY_DEVICE_CORDON] = "GPU-a"
    state.on_node(read_node(node))
    assert decoded == ["n1", "n1"]
    ledger_node = state.ledger.node("n1")
    assert ledger_node is not None and ledger_node.inventory.cordoned == frozenset({"GPU-a"})


def test_nodes_leave_when_unregistered_unlabelled_or_without_gpus() -> None:
    state, _ = _state(gpu="on")
    node = node_object("n1", [card("GPU-a")])
    state.on_node(read_node(node))
    assert state.ledger.node("n1") is not None
    node["status"]["allocatable"]["nvidia.com/gpu"] = "0"  # the device plugin is gone
    state.on_node(read_node(node))
    assert state.ledger.node("n1") is None
    node["status"]["allocatable"]["nvidia.com/gpu"] = "10"
    state.on_node(read_node(node))
    assert state.ledger.node("n1") is not None
    node["metadata"]["labels"] = {}
    state.on_node(read_node(node))
    assert state.ledger.node("n1") is None
    node["metadata"]["labels"] = {"gpu": "on"}
    del node["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    state.on_node(read_node(node))
    assert state.ledger.node("n1") is None


def test_the_dra_node_set_follows_each_nodes_label_and_deletion() -> None:
    state, _ = _state()
    node = node_object("n1", [card("GPU-a")])
    state.on_node(read_node(node))
    assert state.dra_nodes == set()
    node["metadata"]["labels"]["gpu.pyhami.io/mode"] = "dra"
    state.on_node(read_node(node))
    assert state.dra_nodes == {"n1"}
    node["metadata"]["labels"]["gpu.pyhami.io/mode"] = "device-plugin"
    state.on_node(read_node(node))
    assert state.dra_nodes == set()
    node["metadata"]["labels"]["gpu.pyhami.io/mode"] = "dra"
    state.on_node(read_node(node))
    state.on_node_deleted(read_node(node))
    assert state.dra_nodes == set()


def test_a_broken_registration_keeps_the_last_good_one() -> None:
    state, _ = _state()
    node = node_object("n1", [card("GPU-a")])
    state.on_node(read_node(node))
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "[{"
    state.on_node(read_node(node))
    assert [c.id for c in state.ledger.device_usage("n1")] == ["GPU-a"]
    state.on_node_deleted(read_node(node))
    assert state.ledger.node("n1") is None


def _allocated(name: str, uuid: str, mem: int, **status: Any) -> dict[str, Any]:
    pod = gpu_pod(name)
    pod["metadata"]["annotations"] = {
        KEY_VGPU_NODE: "n1",
        KEY_NVIDIA_ALLOCATED: f"{uuid},NVIDIA,{mem},10:;",
    }
    pod["status"].update(status)
    return pod


def test_pods_are_charged_from_annotations_and_released_when_done() -> None:
    state, _ = _state()
    state.on_node(read_node(node_object("n1", [card("GPU-a")])))
    pod = _allocated("p", "GPU-a", 3000)
    state.on_pod(read_pod(pod))
    assert [c.usedmem for c in state.ledger.device_usage("n1")] == [3000]
    state.on_pod(read_pod(_allocated("p", "GPU-a", 3000, phase="Succeeded")))
    assert [c.usedmem for c in state.ledger.device_usage("n1")] == [0]
    state.on_pod(read_pod(pod))
    state.on_pod_deleted(read_pod(pod))
    assert state.ledger.pod_keys() == []


def test_a_reservation_survives_informer_views_from_before_its_patch() -> None:
    state, reserved = _reserved_again()
    stale = gpu_pod("p")  # the pod as it looked before the filter's patch
    state.on_pod(_versioned(stale, "7"))
    assert state.ledger.pod("uid-p") is not None
    state.on_pod(_versioned(_allocated("p", "GPU-a", 3000), "8"))  # landed, not answered yet
    state.recorded(reserved, "10")
    state.on_pod(_versioned(gpu_pod("p"), "9"))  # still older than the answer
    assert state.ledger.pod("uid-p") is not None
    state.on_pod(_versioned(_allocated("p", "GPU-a", 3000), "10"))  # the patch, seen
    state.on_pod(_versioned(stale, "11"))  # a later view without the annotation removes it
    assert state.ledger.pod("uid-p") is None


def test_a_reservation_whose_answer_the_informer_showed_first_is_confirmed_by_it() -> None:
    state, reserved = _reserved_again()
    state.on_pod(_versioned(gpu_pod("p"), "12"))  # newer than the answer: someone stripped it
    state.recorded(reserved, "9")
    assert state.ledger.pod("uid-p") is None


def _reserved_again() -> tuple[ClusterState, PodAllocation]:
    """A state where pod p's allocation is reserved by a filter whose patch is in flight."""
    state, _ = _state()
    state.on_node(read_node(node_object("n1", [card("GPU-a")])))
    state.on_pod(read_pod(_allocated("p", "GPU-a", 3000)))
    reserved = state.ledger.pod("uid-p")
    assert reserved is not None
    state.release("uid-p")
    state.reserve(reserved)
    return state, reserved


def _versioned(pod: dict[str, Any], version: str) -> PodView:
    return read_pod({**pod, "metadata": {**pod["metadata"], "resourceVersion": version}})


def test_quota_precheck_counts_usage_and_the_new_pod() -> None:
    state, _ = _state()
    state.on_node(read_node(node_object("n1", [card("GPU-a")])))
    quota = {
        "metadata": {"name": "q", "namespace": "default", "uid": "q1"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}},
    }
    state.on_quota(read_quota(quota))
    assert not state.exceeds_quota(read_pod(gpu_pod("fits", mem=4000)))
    state.on_pod(read_pod(_allocated("p", "GPU-a", 3000)))
    assert state.exceeds_quota(read_pod(gpu_pod("over", mem=1500)))
    assert not state.exceeds_quota(read_pod(gpu_pod("other-ns", mem=1500, namespace="team-b")))
    state.on_quota_deleted(read_quota(quota))
    assert not state.exceeds_quota(read_pod(gpu_pod("over", mem=1500)))


def test_quota_precheck_adds_a_native_sidecar_to_the_app_container() -> None:
    """The webhook's pre-check: a sidecar runs beside the app, a classic init container before."""
    state, _ = _state()
    state.on_quota(
        read_quota(
            {
                "metadata": {"name": "q", "namespace": "default", "uid": "q1"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}},
            }
        )
    )
    with_init = gpu_pod("p", mem=2500)
    init = {
        "name": "helper",
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2500"}},
    }
    with_init["spec"]["initContainers"] = [init]
    assert not state.exceeds_quota(read_pod(with_init))
    with_init["spec"]["initContainers"] = [{**init, "restartPolicy": "Always"}]
    assert state.exceeds_quota(read_pod(with_init)), "2500 + 2500 > 4000"


def test_a_nominated_preemptor_holds_its_claim_until_it_is_filtered_again() -> None:
    """/preempt offers a claim per node; it counts while status.nominatedNodeName names it."""
    state, _ = _state()
    state.on_node(read_node(node_object("n1", [card("GPU-a")])))
    claim = PodAllocation(
        "uid-hi", "default", "hi", NodeName("n1"), ((ContainerDevice("GPU-a", "NVIDIA", 5000, 0),),)
    )
    state.offer_nomination("uid-hi", {NodeName("n1"): claim})
    pending = gpu_pod("hi", mem=5000)
    state.on_pod(read_pod(pending))
    assert [c.usedmem for c in state.ledger.device_usage("n1")] == [0], "not nominated yet"
    pending["status"]["nominatedNodeName"] = "n1"
    state.on_pod(read_pod(pending))
    assert [c.usedmem for c in state.ledger.device_usage("n1")] == [5000]
    state.release("uid-hi")  # its own /filter: it must not compete with itself
    assert [c.usedmem for c in state.ledger.device_usage("n1")] == [0]
    state.on_pod(read_pod(pending))  # that filter did not place it: held again
    assert [c.usedmem for c in state.ledger.device_usage("n1")] == [5000]
    pending["status"]["nominatedNodeName"] = "n2"  # nominated elsewhere: no claim here
    state.on_pod(read_pod(pending))
    assert state.ledger.pod("uid-hi") is None
    pending["status"]["nominatedNodeName"] = "n1"
    state.on_pod_deleted(read_pod(pending))
    state.on_pod(read_pod(pending))  # a pod of that UID seen again later holds nothing
    assert state.ledger.pod("uid-hi") is None


def test_an_unreadable_registration_keeps_the_last_one_and_is_remembered_until_fixed() -> None:
    state, _ = _state()
    node = node_object("n1", [card("GPU-a")])
    state.on_node(read_node(node))
    good = node["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "garbage"
    state.on_node(read_node(node))
    assert state.ledger.node("n1") is not None, "the last good registration stays"
    assert state.registration_errors == {
        "n1": "node n1: node device register (colon form): node annotation missing device "
        'separator (value "garbage")'
    }
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = good
    state.on_node(read_node(node))
    assert state.registration_errors == {}
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "garbage"
    state.on_node(read_node(node))
    state.on_node_deleted(read_node(node))
    assert state.registration_errors == {} and state.ledger.node("n1") is None


def test_a_registration_listing_no_card_removes_the_node_without_an_error() -> None:
    state, _ = _state()
    node = node_object("n1", [card("GPU-a")])
    state.on_node(read_node(node))
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "[]"
    state.on_node(read_node(node))
    assert state.ledger.node("n1") is None, "no card left: nothing to schedule onto"
    assert state.registration_errors == {}, "a GPU-less node is not an unreadable one"
