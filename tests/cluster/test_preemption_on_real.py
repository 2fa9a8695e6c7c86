"""Preemption for GPU pods on Kubernetes' own control plane, through the extender's preemptVerb.

kube-scheduler finds candidate victims with its own filters only, and those cannot see GPU
memory (pyhami's resources are `ignoredByScheduler`): here every pod also asks for a quarter of
the node's CPU, so that kube-scheduler's filters need a victim too and ask our `/preempt`. It
would evict one pod for the CPU; our answer names the pods whose cards must be freed instead.
"""

import asyncio
from collections.abc import AsyncIterator

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import EVENTS, JsonObject, NotFound
from pyhami.kube.resources import Resource
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, KEY_NVIDIA_USE_GPUUUID
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.testing.fake_nvml import t4

from .test_pod_path import NS, event_with, gone, gpu_container, running

PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
CARD0, CARD1 = card_uuid(1, 0), card_uuid(1, 1)
QUARTER_CPU = "16"  # the node agent's nodes have 64 CPUs


@pytest.fixture
async def cluster(kubernetes: BuiltBinaries) -> AsyncIterator[DemoCluster]:
    """One node with two T4s (15360 MiB each) and three priority classes."""
    settings = DemoSettings(cards=[[t4(uuid=CARD0), t4(uuid=CARD1)]])
    async with DemoCluster(settings, kubernetes=kubernetes) as demo:
        for name, value in (("low", 100), ("high", 1000), ("top", 10000)):
            await demo.client.create(
                PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value}
            )
        yield demo


def gpu_pod(name: str, memory_mib: int, priority: str, *, card: str | None = None,
            cpu: str = QUARTER_CPU) -> JsonObject:
    container = gpu_container("main", memory_mib)
    container["resources"]["requests"] = {"cpu": cpu}
    annotations = {KEY_NVIDIA_USE_GPUUUID: card} if card else {}
    return {
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"containers": [container], "priorityClassName": priority,
                 "terminationGracePeriodSeconds": 1},
    }


async def exists(cluster: DemoCluster, name: str) -> bool:
    try:
        pod = await cluster.client.get_pod(NS, name)
    except NotFound:
        return False
    return not pod["metadata"].get("deletionTimestamp")


async def test_a_high_priority_pod_evicts_exactly_the_two_pods_on_the_card_it_needs(
    cluster: DemoCluster,
) -> None:
    # card 0: low-a 8000 + low-b 7000; card 1: low-c 3000 + top-e 3000; all 64 CPUs taken
    uids = {}
    for name, memory, priority, card in (
        ("low-a", 8000, "low", CARD0),
        ("low-b", 7000, "low", CARD0),
        ("low-c", 3000, "low", CARD1),
        ("top-e", 3000, "top", CARD1),
    ):
        created = await cluster.client.create_pod(NS, gpu_pod(name, memory, priority, card=card))
        uids[name] = created["metadata"]["uid"]
        await running(cluster.client, name)

    # 14000 MiB fits card 0 once both its pods go; card 1 keeps top-e (12360 MiB at most)
    await cluster.client.create_pod(NS, gpu_pod("high", 14000, "high"))
    await gone(cluster.client, "low-a", timeout_s=60)
    await gone(cluster.client, "low-b", timeout_s=60)
    bound = await running(cluster.client, "high", timeout_s=60)
    assert bound["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED].startswith(
        f"{CARD0},NVIDIA,14000,0:")
    assert await exists(cluster, "low-c") and await exists(cluster, "top-e")
    answer = cluster.scheduler.preemption.last[f"{NS}/high"]["gpu-node-1"]
    assert set(answer.victims) == {uids["low-a"], uids["low-b"]}
    assert "evict default/low-a (priority 100), default/low-b (priority 100)" in answer.reason
    preempted = [e for e in (await cluster.client.list(
        EVENTS, NS, field_selector="reason=Preempted")).items]
    assert sorted(e["involvedObject"]["name"] for e in preempted) == ["low-a", "low-b"]

    # No eviction gives 20000 MiB on a 15360 MiB card: kube-scheduler would evict low-c for
    # the CPU; our answer drops the node, so nothing is evicted and the pod stays pending.
    await cluster.client.create_pod(NS, gpu_pod("hopeless", 20000, "high", cpu="32"))
    event = await event_with(cluster.client, "hopeless", "FailedScheduling")
    # kube-scheduler's CPU check refuses the node before asking our filter; its preemption
    # found low-c for the CPU, and our answer left it no candidate
    assert "Insufficient cpu" in event["message"]
    assert "preemption: no candidate node for preemption" in event["message"]
    async with asyncio.timeout(30):
        while f"{NS}/hopeless" not in cluster.scheduler.preemption.last:
            await asyncio.sleep(0.1)
    dropped = cluster.scheduler.preemption.last[f"{NS}/hopeless"]["gpu-node-1"]
    assert not dropped.kept and "does not fit" in dropped.reason
    await asyncio.sleep(2)  # time for kube-scheduler to act on an answer, were there one
    assert await exists(cluster, "low-c") and await exists(cluster, "top-e")
    assert await exists(cluster, "high")
    hopeless = await cluster.client.get_pod(NS, "hopeless")
    assert not hopeless["spec"].get("nodeName")
    assert not (hopeless.get("status") or {}).get("nominatedNodeName")
