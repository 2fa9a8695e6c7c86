"""Dynamic Resource Allocation on Kubernetes' own control plane: kube-controller-manager makes
a pod's ResourceClaim from its template, kube-scheduler allocates a share of a GPU by
consumable capacity (memory and cores), records what it took in the claim's status, and
keeps a pod pending with its own reason when no card has room left; a plain
`nvidia.com/gpu: 1` pod gets a whole GPU through the DeviceClass's extended-resource mapping.

The node's ResourceSlice is published here as the DRA driver publishes it (one device per GPU,
capacities `memory` and `cores` shared by many allocations)."""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.devices.nvidia.dra_claims import (
    DRIVER,
    NODE_MODE_DRA,
    NODE_MODE_LABEL,
    GpuShare,
    consumed_capacity,
)
from pyhami.kube import (
    DEVICE_CLASSES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    JsonObject,
    KubeClient,
    NotFound,
    Resource,
)
from pyhami.kube.dra_manifests import ClaimTemplate, device_class
from pyhami.kube.dra_views import read_claim
from pyhami.testing.fake_kubelet import FakeKubelet
from pyhami.testing.node_agent import NodeAgent
from pyhami.testing.real_cluster import RealControlPlane

NS = "default"
GIB = 1024**3
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)


def gpu_slice(node: str, memories_gib: list[int]) -> JsonObject:
    """The node's ResourceSlice: one device per GPU, shared by consumable capacity."""
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {"index": {"int": index}, "numaNode": {"int": 0}},
            "allowMultipleAllocations": True,
            "capacity": {
                "memory": {
                    "value": f"{gib}Gi",
                    "requestPolicy": {
                        "default": f"{gib}Gi",
                        "validRange": {"min": "1Mi", "step": "1Mi"},
                    },
                },
                "cores": {
                    "value": "100",
                    "requestPolicy": {"default": "100", "validRange": {"min": "1", "step": "1"}},
                },
            },
        }
        for index, gib in enumerate(memories_gib)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


@dataclass
class DraCluster:
    plane: RealControlPlane
    admin: KubeClient
    node: str


@pytest.fixture
async def dra(kubernetes: BuiltBinaries) -> AsyncIterator[DraCluster]:
    """The control plane with DRA's controllers, kube-scheduler alone (DRA claims are its own
    work), one node with a 16 GiB and an 8 GiB GPU, and the DeviceClass."""
    async with RealControlPlane(kubernetes, dra=True) as plane:
        admin = await plane.client(plane.admin_kubeconfig)
        await plane.start_kube_scheduler()
        node = "dra-node-1"
        async with FakeKubelet() as kubelet:
            kubelet_client = await plane.client(plane.node_kubeconfig(node))
            agent = NodeAgent(kubelet_client, node, kubelet)
            await agent.register_node({NODE_MODE_LABEL: NODE_MODE_DRA})
            async with agent:
                await admin.create(DEVICE_CLASSES, device_class())
                await admin.create(RESOURCE_SLICES, gpu_slice(node, [16, 8]))
                yield DraCluster(plane, admin, node)


def claim_pod(name: str, template: str) -> JsonObject:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "main", "image": "cuda-sample", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


async def scheduled(admin: KubeClient, name: str, timeout_s: float = 30) -> JsonObject:
    async with asyncio.timeout(timeout_s):
        while True:
            pod = await admin.get(PODS, name, NS)
            if pod["spec"].get("nodeName"):
                return pod
            await asyncio.sleep(0.2)


async def unschedulable_message(admin: KubeClient, name: str, timeout_s: float = 30) -> str:
    async with asyncio.timeout(timeout_s):
        while True:
            pod = await admin.get(PODS, name, NS)
            assert not pod["spec"].get("nodeName"), f"{name} was placed"
            for condition in (pod.get("status") or {}).get("conditions") or ():
                if condition["type"] == "PodScheduled" and condition.get("reason"):
                    return f"{condition['reason']}: {condition.get('message', '')}"
            await asyncio.sleep(0.2)


async def allocated_claim(admin: KubeClient, name: str, timeout_s: float = 30) -> JsonObject:
    """The pod's claim once kube-scheduler allocated it (a template's claim, else the claim
    kube-scheduler made for the pod's extended resources)."""
    async with asyncio.timeout(timeout_s):
        while True:
            status = (await admin.get(PODS, name, NS)).get("status") or {}
            names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()]
            extended = status.get("extendedResourceClaimStatus") or {}
            names.append(extended.get("resourceClaimName"))
            for claim_name in filter(None, names):
                try:
                    claim = await admin.get(RESOURCE_CLAIMS, claim_name, NS)
                except NotFound:
                    continue
                if (claim.get("status") or {}).get("allocation"):
                    return claim
            await asyncio.sleep(0.2)


async def test_a_share_of_a_gpu_is_allocated_by_kube_scheduler_with_its_consumed_capacity(
    dra: DraCluster,
) -> None:
    template = ClaimTemplate(
        NS, {"gpu": GpuShare(memory_bytes=4 * GIB, cores_percent=30)}
    ).manifest()
    await dra.admin.create(RESOURCE_CLAIM_TEMPLATES, template, NS)
    await dra.admin.create(PODS, claim_pod("share", template["metadata"]["name"]), NS)

    pod = await scheduled(dra.admin, "share")
    claim = await allocated_claim(dra.admin, "share")
    assert pod["spec"]["nodeName"] == dra.node
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == DRIVER and result["pool"] == dra.node
    assert result.get("shareID"), "a device shared by many allocations gives each a share id"
    assert consumed_capacity(read_claim(claim)) == [{"memory": 4 * GIB, "cores": 30}]
    # the claim was made from the template by kube-controller-manager, owned by the pod
    [owner] = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Pod", "share")


async def test_claims_share_a_card_until_its_memory_is_spent_then_wait_with_the_reason(
    dra: DraCluster,
) -> None:
    # 16 GiB + 8 GiB: six 4 GiB shares fit (four on one card, two on the other), the 7th not
    template = ClaimTemplate(
        NS, {"gpu": GpuShare(memory_bytes=4 * GIB, cores_percent=10)}
    ).manifest()
    await dra.admin.create(RESOURCE_CLAIM_TEMPLATES, template, NS)
    name = template["metadata"]["name"]
    devices: list[str] = []
    for index in range(6):
        await dra.admin.create(PODS, claim_pod(f"share-{index}", name), NS)
        claim = await allocated_claim(dra.admin, f"share-{index}")
        devices.append(claim["status"]["allocation"]["devices"]["results"][0]["device"])
    assert sorted(devices) == ["gpu-0"] * 4 + ["gpu-1"] * 2

    await dra.admin.create(PODS, claim_pod("one-too-many", name), NS)
    message = await unschedulable_message(dra.admin, "one-too-many")
    assert message.startswith("Unschedulable: 0/1 nodes are available")
    assert "cannot allocate all claims" in message

    # a share that ends frees its memory: the waiting pod is placed
    await dra.admin.delete(PODS, "share-0", NS, grace_period_seconds=0)
    claim = await allocated_claim(dra.admin, "one-too-many", timeout_s=60)
    assert consumed_capacity(read_claim(claim)) == [{"memory": 4 * GIB, "cores": 10}]


async def test_a_plain_gpu_pod_gets_a_whole_gpu_through_the_extended_resource_mapping(
    dra: DraCluster,
) -> None:
    plain = {
        "metadata": {"name": "plain", "namespace": NS},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "cuda-sample",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    await dra.admin.create(PODS, plain, NS)
    claim = await allocated_claim(dra.admin, "plain")
    # the whole card: each capacity's policy default is all of it
    [consumed] = consumed_capacity(read_claim(claim))
    assert consumed in ({"memory": 16 * GIB, "cores": 100}, {"memory": 8 * GIB, "cores": 100})
    # a second and a third plain pod: the second takes the other card, the third waits
    plain["metadata"]["name"] = "plain-2"
    await dra.admin.create(PODS, plain, NS)
    await allocated_claim(dra.admin, "plain-2")
    plain["metadata"]["name"] = "plain-3"
    await dra.admin.create(PODS, plain, NS)
    assert (await unschedulable_message(dra.admin, "plain-3")).startswith("Unschedulable")
