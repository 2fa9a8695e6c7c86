"""The whole pod path on Kubernetes' own control plane: the real API server calls our webhook,
the real kube-scheduler asks our extender (`/filter`, `/bind` over HTTPS with a client
certificate), the simulated kubelet calls the device plugin's Allocate and reports the pod
Running with the node's own credentials; deleting the pod frees the scheduler's ledger."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import (
    EVENTS,
    RESOURCE_QUOTAS,
    Forbidden,
    JsonObject,
    KubeClient,
    KubeError,
    NotFound,
)
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE
from pyhami.sim.demo.cluster import (
    SCHEDULER_NAME,
    DemoCluster,
)
from pyhami.sim.demo.settings import DemoSettings, card_uuid

from .conftest import assert_none_refused

NS = "default"


@pytest.fixture
async def cluster(kubernetes: BuiltBinaries) -> AsyncIterator[DemoCluster]:
    """The demo's stack on the real control plane, our components under the chart's RBAC:
    any request of theirs that the real authorizer refuses fails the test."""
    settings = DemoSettings(nodes=2, gpus=2)
    async with DemoCluster(settings, kubernetes=kubernetes) as demo:
        yield demo
        assert_none_refused(demo)


def gpu_container(name: str, memory_mib: int, gpus: int = 1) -> JsonObject:
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(memory_mib)}
    return {"name": name, "image": "cuda-sample", "resources": {"limits": limits}}


def pod(name: str, *containers: JsonObject, init: tuple[JsonObject, ...] = ()) -> JsonObject:
    spec: JsonObject = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": name, "namespace": NS}, "spec": spec}


async def running(client: KubeClient, name: str, timeout_s: float = 30) -> JsonObject:
    async with asyncio.timeout(timeout_s):
        while True:
            current = await client.get_pod(NS, name)
            if (current.get("status") or {}).get("phase") == "Running":
                return current
            await asyncio.sleep(0.1)


async def events_of(client: KubeClient, name: str) -> list[JsonObject]:
    listed = await client.list(EVENTS, NS, field_selector=f"involvedObject.name={name}")
    return listed.items


async def event_with(
    client: KubeClient, name: str, reason: str, timeout_s: float = 30
) -> JsonObject:
    async with asyncio.timeout(timeout_s):
        while True:
            for event in await events_of(client, name):
                if event["reason"] == reason:
                    return event
            await asyncio.sleep(0.1)


async def gone(client: KubeClient, name: str, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                await client.get_pod(NS, name)
            except NotFound:
                return
            await asyncio.sleep(0.1)


async def test_a_gpu_pod_goes_from_webhook_to_running_and_its_deletion_frees_the_ledger(
    cluster: DemoCluster,
) -> None:
    created = await cluster.client.create_pod(NS, pod("trainer", gpu_container("main", 3000)))
    # the real API server called our webhook: the pod is ours to schedule
    assert created["spec"]["schedulerName"] == SCHEDULER_NAME

    bound = await running(cluster.client, "trainer")
    node = bound["spec"]["nodeName"]
    started = await cluster.node(node).agent.wait_started(NS, "trainer")
    envs = started.container("main").envs
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    uuid = envs["NVIDIA_VISIBLE_DEVICES"]
    assert uuid in {card_uuid(n, i) for n in (1, 2) for i in (0, 1)}
    annotations = bound["metadata"]["annotations"]
    assert annotations[KEY_VGPU_NODE] == node
    assert annotations[KEY_NVIDIA_ALLOCATED].startswith(f"{uuid},NVIDIA,3000,0:")

    # kube-scheduler placed it through our extender (which bound it) and said so
    scheduled = await event_with(cluster.client, "trainer", "Scheduled")
    assert scheduled["message"] == f"Successfully assigned {NS}/trainer to {node}"
    # kube-scheduler reports under the name of the profile that scheduled the pod
    assert scheduled["reportingComponent"] == SCHEDULER_NAME
    reasons = {e["reason"] for e in await events_of(cluster.client, "trainer")}
    assert {"FilteringSucceed", "BindingSucceed"} <= reasons
    assert cluster.scheduler.state.ledger.pod_keys() != []

    # The status came from the pod's own node: another node may not write it (one outside the
    # demo: the demo's own kubelets must never be refused).
    real = cluster.real
    assert real is not None
    other = "gpu-node-9"
    intruder = await real.client(real.node_kubeconfig(other))
    with pytest.raises(Forbidden, match=f'node "{other}" can only update pod status'):
        await intruder.patch_pod_status(NS, "trainer", {"status": {"phase": "Failed"}})

    await cluster.client.delete_pod(NS, "trainer")
    await gone(cluster.client, "trainer")
    async with asyncio.timeout(10):
        while cluster.scheduler.state.ledger.pod_keys():
            await asyncio.sleep(0.05)
    assert cluster.node(node).agent.devices_in_use() == 0


async def test_a_pod_that_cannot_fit_gets_kube_schedulers_event_with_our_reason(
    cluster: DemoCluster,
) -> None:
    await cluster.client.create_pod(NS, pod("too-big", gpu_container("main", 200_000)))
    event = await event_with(cluster.client, "too-big", "FailedScheduling")
    assert event["type"] == "Warning"
    assert "0/2 nodes are available" in event["message"]
    assert "CardInsufficientMemory" in event["message"]
    async with asyncio.timeout(10):  # the condition is written apart from the event
        while not (await cluster.client.get_pod(NS, "too-big"))["status"].get("conditions"):
            await asyncio.sleep(0.05)
    current = await cluster.client.get_pod(NS, "too-big")
    assert not current["spec"].get("nodeName")
    [condition] = [c for c in current["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "CardInsufficientMemory" in condition["message"]


async def test_init_and_app_containers_each_get_their_own_allocation(
    cluster: DemoCluster,
) -> None:
    body = pod(
        "pipeline",
        gpu_container("train", 2000),
        gpu_container("eval", 1000),
        {"name": "sidecar", "image": "busybox"},
        init=(gpu_container("fetch", 500),),
    )
    await cluster.client.create_pod(NS, body)
    bound = await running(cluster.client, "pipeline")
    started = await cluster.node(bound["spec"]["nodeName"]).agent.wait_started(NS, "pipeline")
    assert [(c.name, c.init) for c in started.containers] == [
        ("fetch", True),
        ("train", False),
        ("eval", False),
    ]
    limits = [c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] for c in started.containers]
    assert limits == ["500m", "2000m", "1000m"]
    # one entry per container, init containers first, the sidecar's empty
    per_container = bound["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED].split(";")
    assert [entry.split(",")[2] if entry else "" for entry in per_container[:4]] == [
        "500",
        "2000",
        "1000",
        "",
    ]


async def test_a_normal_user_cannot_forge_or_change_the_allocation_record(
    cluster: DemoCluster,
) -> None:
    real = cluster.real
    assert real is not None
    await real.grant("edit", "alice")
    alice = await real.client(real.kubeconfig_for("alice"))
    forged = pod("forger", gpu_container("main", 1000))
    forged["metadata"]["annotations"] = {
        KEY_VGPU_NODE: "gpu-node-2",
        KEY_NVIDIA_ALLOCATED: f"{card_uuid(2, 0)},NVIDIA,1,0:;",
    }
    created = await _as_soon_as_allowed(lambda: alice.create_pod(NS, forged))
    # stripped on create: what the scheduler did not write is not there
    annotations = created["metadata"].get("annotations") or {}
    assert KEY_NVIDIA_ALLOCATED not in annotations
    bound = await running(cluster.client, "forger")
    assert bound["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED].split(",")[2] == "1000"

    # ... and refused later, through the real API server's admission chain
    with pytest.raises(KubeError, match="denied the request"):
        await alice.patch_pod(
            NS, "forger", {"metadata": {"annotations": {KEY_NVIDIA_ALLOCATED: "x"}}}
        )
    after = await cluster.client.get_pod(NS, "forger")
    assert after["metadata"]["annotations"] == bound["metadata"]["annotations"]


async def _as_soon_as_allowed(create: Callable[[], Awaitable[JsonObject]]) -> JsonObject:
    """A new RoleBinding reaches the authorizer's cache within moments; until then RBAC says
    the user "cannot create" pods."""
    async with asyncio.timeout(10):
        while True:
            try:
                return await create()
            except Forbidden as err:
                if "cannot create" not in str(err):
                    raise
            await asyncio.sleep(0.1)


async def test_pods_asking_for_no_gpu_keep_the_default_scheduler(cluster: DemoCluster) -> None:
    plain = pod("web", {"name": "main", "image": "nginx"})
    created = await cluster.client.create_pod(NS, plain)
    assert created["spec"]["schedulerName"] == "default-scheduler"
    bound = await running(cluster.client, "web")
    assert bound["spec"]["nodeName"] in {"gpu-node-1", "gpu-node-2"}
    assert KEY_NVIDIA_ALLOCATED not in (bound["metadata"].get("annotations") or {})


async def test_a_resource_quota_on_gpu_memory_refuses_what_it_cannot_hold(
    cluster: DemoCluster,
) -> None:
    quota = {"metadata": {"name": "gpu"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}}}
    created = await cluster.client.create(RESOURCE_QUOTAS, quota, NS)
    # the real API server keeps the HAMi-style key (a qualified name is a valid quota resource)
    # and writes the quantity in canonical form
    assert created["spec"]["hard"] == {"limits.nvidia.com/gpumem": "4k"}
    async with asyncio.timeout(10):
        while cluster.scheduler.state.quotas.limit(NS) is None:
            await asyncio.sleep(0.05)

    await cluster.client.create_pod(NS, pod("first", gpu_container("main", 3000)))
    await running(cluster.client, "first")
    # our webhook refuses what the quota cannot hold, through the real admission chain
    second = pod("second", gpu_container("main", 2000))
    with pytest.raises(
        Forbidden, match=r'webhook "vgpu\.hami\.io" denied .* exceeding resource quota'
    ):
        await cluster.client.create_pod(NS, second)

    # once the first pod is gone its memory is back in the quota
    await cluster.client.delete_pod(NS, "first")
    await gone(cluster.client, "first")
    async with asyncio.timeout(10):
        while cluster.scheduler.state.ledger.namespace_usage(NS) != (0, 0):
            await asyncio.sleep(0.05)
    await cluster.client.create_pod(NS, second)
    await running(cluster.client, "second")
