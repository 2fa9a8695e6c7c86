"""Preemption for pods short only of GPU capacity, on Kubernetes' own control plane.

The pods ask for GPUs and nothing else. kube-scheduler cannot see GPU memory, so its own
preemption finds the pod fits everywhere with no victim and never asks `/preempt`: the
scheduler's own path (scheduler/eviction.py) evicts through the Eviction API, under the
chart's RBAC, PodDisruptionBudgets enforced by the API server."""

import asyncio
import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import EVENTS, POD_DISRUPTION_BUDGETS, JsonObject
from pyhami.kube.resources import Resource
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, KEY_NVIDIA_USE_GPUUUID
from pyhami.sim.demo.cluster import SCHEDULER_USER, DemoCluster
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.testing.fake_nvml import t4

from .conftest import assert_none_refused
from .test_pod_path import NS, event_with, gone, gpu_container, running

PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
N1C0, N1C1, N2C0 = card_uuid(1, 0), card_uuid(1, 1), card_uuid(2, 0)
NODE1 = "gpu-node-1"


@pytest.fixture
async def cluster(
    kubernetes: BuiltBinaries,
) -> AsyncIterator[DemoCluster]:
    """gpu-node-1 with two T4s (15360 MiB each), gpu-node-2 with one; three priority classes;
    our components under the chart's RBAC (any refused request fails the test)."""
    settings = DemoSettings(cards=[[t4(uuid=N1C0), t4(uuid=N1C1)], [t4(uuid=N2C0)]])
    async with DemoCluster(settings, kubernetes=kubernetes) as demo:
        for name, value in (("low", 100), ("high", 1000), ("top", 10000)):
            await demo.client.create(
                PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value}
            )
        yield demo
        assert_none_refused(demo)


def gpu_pod(
    name: str, memory_mib: int, priority: str, *, card: str | None = None, app: str = ""
) -> JsonObject:
    """Only GPU requests: nothing kube-scheduler's own filters could preempt for."""
    annotations = {KEY_NVIDIA_USE_GPUUUID: card} if card else {}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": annotations,
            "labels": {"app": app or name},
        },
        "spec": {
            "containers": [gpu_container("main", memory_mib)],
            "priorityClassName": priority,
            "terminationGracePeriodSeconds": 1,
        },
    }


async def start(cluster: DemoCluster, *pods: tuple[str, int, str, str, str]) -> None:
    for name, memory, priority, card, app in pods:
        await cluster.client.create_pod(NS, gpu_pod(name, memory, priority, card=card, app=app))
    for name, *_ in pods:
        await running(cluster.client, name)


async def alive(cluster: DemoCluster, *names: str) -> bool:
    for name in names:
        pod = await cluster.client.get_pod(NS, name)
        if pod["metadata"].get("deletionTimestamp"):
            return False
    return True


async def reasons_on(cluster: DemoCluster, reason: str) -> list[str]:
    events = await cluster.client.list(EVENTS, NS, field_selector=f"reason={reason}")
    return sorted(e["involvedObject"]["name"] for e in events.items)


async def explain(cluster: DemoCluster, name: str) -> JsonObject:
    """The scheduler's /explain, called with kube-scheduler's client certificate."""
    context = ssl.create_default_context(cadata=cluster.ca_pem.decode())
    cluster.client_certificate.load_into(context)
    connector = aiohttp.TCPConnector(ssl=context)
    url = f"{cluster.scheduler_url}/explain?pod={NS}/{name}"
    async with aiohttp.ClientSession(connector=connector) as http, http.get(url) as response:
        answer: JsonObject = await response.json()
        return answer


def asked(cluster: DemoCluster, verb: str, subresource: str) -> list[str]:
    """The pods whose `subresource` our scheduler asked the API server to `verb` (audit log).
    kube-scheduler runs under the same ServiceAccount, as in the chart: its user agent tells it
    apart."""
    assert cluster.real is not None
    return sorted(
        event["objectRef"]["name"]
        for event in cluster.real.audit_events()
        if event["user"]["username"] == SCHEDULER_USER
        and not str(event.get("userAgent", "")).startswith("kube-scheduler/")
        and event["verb"] == verb
        and event["objectRef"].get("subresource") == subresource
    )


def evictions(cluster: DemoCluster) -> list[str]:
    return asked(cluster, "create", "eviction")


def attempts(cluster: DemoCluster, outcome: str) -> float:
    value = cluster.scheduler.metrics.registry.get_sample_value(
        "pyhami_scheduler_preemption_attempts_total", {"path": "scheduler", "outcome": outcome}
    )
    return value or 0.0


async def test_a_gpu_only_pod_evicts_exactly_the_two_pods_on_the_card_it_needs(
    cluster: DemoCluster,
) -> None:
    # gpu-node-1 card 0: low-a 8000 + low-b 7000; card 1: low-c 3000 + top-e 3000.
    # gpu-node-2: low-d 4000 + top-f 4000 (without low-d, 11360 MiB: not enough).
    await start(
        cluster,
        ("low-a", 8000, "low", N1C0, ""),
        ("low-b", 7000, "low", N1C0, ""),
        ("low-c", 3000, "low", N1C1, ""),
        ("top-e", 3000, "top", N1C1, ""),
        ("low-d", 4000, "low", N2C0, ""),
        ("top-f", 4000, "top", N2C0, ""),
    )
    await cluster.client.create_pod(NS, gpu_pod("high", 14000, "high"))
    await gone(cluster.client, "low-a", timeout_s=60)
    await gone(cluster.client, "low-b", timeout_s=60)
    bound = await running(cluster.client, "high", timeout_s=60)
    assert bound["spec"]["nodeName"] == NODE1
    assert bound["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED].startswith(
        f"{N1C0},NVIDIA,14000,0:"
    )
    assert await alive(cluster, "low-c", "top-e", "low-d", "top-f")
    answers = cluster.scheduler.evicting.last[f"{NS}/high"]
    assert "evict default/low-a (priority 100), default/low-b (priority 100)" in (
        answers[NODE1].reason
    )
    assert not answers["gpu-node-2"].kept
    assert await reasons_on(cluster, "Preempted") == ["low-a", "low-b"]
    assert evictions(cluster) == ["low-a", "low-b"], "through the Eviction API, once each"
    assert asked(cluster, "patch", "status") == ["high"], "its nominatedNodeName"
    preempting = await event_with(cluster.client, "high", "Preempting")
    assert "CardInsufficientMemory" in preempting["message"]
    assert attempts(cluster, "evicted") == 1
    explained = (await explain(cluster, "high"))["preemption"]
    assert explained["path"] == "scheduler" and explained["outcome"] == "evicted"
    assert (explained["node"], explained["victims"]) == (NODE1, ["default/low-a", "default/low-b"])
    assert "does not fit" in explained["nodes"]["gpu-node-2"]

    # No eviction gives 20000 MiB on a 15360 MiB card: nothing is evicted, the pod waits.
    await cluster.client.create_pod(NS, gpu_pod("hopeless", 20000, "high"))
    event = await event_with(cluster.client, "hopeless", "PreemptionNotHelpful")
    assert "does not fit" in event["message"]
    await asyncio.sleep(2)  # time for an eviction to show, were there one
    assert await alive(cluster, "low-c", "top-e", "low-d", "top-f", "high")
    hopeless = await cluster.client.get_pod(NS, "hopeless")
    assert not hopeless["spec"].get("nodeName")
    assert not (hopeless.get("status") or {}).get("nominatedNodeName")
    assert await reasons_on(cluster, "Preempted") == ["low-a", "low-b"]
    assert evictions(cluster) == ["low-a", "low-b"]
    assert attempts(cluster, "evicted") == 1


async def test_a_pod_disruption_budget_is_respected(cluster: DemoCluster) -> None:
    # gpu-node-1 card 0: guarded-a 8000 + low-b 7000, guarded-a under a budget allowing no
    # disruption; card 1: low-c 7000 + low-d 7000. gpu-node-2: top-f 8000.
    await cluster.client.create(
        POD_DISRUPTION_BUDGETS,
        {
            "metadata": {"name": "guard", "namespace": NS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
        NS,
    )
    await start(
        cluster,
        ("guarded-a", 8000, "low", N1C0, "guarded"),
        ("low-b", 7000, "low", N1C0, ""),
        ("low-c", 7000, "low", N1C1, ""),
        ("low-d", 7000, "low", N1C1, ""),
        ("top-f", 8000, "top", N2C0, ""),
    )
    # Two victims either way; the pair on card 1 breaks no budget.
    await cluster.client.create_pod(NS, gpu_pod("high", 14000, "high"))
    await gone(cluster.client, "low-c", timeout_s=60)
    await gone(cluster.client, "low-d", timeout_s=60)
    bound = await running(cluster.client, "high", timeout_s=60)
    assert bound["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED].startswith(f"{N1C1},")
    assert await alive(cluster, "guarded-a", "low-b", "top-f")

    # 8000 MiB fits only where guarded-a goes: the budget forbids it, nothing is evicted.
    await cluster.client.create_pod(NS, gpu_pod("blocked", 8000, "high"))
    event = await event_with(cluster.client, "blocked", "PreemptionBlocked")
    assert "default/guarded-a: default/guard" in event["message"]
    await asyncio.sleep(2)
    assert await alive(cluster, "guarded-a", "low-b", "top-f", "high")
    assert not (await cluster.client.get_pod(NS, "blocked"))["spec"].get("nodeName")
    assert await reasons_on(cluster, "Preempted") == ["low-c", "low-d"]
    assert evictions(cluster) == ["low-c", "low-d"], "no eviction of guarded-a was even tried"
