"""Native sidecars on Kubernetes' own control plane: the real API server stores the init
container's `restartPolicy: Always`, the real kube-scheduler asks our extender, and the card
must hold the sidecar and the app container together."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import RESOURCE_QUOTAS, Forbidden, JsonObject
from pyhami.protocol import KEY_NVIDIA_ALLOCATED
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.testing.fake_nvml import t4

from .test_pod_path import NS, event_with, gpu_container, pod, running

T4_MIB = 15360


@pytest.fixture
async def cluster(kubernetes: BuiltBinaries) -> AsyncIterator[DemoCluster]:
    """One node with one T4 (15360 MiB)."""
    settings = DemoSettings(cards=[[t4(uuid=card_uuid(1, 0))]])
    async with DemoCluster(settings, kubernetes=kubernetes) as demo:
        yield demo


def with_sidecar(name: str, sidecar_mib: int, app_mib: int) -> JsonObject:
    sidecar = {**gpu_container("proxy", sidecar_mib), "restartPolicy": "Always"}
    return pod(name, gpu_container("app", app_mib), init=(sidecar,))


async def test_a_gpu_sidecar_and_the_app_container_are_placed_so_the_card_holds_both(
    cluster: DemoCluster,
) -> None:
    # 10000 + 10000 MiB cannot share the 15360 MiB T4: refused, with the reason
    created = await cluster.client.create_pod(NS, with_sidecar("too-big", 10000, 10000))
    assert created["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    event = await event_with(cluster.client, "too-big", "FailedScheduling")
    assert "CardInsufficientMemory" in event["message"]
    assert cluster.scheduler.state.ledger.device_usage("gpu-node-1")[0].usedmem == 0

    # 6000 + 6000 fits: both on the card, each container with its own entry and limit
    await cluster.client.create_pod(NS, with_sidecar("fits", 6000, 6000))
    bound = await running(cluster.client, "fits")
    started = await cluster.node("gpu-node-1").agent.wait_started(NS, "fits")
    assert [(c.name, c.init) for c in started.containers] == [("proxy", True), ("app", False)]
    assert [c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] for c in started.containers] == [
        "6000m", "6000m"]
    entries = bound["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED].split(";")
    assert [entry.split(",")[2] for entry in entries[:2]] == ["6000", "6000"]
    # the sidecar is reported running, so its share stays held beside the app's
    current = await cluster.client.get_pod(NS, "fits")
    assert "running" in current["status"]["initContainerStatuses"][0]["state"]
    usage = cluster.scheduler.state.ledger.device_usage("gpu-node-1")
    assert usage[0].usedmem == 12000 <= T4_MIB

    # a classic init container of 3000 next to a 100 MiB app fits in the 3360 MiB left
    classic = pod("classic", gpu_container("app", 100), init=(gpu_container("setup", 3000),))
    await cluster.client.create_pod(NS, classic)
    await running(cluster.client, "classic")


async def test_the_quota_counts_the_sidecar_and_the_app_container(cluster: DemoCluster) -> None:
    quota = {"metadata": {"name": "gpu"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "11000"}}}
    await cluster.client.create(RESOURCE_QUOTAS, quota, NS)
    async with asyncio.timeout(10):
        while cluster.scheduler.state.quotas.limit(NS) is None:
            await asyncio.sleep(0.05)
    # 6000 + 6000 run side by side: over the 11000 MiB quota, refused by our webhook
    with pytest.raises(
        Forbidden, match=r'webhook "vgpu\.hami\.io" denied .* exceeding resource quota'
    ):
        await cluster.client.create_pod(NS, with_sidecar("over", 6000, 6000))
    # as a classic init container the 6000 ends before the app's 6000 starts: it fits
    classic = pod("classic", gpu_container("app", 6000), init=(gpu_container("setup", 6000),))
    await cluster.client.create_pod(NS, classic)
    await running(cluster.client, "classic")
    assert cluster.scheduler.state.ledger.namespace_usage(NS) == (6000, 0)
