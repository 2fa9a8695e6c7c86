"""The filter/bind flow over ClusterState with an in-memory API (unit level)."""

import asyncio
import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import Decision, EngineConfig, NodeVerdict
from pyhami.kube import NodeLocker
from pyhami.kube.extender_wire import ExtenderArgs, ExtenderBindingArgs, ExtenderFilterResult
from pyhami.kube.scheduler_pods import SchedulerPods
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeView
from pyhami.protocol import KEY_NODE_LOCK
from pyhami.scheduler import explanations as explanations_module
from pyhami.scheduler import service as service_module
from pyhami.scheduler.events import EventRecorder
from pyhami.scheduler.explanations import PodRef
from pyhami.scheduler.metrics import MetricsSnapshot, SchedulerMetrics
from pyhami.scheduler.outcome import filter_outcome
from pyhami.scheduler.service import FilterBind
from pyhami.scheduler.state import ClusterState
from pyhami.testing import ManualClock

from .builders import card, gpu_pod, inventory, node
from .memory_kube import MemoryKube

ENGINE_CONFIG = EngineConfig(vendor=NvidiaVendor())

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
        self.is_leader = True
        self.leader = "other-replica"


def _service(
    kube: MemoryKube,
    leader: Leader | None = None,
    *,
    explain_all: bool = True,
    synced: bool = True,
    lock_retry: timedelta = timedelta(seconds=28),
) -> FilterBind:
    state = ClusterState(ENGINE_CONFIG, lambda n: INVENTORIES.get(n.name))
    for name in INVENTORIES:
        state.on_node(read_node(node(name)))
    ready = asyncio.Event()
    if synced:
        ready.set()
    clock = ManualClock(NOW)
    return FilterBind(
        state,
        SchedulerPods(kube),
        NodeLocker(kube, clock=clock),
        EventRecorder(kube.create_event, "hami-scheduler", clock),
        SchedulerMetrics(MetricsSnapshot),
        clock=clock,
        owned_annotations=OWNED,
        leadership=leader,
        synced=ready,
        explain_all=explain_all,
        sync_wait=timedelta(milliseconds=50),
        lock_retry_timeout=lock_retry,
    )


def _args(pod: dict[str, Any], *names: str) -> ExtenderArgs:
    return ExtenderArgs.from_json(json.dumps({"Pod": pod, "NodeNames": names}).encode())


async def _filter(service: FilterBind, pod: dict[str, Any], *names: str) -> ExtenderFilterResult:
    """kube-scheduler's filter of a pod the scheduler's informer has seen."""
    service.state.on_pod(read_pod(pod))
    return await service.filter(_args(pod, *names))


async def test_filter_picks_a_node_and_reserves_and_bind_records_the_decision() -> None:
    kube = MemoryKube()
    service = _service(kube)
    pod = gpu_pod("p", mem=3000, cores=30)
    kube.pod_objects[("default", "p")] = pod
    result = await _filter(service, pod, "n1", "n1-busy", "ghost")
    assert result.node_names == ["n1"]
    assert result.failed_nodes is not None and result.failed_nodes["ghost"] == "node unregistered"
    assert "CardInsufficientMemory" in result.failed_nodes["n1-busy"]
    assert kube.pod_patches == []  # the decision is written by the bind
    reserved = service.state.ledger.pod("uid-p")
    assert reserved is not None and reserved.node == "n1"
    assert (await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))).error == ""
    ((namespace, name, body),) = kube.pod_patches  # one patch: the decision and the phase
    notes = body["metadata"]["annotations"]
    assert (namespace, name) == ("default", "p")
    assert notes["hami.io/vgpu-node"] == "n1"
    assert notes["hami.io/vgpu-devices-allocated"] == notes["hami.io/vgpu-devices-to-allocate"]
    assert ",NVIDIA,3000,30:" in notes["hami.io/vgpu-devices-allocated"]
    assert notes["hami.io/bind-phase"] == "allocating"
    assert notes["hami.io/bind-time"] == str(int(NOW.timestamp()))
    assert body["metadata"]["labels"] == {"hami.io/vgpu-node": "n1"}
    await service.events.drain()
    reasons = [(e["type"], e["reason"]) for e in kube.events]
    assert ("Normal", "FilteringSucceed") in reasons
    assert ("Warning", "FilteringFailed") in reasons  # per-reason events even though n1 fits
    failures = sorted(e["message"] for e in kube.events if e["reason"] == "FilteringFailed")
    assert failures == [
        "1 nodes CardInsufficientMemory(n1-busy)",
        "1 nodes node unregistered(ghost)",
    ]
    explained = service.explain(PodRef("default", "p"))
    assert explained is not None and explained.decision.node == "n1"
    assert explained.annotations == {
        k: v for k, v in notes.items() if k not in ("hami.io/bind-phase", "hami.io/bind-time")
    }
    reasons = {n: verdict.reason for n, verdict in explained.decision.verdicts.items()}
    assert reasons["ghost"] == "node unregistered"
    assert "CardInsufficientMemory" in reasons["n1-busy"]


async def test_the_claim_kept_for_bind_holds_no_node_verdicts() -> None:
    # A claim lives until its bind: with the verdicts it would hold one per candidate node
    # per pending pod, outside the bounds /explain keeps.
    service = _service(MemoryKube())
    pod = gpu_pod("p", mem=3000, cores=30)
    await _filter(service, pod, "n1", "n1-busy", "ghost")
    explained = service.explain(PodRef("default", "p"))
    assert explained is not None and len(explained.decision.verdicts) == 3
    outcome = filter_outcome(read_pod(pod), explained.decision, ["n1", "n1-busy"], {}, OWNED)
    assert outcome.claim is not None
    assert outcome.claim.node == "n1" and outcome.claim.allocation is not None
    held = [getattr(outcome.claim, f.name) for f in dataclasses.fields(outcome.claim)]
    assert not any(isinstance(value, Decision | NodeVerdict) for value in held)


async def test_explain_gives_card_detail_for_one_pod_without_explain_all() -> None:
    service = _service(MemoryKube(), explain_all=False)
    fits, too_big = gpu_pod("fits", mem=3000), gpu_pod("too-big", mem=9000)
    for pod in (fits, too_big):
        service.state.on_pod(read_pod(pod))
        await service.filter(_args(pod, "n1", "n1-busy"))
    await service.events.drain()
    for name, reason in (("fits", None), ("too-big", "CardInsufficientMemory")):
        explained = service.explain(PodRef("default", name))
        assert explained is not None
        checks = {n: verdict.checks for n, verdict in explained.decision.verdicts.items()}
        assert checks["n1"], "the cards of n1 were checked"
        assert [c.reason for c in checks["n1-busy"]] == ["CardInsufficientMemory"]
        if reason is None:
            assert explained.decision.node == "n1"
            assert any(c.reason is None for c in checks["n1"])
    reserved = service.state.ledger.pod("uid-fits")
    assert reserved is not None and reserved.node == "n1", "the reservation is kept"


async def test_explanations_are_bounded_by_verdicts_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explanations_module, "EXPLAINED_VERDICTS_KEPT", 7)
    kube = MemoryKube()
    service = _service(kube)
    for name in ("a", "b", "c", "a"):  # three verdicts each; re-filtering "a" replaces it
        pod = gpu_pod(name, mem=1000, cores=1)
        await _filter(service, pod, "n1", "n1-busy", "ghost")
    await service.events.drain()
    assert service.explain(PodRef("default", "b")) is None  # oldest of the six beyond 7 verdicts
    for name in ("c", "a"):
        explained = service.explain(PodRef("default", name))
        assert explained is not None and len(explained.decision.verdicts) == 3


async def test_refiltering_drops_the_old_reservation_and_stale_keys() -> None:
    kube = MemoryKube()
    service = _service(kube)
    pod = gpu_pod("p", mem=7000, annotations={"hami.io/vgpu-mig-allocations": "[]"})
    kube.pod_objects[("default", "p")] = pod
    for _ in range(3):  # 7000 of 8000 MiB: a pod that counted against itself would not fit
        result = await _filter(service, pod, "n1")
        assert result.node_names == ["n1"]
    assert (await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))).error == ""
    notes = kube.pod_patches[-1][2]["metadata"]["annotations"]
    assert notes["hami.io/vgpu-mig-allocations"] is None  # left over from an earlier attempt


async def test_pods_without_gpus_pass_through_and_bad_calls_get_errors() -> None:
    service = _service(MemoryKube())
    plain = {
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
        "spec": {"containers": [{"name": "c"}]},
    }
    assert (await _filter(service, plain, "n1", "n9")).node_names == ("n1", "n9")
    both_missing = await service.filter(
        ExtenderArgs.from_json(json.dumps({"Pod": gpu_pod("p")}).encode())
    )
    assert "neither NodeNames nor Nodes" in both_missing.error


async def test_a_pod_whose_request_cannot_be_read_is_answered_with_the_reason() -> None:
    kube = MemoryKube()
    service = _service(kube)
    bad = gpu_pod("p")
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "lots"
    kube.pod_objects[("default", "p")] = bad
    by_names = await _filter(service, bad, "n1")
    assert by_names.error.startswith("pod default/p: ") and "gpumem" in by_names.error
    body = json.dumps({"Pod": bad, "Nodes": {"items": [node("n1")]}}).encode()
    by_nodes = await service.filter(ExtenderArgs.from_json(body))
    assert by_nodes.error == by_names.error
    assert kube.pod_patches == [] and service.state.ledger.pod("uid-p") is None


async def test_unschedulable_answers_every_node_with_its_reason() -> None:
    kube = MemoryKube()
    service = _service(kube)
    result = await _filter(service, gpu_pod("big", mem=9000), "n1", "n1-busy")
    assert result.node_names is None
    assert result.failed_nodes is not None and set(result.failed_nodes) == {"n1", "n1-busy"}
    assert kube.pod_patches == []
    await service.events.drain()
    messages = [e["message"] for e in kube.events]
    assert "no available node, 2 nodes do not meet" in messages


async def test_a_failed_pod_patch_fails_the_bind_and_rolls_the_reservation_back() -> None:
    kube = MemoryKube()
    kube.fail_pod_patch = True
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    bound = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "pods API down" in bound.error
    assert kube.bindings == [] and kube.lock is None  # the lock taken meanwhile is given back
    assert service.state.ledger.pod("uid-p") is None
    again = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "has no filter decision" in again.error


async def test_a_bind_waiting_for_its_nodes_turn_writes_nothing_and_times_out_cleanly() -> None:
    kube = MemoryKube()
    service = _service(kube, lock_retry=timedelta(milliseconds=100))
    await _filtered(kube, service, gpu_pod("p"))
    reads = _count_node_reads(kube)
    async with service.bind_turns.hold("n1"):  # an earlier bind to n1 holds the node's turn
        bind = asyncio.create_task(service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1")))
        for _ in range(20):
            await asyncio.sleep(0)
        assert kube.pod_patches == [] and kube.lock is None  # nothing before its turn
        result = await bind
    assert "timed out after 0:00:00.100000 waiting for node n1" in result.error
    assert kube.pod_patches == [] and reads == [] and kube.bindings == []  # nothing to undo
    assert service.state.ledger.pod("uid-p") is None  # the reservation is released
    await service.events.drain()
    assert any(e["reason"] == "BindingFailed" for e in kube.events)


async def test_followers_do_not_decide_and_say_so() -> None:
    leader = Leader()
    leader.is_leader = False
    service = _service(MemoryKube(), leader)
    result = await _filter(service, gpu_pod("p"), "n1")
    assert "not the leader (leader: other-replica)" in result.error
    bound = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "followers do not decide" in bound.error
    assert service.readiness()[0] is False


async def test_a_leader_deposed_while_its_filter_reads_the_pod_writes_nothing() -> None:
    kube, leader = MemoryKube(), Leader()
    service = _service(kube, leader)
    pod = gpu_pod("p")
    kube.pod_objects[("default", "p")] = pod  # not in the informer yet: the filter GETs it
    read = kube.get_pod

    async def read_then_lose_the_lease(namespace: str, name: str) -> dict[str, Any]:
        answer = await read(namespace, name)
        leader.is_leader = False  # another replica took the Lease meanwhile
        return answer

    kube.get_pod = read_then_lose_the_lease  # type: ignore[method-assign]
    result = await service.filter(_args(pod, "n1"))
    assert "not the leader (leader: other-replica)" in result.error
    assert kube.pod_patches == []
    assert service.state.ledger.pod("uid-p") is None


@pytest.mark.parametrize("lost_after", ["node-lock", "pod-patch"])
async def test_a_leader_deposed_while_its_bind_awaits_the_api_writes_nothing_more(
    lost_after: str,
) -> None:
    kube, leader = MemoryKube(), Leader()
    service = _service(kube, leader)
    await _filtered(kube, service, gpu_pod("p"))
    writes_before = len(kube.pod_patches)
    write_node_lock, patch_pod = kube.write_node_lock, kube.patch_pod

    async def lock_then_lose(name: str, value: str | None, resource_version: str) -> None:
        await write_node_lock(name, value, resource_version)
        leader.is_leader = lost_after != "node-lock"

    async def patch_then_lose(namespace: str, name: str, body: dict[str, Any]) -> Any:
        answer = await patch_pod(namespace, name, body)
        leader.is_leader = False
        return answer

    kube.write_node_lock = lock_then_lose  # type: ignore[method-assign]
    kube.patch_pod = patch_then_lose  # type: ignore[method-assign]
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "not the leader (leader: other-replica)" in result.error
    assert kube.bindings == []
    # The pod's one patch (decision and bind phase) goes out beside the node lock, so it was
    # sent while the replica still led; the binding, after both, is never sent.
    written = [
        set(body["metadata"]["annotations"]) for _, _, body in kube.pod_patches[writes_before:]
    ]
    assert len(written) == 1 and {"hami.io/bind-phase", "hami.io/bind-time"} <= written[0]


async def _filtered(kube: MemoryKube, service: FilterBind, pod: dict[str, Any]) -> None:
    kube.pod_objects[("default", pod["metadata"]["name"])] = pod
    service.state.on_pod(read_pod(pod))
    assert (await _filter(service, pod, "n1")).node_names == ["n1"]


async def test_bind_locks_the_node_sets_bind_phase_and_binds() -> None:
    kube = MemoryKube()
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert result.error == ""
    assert kube.lock == "2026-08-21T12:00:00Z,default,p"
    phase = kube.pod_patches[-1][2]["metadata"]["annotations"]
    assert phase["hami.io/bind-phase"] == "allocating"
    assert phase["hami.io/bind-time"] == str(int(NOW.timestamp()))
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
    service = _service(kube, lock_retry=timedelta(milliseconds=50))
    await _filtered(kube, service, gpu_pod("p"))
    # the informer has not seen the lock yet
    kube.node = _locked_by_holder(kube.node, resource_version="2")
    kube.pods.add(("default", "holder"))
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "node lock contention" in result.error
    assert kube.lock == "2026-08-21T11:59:00Z,default,holder"


async def test_bind_of_a_pod_or_node_not_filtered_here_is_refused_and_releases_nothing() -> None:
    kube = MemoryKube()
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    patches = len(kube.pod_patches)
    ghost = await service.bind(ExtenderBindingArgs("ghost", "default", "uid-ghost", "n1"))
    assert "default/ghost (uid uid-ghost) has no filter decision" in ghost.error
    elsewhere = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "nowhere"))
    assert "was filtered for node n1, not nowhere" in elsewhere.error
    other_uid = await service.bind(ExtenderBindingArgs("p", "default", "uid-other", "n1"))
    assert "has no filter decision" in other_uid.error
    no_uid = await service.bind(ExtenderBindingArgs("p", "default", "", "n1"))
    assert "carries no PodUID" in no_uid.error
    reserved = service.state.ledger.pod("uid-p")
    assert reserved is not None and reserved.node == "n1"  # the real reservation stays
    assert len(kube.pod_patches) == patches and kube.bindings == [] and kube.lock is None
    assert (await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))).error == ""
    again = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "has no filter decision" in again.error  # one bind per filter


async def test_a_pod_asking_for_no_device_binds_where_kube_scheduler_chose() -> None:
    kube = MemoryKube()
    service = _service(kube)
    plain = {
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
        "spec": {"containers": [{"name": "c"}]},
    }
    assert (await _filter(service, plain, "n1", "n1-busy")).node_names == ("n1", "n1-busy")
    result = await service.bind(ExtenderBindingArgs("web", "default", "uid-web", "n1-busy"))
    assert result.error == "" and kube.lock is None
    assert kube.bindings == [("default", "web", {"node": "n1-busy", "uid": "uid-web"})]


async def test_a_bind_that_finds_the_pod_bound_keeps_its_charge_and_annotations() -> None:
    kube = MemoryKube()
    service = _service(kube)
    pod = gpu_pod("p")
    await _filtered(kube, service, pod)
    # The binding answers 409: the pod was bound meanwhile (kube-scheduler's cache lagged).
    kube.pod_objects[("default", "p")] = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    kube.fail_binding = True
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "binding refused" in result.error
    charged = service.state.ledger.pod("uid-p")
    assert charged is not None and charged.node == "n1"
    later = [body["metadata"]["annotations"] for _, _, body in kube.pod_patches[1:]]
    assert all("hami.io/bind-phase" in notes for notes in later)  # nothing stripped
    assert kube.lock is None  # our own lock is still given back
    refiltered = await service.filter(_args(pod, "n1"))  # the informer lags: cache unbound
    assert "already bound to n1" in refiltered.error


async def test_a_pod_is_not_filtered_or_bound_again_while_its_bind_is_in_flight() -> None:
    kube = MemoryKube()
    service = _service(kube)
    pod = gpu_pod("p")
    await _filtered(kube, service, pod)
    release = asyncio.Event()
    binding = kube.bind_pod

    async def slow_bind(namespace: str, name: str, node: str, *, uid: str | None = None) -> None:
        await release.wait()
        await binding(namespace, name, node, uid=uid)

    kube.bind_pod = slow_bind  # type: ignore[method-assign]
    bind = asyncio.create_task(service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1")))
    async with asyncio.timeout(5):
        while "hami.io/bind-phase" not in str(kube.pod_patches):
            await asyncio.sleep(0)
    refused = await service.filter(_args(pod, "n1"))
    assert "is being bound to n1" in refused.error
    twice = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "has no filter decision" in twice.error  # the decision is taken by the first
    release.set()
    assert (await bind).error == ""
    assert len(kube.bindings) == 1
    assert "already bound to n1" in (await service.filter(_args(pod, "n1"))).error


async def test_filter_reads_the_pod_from_the_cluster_not_from_the_body() -> None:
    kube = MemoryKube()
    service = _service(kube)
    running = gpu_pod("running", mem=1000)
    running["spec"]["nodeName"] = "n1"
    service.state.on_pod(read_pod(running))
    forged = gpu_pod("running", mem=1)
    assert "already bound to n1" in (await service.filter(_args(forged, "n1"))).error
    stranger = gpu_pod("stranger")
    assert "default/stranger does not exist" in (await service.filter(_args(stranger, "n1"))).error
    kube.pod_objects[("default", "fresh")] = gpu_pod("fresh", mem=2000)
    body = gpu_pod("fresh", mem=1)  # only its identity counts
    assert (await service.filter(_args(body, "n1"))).node_names == ["n1"]
    fresh = service.state.ledger.pod("uid-fresh")
    assert fresh is not None and fresh.containers[0][0].usedmem == 2000
    reborn = gpu_pod("fresh", uid="uid-old")
    mismatch = await service.filter(_args(reborn, "n1"))
    assert "has uid uid-fresh, not uid-old" in mismatch.error
    anonymous = gpu_pod("fresh")
    del anonymous["metadata"]["uid"]
    assert "carries no metadata.uid" in (await service.filter(_args(anonymous, "n1"))).error
    assert kube.pod_patches == []  # refusals write nothing; the decision waits for its bind


@pytest.mark.parametrize("names", [("n1",), ("n1", "n1-busy")])
async def test_simulation_path_writes_nothing(names: tuple[str, ...]) -> None:
    kube = MemoryKube()
    service = _service(kube)
    nodes = {"items": [node(n) for n in names] + [node("plain")]}
    body = json.dumps({"Pod": gpu_pod("p", mem=3000), "Nodes": nodes}).encode()
    result = await service.filter(ExtenderArgs.from_json(body))
    assert json.loads(result.encode())["Nodes"]["items"][0]["metadata"]["name"] == "n1"
    assert result.failed_nodes is not None and result.failed_nodes["plain"] == "node unregistered"
    assert kube.pod_patches == [] and service.state.ledger.pod("uid-p") is None


async def test_filter_waits_for_sync_then_says_so() -> None:
    service = _service(MemoryKube(), synced=False)
    result = await _filter(service, gpu_pod("p"), "n1")
    assert result.error == "scheduler caches are not synced yet"
    assert service.readiness() == (False, "caches not synced")


async def test_a_bind_to_a_locked_node_waits_for_the_release_the_informer_shows() -> None:
    kube = MemoryKube()
    service = _service(kube)
    await _filtered(kube, service, gpu_pod("p"))
    kube.node = _locked_by_holder(kube.node)
    kube.pods.add(("default", "holder"))
    service.state.on_node(kube.node)
    bind = asyncio.create_task(service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1")))
    await asyncio.sleep(0.05)
    assert not bind.done() and kube.bindings == []  # waiting, not failed
    # the holder's device plugin releases the lock; the informer shows it
    kube.node = dataclasses.replace(kube.node, annotations={}, resource_version="7")
    service.state.on_node(kube.node)
    async with asyncio.timeout(5):
        result = await bind
    assert result.error == ""
    assert kube.lock == "2026-08-21T12:00:00Z,default,p"
    assert kube.bindings == [("default", "p", {"node": "n1", "uid": "uid-p"})]


def _stalled_bindings(kube: MemoryKube) -> tuple[asyncio.Event, asyncio.Event]:
    """Bindings from now on wait for the second event; the first is set when one arrives."""
    entered, answered = asyncio.Event(), asyncio.Event()
    binding = kube.bind_pod

    async def slow_bind(namespace: str, name: str, node: str, *, uid: str | None = None) -> None:
        entered.set()
        await answered.wait()
        await binding(namespace, name, node, uid=uid)

    kube.bind_pod = slow_bind  # type: ignore[method-assign]
    return entered, answered


def _locked_by_holder(node: NodeView, resource_version: str | None = None) -> NodeView:
    """The node locked by pod default/holder a minute ago (at a new resourceVersion, if given)."""
    return dataclasses.replace(
        node,
        annotations={KEY_NODE_LOCK: "2026-08-21T11:59:00Z,default,holder"},
        resource_version=resource_version or node.resource_version,
    )


def _count_node_reads(kube: MemoryKube) -> list[str]:
    """The node names read through the API from now on, in order."""
    reads: list[str] = []
    read = kube.read_node

    async def counted_read_node(name: str) -> NodeView:
        reads.append(name)
        return await read(name)

    kube.read_node = counted_read_node  # type: ignore[method-assign]
    return reads


async def test_bind_takes_the_lock_from_the_informers_node_and_reads_it_only_on_conflict() -> None:
    kube = MemoryKube()
    service = _service(kube)
    reads = _count_node_reads(kube)
    service.state.on_node(kube.node)
    for name in ("p", "q"):
        await _filtered(kube, service, gpu_pod(name, mem=1000))
    assert (await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))).error == ""
    assert reads == []  # the informer's node, written with its resourceVersion
    kube.node = dataclasses.replace(kube.node, annotations={})  # p's device plugin released it
    assert (await service.bind(ExtenderBindingArgs("q", "default", "uid-q", "n1"))).error == ""
    assert len(reads) == 1  # the cached node was stale (409): read once, then locked
    assert kube.lock == "2026-08-21T12:00:00Z,default,q"


def _as_written(pod: dict[str, Any], body: dict[str, Any], version: int) -> dict[str, Any]:
    """The pod as the informer shows it after a merge patch of its annotations and labels."""
    seen = copy.deepcopy(pod)
    meta = seen["metadata"]
    for field in ("annotations", "labels"):
        values = dict(meta.get(field) or {})
        for key, value in (body["metadata"].get(field) or {}).items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        meta[field] = values
    meta["resourceVersion"] = str(version)
    return seen


async def test_a_refiltered_pods_reservation_outlives_the_late_echoes_of_its_failed_bind() -> None:
    """Filter, bind (its patch lands, the binding fails, the cleanup strips the annotations),
    filter again to the same card; the informer shows the bind's patch and the cleanup only
    then. The first matches the new reservation by chance: neither may end it (only a view at
    least as new as the answer to the new bind's patch), or the card looks free meanwhile."""
    kube = MemoryKube()
    service = _service(kube)
    pod = gpu_pod("p")
    await _filtered(kube, service, pod)
    kube.fail_binding = True
    failed = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "binding refused" in failed.error
    views = [pod]
    for version, (_, _, body) in enumerate(kube.pod_patches, start=1):
        views.append(_as_written(views[-1], body, version))  # the decision, then the cleanup
    assert views[-1]["metadata"]["annotations"] == {}
    kube.fail_binding = False
    assert (await service.filter(_args(views[0], "n1"))).node_names == ["n1"]
    decided = service.state.ledger.pod("uid-p")
    assert decided is not None
    for late in views[1:]:
        service.state.on_pod(read_pod(late))
        assert service.state.holds(decided)
    assert (await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))).error == ""
    service.state.on_pod(
        read_pod(_as_written(views[-1], kube.pod_patches[-1][2], len(kube.pod_patches)))
    )
    assert service.state.holds(decided)


async def test_a_waiting_bind_does_not_read_the_node_again_until_the_informer_shows_news() -> None:
    """The informer's node shows no lock but is stale (the API has one): after the 409 and the
    read that finds the lock, the bind waits for the informer to show the node changed, not
    for the same stale view to look unlocked again (a busy loop of writes and reads)."""
    kube = MemoryKube()
    service = _service(kube, lock_retry=timedelta(milliseconds=300))
    service.state.on_node(kube.node)
    await _filtered(kube, service, gpu_pod("p"))
    kube.node = _locked_by_holder(kube.node, resource_version="2")
    kube.pods.add(("default", "holder"))
    reads = _count_node_reads(kube)
    result = await service.bind(ExtenderBindingArgs("p", "default", "uid-p", "n1"))
    assert "timed out" in result.error and "waiting for node n1" in result.error
    assert len(reads) <= 3  # the 409's read, then at most one a second, and the release's


async def test_filters_wait_while_too_many_binds_are_at_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Binds past their node's turn are limited by holding the next filter back (a while at
    most); binds queued for a busy node's turn do not count."""
    monkeypatch.setattr(service_module, "BINDS_AT_WORK", 1)
    kube = MemoryKube()
    service = _service(kube)
    first, queued, second = (gpu_pod(name, mem=1000) for name in ("a", "q", "b"))
    for pod in (first, queued):
        await _filtered(kube, service, pod)
    entered, answered = _stalled_bindings(kube)
    binds = [
        asyncio.create_task(service.bind(ExtenderBindingArgs(n, "default", f"uid-{n}", "n1")))
        for n in ("a", "q")
    ]  # "a" holds n1's turn, "q" waits for it
    await entered.wait()
    service.state.on_pod(read_pod(second))
    waiting = asyncio.create_task(service.filter(_args(second, "n1")))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not waiting.done() and len(kube.bindings) == 0  # one bind at work: the limit
    answered.set()
    assert (await waiting).node_names == ["n1"]
    assert (await binds[0]).error == ""
    # a's device plugin is done
    kube.node = dataclasses.replace(kube.node, annotations={}, resource_version="9")
    service.state.on_node(kube.node)
    assert (await binds[1]).error == ""


async def test_a_filter_waits_for_room_only_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "BINDS_AT_WORK", 0)  # never room
    monkeypatch.setattr(service_module, "ROOM_WAIT_S", 0.05)
    service = _service(MemoryKube())
    assert (await _filter(service, gpu_pod("p"), "n1")).node_names == ["n1"]


async def test_a_filter_answers_with_a_node_only_when_its_bind_queue_has_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service_module, "BINDS_QUEUED_PER_NODE", 1)
    kube = MemoryKube()
    service = _service(kube)
    first, second = gpu_pod("a", mem=1000), gpu_pod("b", mem=1000)
    await _filtered(kube, service, first)
    entered, answered = _stalled_bindings(kube)
    bind = asyncio.create_task(service.bind(ExtenderBindingArgs("a", "default", "uid-a", "n1")))
    await entered.wait()
    service.state.on_pod(read_pod(second))
    waiting = asyncio.create_task(service.filter(_args(second, "n1")))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not waiting.done()  # n1 has one bind queued: the limit
    answered.set()
    assert (await waiting).node_names == ["n1"]
    assert (await bind).error == ""
