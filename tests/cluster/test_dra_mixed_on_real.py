"""A mixed cluster on Kubernetes' own control plane: one node runs the device plugin, one the DRA
driver (label gpu.pyhami.io/mode=dra), our scheduler and webhook under the chart's RBAC with
`dra.mode=selected`. A HAMi-style pod lands on the device-plugin node through the extender; the
same pod headed to DRA nodes is translated by the webhook into a ResourceClaimTemplate with
capacity requests and runs on the DRA node with the driver-prepared limits; a plain
`nvidia.com/gpu: 1` pod headed there gets a claim for a whole GPU. The vGPU monitor beside the
DRA driver exports the translated pod as the device plugin's monitor exports the HAMi-style one.
(In a mixed cluster the
DeviceClass maps no extended resource: kube-scheduler would then refuse every HAMi-style pod,
whose gpumem is neither on a node nor DRA-backed.)"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.devices.nvidia.dra_claims import NODE_MODE_DRA, NODE_MODE_LABEL, consumed_capacity
from pyhami.kube import PODS, RESOURCE_CLAIMS, JsonObject, KubeClient, NotFound
from pyhami.kube.dra_views import read_claim
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.sim.top import scrape
from pyhami.testing.fake_nvml import a100_80g

from .conftest import assert_none_refused, chart_rbac_with

NS = "default"
MIB = 1 << 20
A100_MIB = 81920


@pytest.fixture
async def mixed(kubernetes: BuiltBinaries) -> AsyncIterator[DemoCluster]:
    rbac = chart_rbac_with("dra.mode=selected")
    settings = DemoSettings(
        nodes=1,
        gpus=1,
        dra_nodes=1,
        dra_cards=([a100_80g(uuid=card_uuid(2, 0))],),
        harness_backoff_s=(0.1, 1.0),
    )
    async with DemoCluster(settings, kubernetes=kubernetes, rbac=rbac) as demo:
        yield demo
        assert_none_refused(demo)


def gpu_pod(name: str, limits: dict[str, str], *, dra: bool) -> JsonObject:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]
    }
    if dra:
        spec["nodeSelector"] = {NODE_MODE_LABEL: NODE_MODE_DRA}
    return {"metadata": {"name": name, "namespace": NS}, "spec": spec}


async def placed(client: KubeClient, name: str, timeout_s: float = 60) -> JsonObject:
    pod: JsonObject = {}
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                pod = await client.get(PODS, name, NS)
                if (pod.get("status") or {}).get("phase") == "Running":
                    return pod
                await asyncio.sleep(0.2)
    except TimeoutError:
        node = pod.get("spec", {}).get("nodeName")
        pytest.fail(f"{name} is not running (node {node}): {pod.get('status')}")


async def claim_named_in(client: KubeClient, pod: JsonObject) -> JsonObject:
    status = pod.get("status") or {}
    names = [s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or ()]
    extended = status.get("extendedResourceClaimStatus") or {}
    names += [extended["resourceClaimName"]] if extended else []
    [name] = names
    try:
        return await client.get(RESOURCE_CLAIMS, name, NS)
    except NotFound:
        pytest.fail(f"claim {name} of {pod['metadata']['name']} is gone")


async def test_every_pod_lands_on_the_right_kind_of_node(mixed: DemoCluster) -> None:
    client = mixed.client
    [plugin_node] = mixed.nodes
    [dra_node] = mixed.dra_nodes
    share = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"}

    hami = await client.create(PODS, gpu_pod("hami-style", share, dra=False), NS)
    assert hami["spec"]["schedulerName"] == "hami-scheduler"
    running = await placed(client, "hami-style")
    assert running["spec"]["nodeName"] == plugin_node.name

    translated = await client.create(PODS, gpu_pod("translated", share, dra=True), NS)
    assert translated["spec"].get("schedulerName") == "default-scheduler"
    assert translated["spec"]["containers"][0]["resources"].get("limits", {}) == {}
    running = await placed(client, "translated")
    assert running["spec"]["nodeName"] == dra_node.name
    claim = await claim_named_in(client, running)
    assert consumed_capacity(read_claim(claim)) == [{"memory": 4096 * MIB, "cores": 30}]
    started = await dra_node.agent.wait_started(NS, "translated")
    main = started.container("main")
    assert main.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert main.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    # the monitors: the same series for either pod, on its own node's card
    series = await container_series(dra_node.metrics_url, "translated")
    assert series == await container_series(plugin_node.metrics_url, "hami-style")
    assert series[("hami_vgpu_memory_limit_bytes", "main", "0")] == 4096 * MIB
    assert series[("hami_vgpu_memory_used_bytes", "main", "0")] == 0  # nothing runs CUDA
    assert await device_uuids(dra_node.metrics_url, "translated") == {dra_node.nvml.device_uuid(0)}

    plain = await client.create(PODS, gpu_pod("whole", {"nvidia.com/gpu": "1"}, dra=True), NS)
    assert plain["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu-0"}]
    # the DRA node's only card is shared by "translated": a whole card does not fit there
    message = await unschedulable(client, "whole")
    assert "cannot allocate all claims" in message or "Insufficient" in message
    await client.delete(PODS, "translated", NS)
    running = await placed(client, "whole")
    assert running["spec"]["nodeName"] == dra_node.name
    claim = await claim_named_in(client, running)
    assert consumed_capacity(read_claim(claim)) == [{"memory": A100_MIB * MIB, "cores": 100}]


VGPU_SERIES = ("hami_vgpu_", "hami_container_")


async def container_series(
    url: str, pod: str, timeout_s: float = 30
) -> dict[tuple[str, str, str], float]:
    """(metric, container, vdevice index) -> value of the pod's container series, once the
    monitor at `url` exports them."""
    async with asyncio.timeout(timeout_s):
        while True:
            found = {
                (name, labels["container"], labels["vdevice_index"]): value
                for name, labels, value in await scrape([url])
                if name.startswith(VGPU_SERIES) and labels.get("pod") == pod
            }
            if found:
                return found
            await asyncio.sleep(0.2)


async def device_uuids(url: str, pod: str) -> set[str]:
    return {
        labels["device_uuid"]
        for name, labels, _ in await scrape([url])
        if name.startswith(VGPU_SERIES) and labels.get("pod") == pod
    }


async def unschedulable(client: KubeClient, name: str, timeout_s: float = 30) -> str:
    async with asyncio.timeout(timeout_s):
        while True:
            pod = await client.get(PODS, name, NS)
            assert not pod["spec"].get("nodeName"), f"{name} was placed"
            for condition in (pod.get("status") or {}).get("conditions") or ():
                if condition["type"] == "PodScheduled" and condition.get("reason"):
                    return str(condition.get("message", ""))
            await asyncio.sleep(0.2)
