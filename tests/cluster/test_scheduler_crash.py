"""The scheduler killed (SIGKILL) in the middle of a burst of GPU pods and started again, on
Kubernetes' own control plane: its state is rebuilt from the pods' annotations, no pod is lost,
no card is charged beyond what it has, and a node lock the dead process left behind does not
hold the node for the lock's whole timeout.

The scheduler runs as `pyhami scheduler` (a process of its own, the chart's ServiceAccount),
kube-scheduler calls it on a fixed port, and the restarted process takes that port again."""

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.engine import allocation_of
from pyhami.kube import NODES, JsonObject, KubeClient
from pyhami.kube.views import read_node, read_pod
from pyhami.protocol import KEY_NODE_LOCK, KEY_VGPU_NODE, parse_node_lock
from pyhami.scheduler.ownership import registered_inventory
from pyhami.sim.demo.cluster import SCHEDULER_USER, DemoCluster
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.testing.fake_nvml import t4
from pyhami.testing.real_cluster import free_port

from .replicas import SchedulerReplica, samples, scheduler_replica
from .test_pod_path import NS, gpu_container, pod

CARDS_PER_NODE = 4
T4_MIB = 15360
POD_MIB = 3800  # four fill a T4 (15200 of 15360 MiB); a fifth would over-commit it
PER_NODE = CARDS_PER_NODE * 4
FITTING = 2 * PER_NODE
BURST = FITTING + 4  # four find no room anywhere
SETTLE_TIMEOUT_S = 90
STALE_LOCK_BOUND_S = 30


@pytest.fixture
async def cluster(
    kubernetes: BuiltBinaries,
) -> AsyncIterator[tuple[DemoCluster, SchedulerReplica]]:
    """Two nodes of four T4s; kube-scheduler's extender is one `pyhami scheduler` process."""
    port = free_port()
    settings = DemoSettings(
        cards=[[t4(uuid=card_uuid(n, i)) for i in range(CARDS_PER_NODE)] for n in (1, 2)]
    )
    async with DemoCluster(
        settings,
        kubernetes=kubernetes,
        extender_url=f"https://127.0.0.1:{port}",
    ) as demo:
        replica = await scheduler_replica(demo, "scheduler", port=port)
        try:
            await replica.start()
            yield demo, replica
        finally:
            await replica.stop()
        assert demo.real is not None
        refused = demo.real.refused_requests({SCHEDULER_USER})
        assert refused == [], "the scheduler was refused:\n" + "\n".join(refused)


async def _create(client: KubeClient, names: list[str]) -> None:
    await asyncio.gather(
        *(client.create_pod(NS, pod(name, gpu_container("main", POD_MIB))) for name in names)
    )


async def _pods(client: KubeClient) -> dict[str, JsonObject]:
    listed = await client.list_pods(NS)
    return {p["metadata"]["name"]: p for p in listed.items}


def _bound(pods: dict[str, JsonObject]) -> dict[str, JsonObject]:
    return {name: p for name, p in pods.items() if p["spec"].get("nodeName")}


def _lock_owner(node: JsonObject) -> str | None:
    value = (node["metadata"].get("annotations") or {}).get(KEY_NODE_LOCK)
    return None if value is None else parse_node_lock(value).name


async def _kill_while_a_bind_holds_a_node_lock(
    client: KubeClient, scheduler: SchedulerReplica
) -> tuple[str, str]:
    """Watch the nodes; when one is locked, freeze the scheduler (SIGSTOP) and look at the
    lock's owner: still unbound means the bind is between its lock and its binding, and the
    process is killed there (SIGKILL). Otherwise it goes on. Returns the node and the owner."""
    listed = await client.list(NODES)
    events = client.watch(NODES, resource_version=listed.resource_version)
    async with asyncio.timeout(60), contextlib.aclosing(events):
        async for event in events:
            owner = _lock_owner(event.object) if event.type == "MODIFIED" else None
            if owner is None:
                continue
            scheduler.freeze()
            if not (await client.get_pod(NS, owner))["spec"].get("nodeName"):
                await scheduler.kill()
                return str(event.object["metadata"]["name"]), owner
            scheduler.thaw()
    raise AssertionError("the node watch ended before a bind was caught in flight")


def _no_room(pod_object: JsonObject) -> bool:
    conditions = (pod_object.get("status") or {}).get("conditions") or ()
    return any(
        c["type"] == "PodScheduled"
        and c["status"] == "False"
        and "CardInsufficientMemory" in c.get("message", "")
        for c in conditions
    )


async def test_a_scheduler_killed_mid_burst_and_restarted_loses_nothing_and_over_commits_nothing(
    cluster: tuple[DemoCluster, SchedulerReplica],
) -> None:
    demo, scheduler = cluster
    client = demo.client
    names = [f"burst-{n:02d}" for n in range(BURST)]
    first_wave, second_wave = names[:PER_NODE], names[PER_NODE:]
    await _create(client, first_wave)

    # SIGKILL while a bind is in flight: a node locked for a pod that is not bound yet
    locked_node, lock_owner = await _kill_while_a_bind_holds_a_node_lock(client, scheduler)
    bound_at_kill = set(_bound(await _pods(client)))
    # The lock's owner must go to the other node this time (placed on its own node again, it
    # would simply take its lock back): its node is cordoned meanwhile (an operator draining
    # it, say), and the first wave fits on one node whole.
    await client.patch_node(locked_node, {"spec": {"unschedulable": True}})
    await scheduler.start()
    async with asyncio.timeout(60):
        while not (await client.get_pod(NS, lock_owner))["spec"].get("nodeName"):
            await asyncio.sleep(0.2)
    await _create(client, second_wave)
    await client.patch_node(locked_node, {"spec": {"unschedulable": None}})
    # the lock the dead process left does not keep other pods off its node for the lock's
    # timeout (5 min)
    try:
        async with asyncio.timeout(STALE_LOCK_BOUND_S):
            while _lock_owner(await client.get(NODES, locked_node)) == lock_owner:
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(
            f"{locked_node} is still locked for {lock_owner} after {STALE_LOCK_BOUND_S}s"
        ) from None

    # every pod bound, or pending because no card has room (kube-scheduler's condition)
    bound: dict[str, JsonObject] = {}
    pending: list[JsonObject] = []
    try:
        async with asyncio.timeout(SETTLE_TIMEOUT_S):
            while True:
                pods = await _pods(client)
                bound = _bound(pods)
                pending = [p for name, p in pods.items() if name not in bound]
                if len(bound) == FITTING and all(_no_room(p) for p in pending):
                    break
                await asyncio.sleep(0.5)
    except TimeoutError:
        why = {p["metadata"]["name"]: p["status"].get("conditions") for p in pending}
        raise AssertionError(
            f"{len(bound)} of {FITTING} pods bound after {SETTLE_TIMEOUT_S}s; pending: {why}"
        ) from None

    # nothing lost: every pod is there, bound or pending because no card has room
    assert sorted(pods) == names
    assert bound_at_kill <= set(bound)
    assert len(pending) == BURST - FITTING

    # every bound pod carries its allocation, on the node it is bound to
    charged: Counter[tuple[str, str, str]] = Counter()  # (pod, node, card) -> MiB
    per_card: Counter[tuple[str, str]] = Counter()
    slots: Counter[tuple[str, str]] = Counter()
    for name, bound_pod in bound.items():
        annotations = bound_pod["metadata"]["annotations"]
        node = bound_pod["spec"]["nodeName"]
        assert annotations[KEY_VGPU_NODE] == node
        allocation = allocation_of(read_pod(bound_pod))
        assert allocation is not None, f"{name} is bound without an allocation record"
        for container in allocation.containers:
            for device in container:
                charged[(name, node, device.uuid)] += device.usedmem
                per_card[(node, device.uuid)] += device.usedmem
                slots[(node, device.uuid)] += 1
    for pending_pod in pending:
        assert allocation_of(read_pod(pending_pod)) is None, pending_pod["metadata"]["name"]

    # no card holds more than it has (capacity as the node registered it)
    for node in (await client.list(NODES)).items:
        inventory = registered_inventory(read_node(node))
        assert inventory is not None
        for card in inventory.devices:
            key = (node["metadata"]["name"], card.id)
            assert card.devmem == T4_MIB
            assert per_card[key] <= card.devmem, f"{key} over-committed: {per_card[key]} MiB"
            assert slots[key] <= card.count

    # the restarted scheduler's ledger, as its /metrics shows it, is what the annotations say
    text = await scheduler.metrics()
    ledger = {
        (labels["pod"], labels["node"], labels["device_uuid"]): round(value) // 2**20
        for labels, value in samples(text, "hami_vgpu_memory_allocated_bytes")
        if labels["namespace"] == NS
    }
    assert ledger == dict(charged)
    cards = {
        (labels["node"], labels["device_uuid"]): round(value) // 2**20
        for labels, value in samples(text, "hami_gpu_memory_allocated_bytes")
    }
    assert cards == {key: per_card.get(key, 0) for key in cards}
    assert len(cards) == 2 * CARDS_PER_NODE
