"""The filter/bind flow over ClusterState with an in-memory API (unit level)."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pyhami.engine import EngineConfig
from pyhami.kube import NodeLocker
from pyhami.protocol import KEY_NODE_LOCK
from pyhami.scheduler import service as service_module
from pyhami.scheduler.events import EventRecorder
from pyhami.scheduler.extender import ExtenderArgs, ExtenderBindingArgs, PodRef
from pyhami.scheduler.metrics import MetricsSnapshot, SchedulerMetrics
from pyhami.scheduler.service import Decider, FilterBind
from pyhami.scheduler.state import ClusterState, object_name

from .builders import card, gpu_pod, inventory, node
from .memory_kube import MemoryKube

NOW = datetime(2026, 8, 21, 12, 0, 0, tzinfo=UTC)
OWNED = frozenset(
    {
        "hami.io/vgpu-node",
        "hami.io/vgpu-time",
        "hami.io/vgpu-devices-to-allocate",
        "hami.io/vgpu-devices-allocated",
        "hami.io/vgpu-mig-allocations",
        "hami.io/bind-phase",
        "hami.io/bind-time",
    }
)
INVENTORIES = {
    "n1": inventory(card("GPU-1a", 0), card("GPU-1b", 1)),
    "n1-busy": inventory(card("GPU-2a", 0, mem=1000)),
}


class Leader:
    def __init__(self) -> None:
        self.leading = True


def _service(
    kube: MemoryKube,
    leader: Leader | None = None,
    *,
    explain_all: bool = True,
    synced: bool = True,
) -> FilterBind:
    state = ClusterState(EngineConfig(), lambda n: INVENTORIES.get(object_name(n)))
    for name in INVENTORIES:
        state.on_node(node(name))
    ready = asyncio.Event()
    if synced:
        ready.set()
    decider = None if leader is None else Decider(lambda: leader.leading, lambda: "other-replica")
    return FilterBind(
        state,
        kube,
        NodeLocker(kube, now=lambda: NOW),
        EventRecorder(kube.create_event, "hami-scheduler", lambda: NOW),
        SchedulerMetrics(MetricsSnapshot),
        now=lambda: NOW,
        owned_annotations=OWNED,
        decider=decider,
        synced=ready,
        explain_all=explain_all,
        sync_wait=timedelta(milliseconds=50),
    )


def _args(pod: dict[str, Any], *names: str) -> ExtenderArgs:
    return ExtenderArgs(pod=pod, node_names=names)


async def test_filter_picks_a_node_records_the_decision_and_reserves() -> None:
    kube = MemoryKube()
    service = _service(kube)
    pod = gpu_pod("p", mem=3000, cores=30)
    result = await service.filter(_args(pod, "n1", "n1-busy", "ghost"))
    assert result.node_names == ["n1"]
    assert result.failed_nodes is not None and result.failed_nodes["ghost"] == "node unregistered"
    assert "CardInsufficientMemory" in result.failed_nodes["n1-busy"]
    namespace, name, body = kube.pod_patches[0]
    notes = body["metadata"]["annotations"]
    assert (namespace, name) == ("default", "p")
    assert notes["hami.io/vgpu-node"] == "n1"
    assert notes["hami.io/vgpu-devices-allocated"] == notes["hami.io/vgpu-devices-to-allocate"]
    assert ",NVIDIA,3000,30:" in notes["hami.io/vgpu-devices-allocated"]
    assert body["metadata"]["labels"] == {"hami.io/vgpu-node": "n1"}
    reserved = service.state.ledger.pod("uid-p")
    assert reserved is not None and reserved.node == "n1"
    await service.events.drain()
    reasons = [(e["type"], e["reason"]) for e in kube.events]
    assert ("Normal", "FilteringSucceed") in reasons
    assert ("Warning", "FilteringFailed") in reasons  # per-reason events even though n1 fits
    explained = service.explain(PodRef("default", "p"))
    assert explained is not None and explained["node"] == "n1"
    reasons = {n["node"]: n["reason"] for n in explained["nodes"]}
    assert reasons["ghost"] == "node unregistered"
    assert "CardInsufficientMemory" in reasons["n1-busy"]


async def test_explain_gives_card_detail_for_one_pod_without_explain_all() -> None:
    service = _service(MemoryKube(), explain_all=False)
    fits, too_big = gpu_pod("fits", mem=3000), gpu_pod("too-big", mem=9000)
    for pod in (fits, too_big):
        service.state.on_pod(pod)
        await service.filter(_args(pod, "n1", "n1-busy"))
    await service.events.drain()
    for name, reason in (("fits", None), ("too-big", "CardInsufficientMemory")):
        explained = service.explain(PodRef("default", name))
        assert explained is not None
        checks = {n["node"]: n["checks"] for n in explained["nodes"]}
        assert checks["n1"], "the cards of n1 were checked"
        assert [c["reason"] for c in checks["n1-busy"]] == ["CardInsufficientMemory"]
        if reason is None:
            assert explained["node"] == "n1"
            assert any(c["reason"] is None for c in checks["n1"])
    reserved = service.state.ledger.pod("uid-fits")
    assert reserved is not None and reserved.node == "n1", "the reservation is kept"


async def test_explanations_are_bounded_by_verdicts_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "EXPLAINED_VERDICTS_KEPT", 7)
    kube = MemoryKube()
    service = _service(kube)
    for name in ("a", "b", "c", "a"):  # three verdicts each; re-filtering "a" replaces it
        pod = gpu_pod(name, mem=1000, cores=1)
        await service.filter(_args(pod, "n1", "n1-busy", "ghost"))
    await service.events.drain()
    assert service.explain(PodRef("default", "b")) is None  # oldest of the six beyond 7 verdicts
    for name in ("c", "a"):
        explained = service.explain(PodRef("default", name))
        assert explained is not None and len(explained["nodes"]) == 3


async def test_refiltering_drops_the_old_reservation_and_stale_keys() -> None:
    kube = MemoryKube()
    service = _service(kube)
    pod = gpu_pod("p", mem=7000, annotations={"hami.io/vgpu-mig-allocations": "[]"})
    for _ in range(3):  # 7000 of 8000 MiB: a pod that counted against itself would not fit
        result = await service.filter(_args(pod, "n1"))
        assert result.node_names == ["n1"]
    notes = kube.pod_patches[-1][2]["metadata"]["annotations"]
    assert notes["hami.io/vgpu-mig-allocations"] is None  # left over from an earlier attempt


async def test_pods_without_gpus_pass_through_and_bad_calls_get_errors() -> None:
    service = _service(MemoryKube())
    plain = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c"}]},
    }
    assert (await service.filter(_args(plain, "n1", "n9"))).node_names == ("n1", "n9")
    both_missing = await service.filter(ExtenderArgs(pod=gpu_pod("p")))
    assert "neither NodeNames nor Nodes" in both_missing.error
    no_name = await service.filter(_args({"metadata": {}}, "n1"))
    assert "metadata.name" in no_name.error


async def test_unschedulable_answers_every_node_with_its_reason() -> None:
    kube = MemoryKube()
    service = _service(kube)
    result = await service.filter(_args(gpu_pod("big", mem=9000), "n1", "n1-busy"))
    assert result.node_names is None
    assert result.failed_nodes is not None and set(result.failed_nodes) == {"n1", "n1-busy"}
    assert kube.pod_patches == []
    await service.events.drain()
    messages = [e["message"] for e in kube.events]
    assert "no available node, 2 nodes do not meet" in messages


async def test_patch_failure_rolls_the_reservation_back() -> None:
    kube = MemoryKube()
    kube.fail_pod_patch = True
    service = _service(kube)
    result = await service.filter(_args(gpu_pod("p"), "n1"))
    assert "failed to record the decision" in result.error
    assert service.state.ledger.pod("uid-p") is None


async def test_followers_do_not_decide_and_say_so() -> None:
    leader = Leader()
    leader.leading = False
    service = _service(MemoryKube(), leader)
    result = await service.filter(_args(gpu_pod("p"), "n1"))
    assert "not the leader (leader: other-replica)" in result.error
    bound = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "followers do not decide" in bound.error
    assert service.readiness()[0] is False


async def _filtered(kube: MemoryKube, service: FilterBind, pod: dict[str, Any]) -> None:
    kube.pod_objects[("default", pod["metadata"]["name"])] = pod
    service.state.on_pod(pod)
    assert (await service.filter(_args(pod, "n1"))).node_names == ["n1"]


async def test_bind_locks_the_node_sets_bind_phase_and_binds() -> None:
    kube = MemoryKube()
    service = _service(kube)
    kube.node["metadata"]["name"] = "n1"
    await _filtered(kube, service, gpu_pod("p"))
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert result.error == ""
    assert kube.lock == "2026-08-21T12:00:00Z,default,p"
    phase = kube.pod_patches[-1][2]["metadata"]["annotations"]
    assert phase == {
        "hami.io/bind-phase": "allocating",
        "hami.io/bind-time": str(int(NOW.timestamp())),
    }
    assert kube.bindings == [("default", "p", {"node": "n1", "uid": "uid-p"})]


async def test_bind_refuses_a_node_the_pod_was_not_filtered_for() -> None:
    kube = MemoryKube()
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1-busy"))
    assert "was filtered for node n1, not n1-busy" in result.error
    assert kube.bindings == [] and kube.lock is None


async def test_bind_failure_releases_lock_and_reservation() -> None:
    kube = MemoryKube()
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    kube.fail_binding = True
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "binding refused" in result.error
    assert kube.lock is None
    assert service.state.ledger.pod("uid-p") is None
    cleanup = kube.pod_patches[-1][2]["metadata"]
    assert cleanup["annotations"]["hami.io/vgpu-node"] is None
    assert cleanup["labels"] == {"hami.io/vgpu-node": None}


async def test_bind_contention_keeps_the_other_pods_lock() -> None:
    kube = MemoryKube()
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    kube.node["metadata"]["annotations"][KEY_NODE_LOCK] = "2026-08-21T11:59:00Z,default,holder"
    kube.pod_objects[("default", "holder")] = gpu_pod("holder")
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "node lock contention" in result.error
    assert kube.lock == "2026-08-21T11:59:00Z,default,holder"


async def test_bind_of_unknown_pod_or_node_is_an_error() -> None:
    service = _service(MemoryKube())
    result = await service.bind(ExtenderBindingArgs("ghost", "default", "uid-ghost", "n1"))
    assert 'pod "default/ghost" not found' in result.error
    kube = MemoryKube()
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "nowhere"))
    assert 'node "nowhere" not found' in result.error
    assert service.state.ledger.pod("uid-p") is None


@pytest.mark.parametrize("names", [("n1",), ("n1", "n1-busy")])
async def test_simulation_path_writes_nothing(names: tuple[str, ...]) -> None:
    kube = MemoryKube()
    service = _service(kube)
    nodes = {"items": [node(n) for n in names] + [node("plain")]}
    result = await service.filter(ExtenderArgs(pod=gpu_pod("p", mem=3000), nodes=nodes))
    assert result.nodes is not None and result.nodes["items"][0]["metadata"]["name"] == "n1"
    assert result.failed_nodes is not None and result.failed_nodes["plain"] == "node unregistered"
    assert kube.pod_patches == [] and service.state.ledger.pod("uid-p") is None


async def test_filter_waits_for_sync_then_says_so() -> None:
    service = _service(MemoryKube(), synced=False)
    result = await service.filter(_args(gpu_pod("p"), "n1"))
    assert result.error == "scheduler caches are not synced yet"
    assert service.readiness() == (False, "caches not synced")
