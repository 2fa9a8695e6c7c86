"""HAMi's placement annotations on DRA nodes, on Kubernetes' own control plane: the webhook
translates them into claims and kube-scheduler's allocator honours them.

Two DRA nodes (every GPU node runs the DRA driver, `dra.mode=all`, the chart's RBAC):
* `numa`: three A100-80GB, gpu-0 on NUMA node 0 and gpu-1, gpu-2 on NUMA node 1. A 2-GPU pod
  with `nvidia.com/numa-bind` gets gpu-1 and gpu-2 (without the constraint the allocator's
  first pick, gpu-0 and gpu-1, would span both);
* `mixed`: an A100-40GB on NUMA node 0 and an H100-80GB on NUMA node 1 (no two cards share a
  NUMA node, so the NUMA-bound pods fit only on `numa`).
Card-type annotations pick the model, and `gpumem-percentage` takes that share of whichever
card size is chosen, by HAMi's rounding. An annotation written to break out of its CEL string
matches no card."""

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from pyhami.controlplane import BuiltBinaries
from pyhami.devices.nvidia.dra_claims import consumed_capacity
from pyhami.kube import (
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    JsonObject,
    KubeClient,
)
from pyhami.kube.dra_views import read_claim
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.dra_nodes import dra_node_name
from pyhami.sim.demo.settings import DemoSettings
from pyhami.testing.fake_nvml import a100_40g, a100_80g, h100_80g

from .conftest import assert_none_refused, chart_rbac_with
from .test_dra_mixed_on_real import claim_named_in, placed, unschedulable

USER_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
NS = "default"
MIB = 1 << 20
NUMA_CARDS = [
    a100_80g(numa=0, uuid="GPU-n0"),
    a100_80g(numa=1, uuid="GPU-n1"),
    a100_80g(numa=1, uuid="GPU-n2"),
]
MIXED_CARDS = [a100_40g(numa=0, uuid="GPU-m0"), h100_80g(numa=1, uuid="GPU-m1")]


@pytest.fixture
async def cluster(kubernetes: BuiltBinaries) -> AsyncIterator[DemoCluster]:
    rbac = chart_rbac_with("dra.mode=all")
    settings = DemoSettings(
        nodes=0,
        dra_nodes=2,
        dra_cards=(NUMA_CARDS, MIXED_CARDS),
        harness_backoff_s=(0.1, 1.0),
    )
    async with DemoCluster(settings, kubernetes=kubernetes, rbac=rbac) as demo:
        yield demo
        assert_none_refused(demo)


def gpu_pod(name: str, limits: dict[str, str], annotations: dict[str, str]) -> JsonObject:
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return {
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"containers": [container]},
    }


def allocated(claim: JsonObject) -> list[tuple[str, str, dict[str, int]]]:
    """(node pool, device, consumed capacity) per allocated device."""
    results = claim["status"]["allocation"]["devices"]["results"]
    consumed = consumed_capacity(read_claim(claim))
    return [(r["pool"], r["device"], c) for r, c in zip(results, consumed, strict=True)]


async def card_sizes_known(demo: DemoCluster, count: int, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while len(demo.scheduler.dra_cards.sizes()) < count:
            await asyncio.sleep(0.1)


async def test_numa_bind_card_types_and_percentages_place_as_in_hami(cluster: DemoCluster) -> None:
    client: KubeClient = cluster.client
    numa, mixed = dra_node_name(1), dra_node_name(2)
    await user_guide_templates_are_accepted(client)

    bound = gpu_pod("bound", {"nvidia.com/gpu": "2"}, {"nvidia.com/numa-bind": "true"})
    await client.create(PODS, bound, NS)
    claim = await claim_named_in(client, await placed(client, "bound"))
    assert claim["spec"]["devices"]["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": "gpu.pyhami.io/numaNode"}
    ]
    assert sorted((pool, device) for pool, device, _ in allocated(claim)) == [
        (numa, "gpu-1"),
        (numa, "gpu-2"),
    ]

    await card_sizes_known(cluster, 3)  # 40960, 81559 and 81920 MiB
    half = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}
    for name, model in (("h100-half", "h100"), ("a100-half", "a100-pcie")):
        await client.create(PODS, gpu_pod(name, half, {"nvidia.com/use-gputype": model}), NS)
    # half of 81559 MiB is 40779.5: HAMi truncates
    for name, device, mib in (("h100-half", "gpu-1", 40779), ("a100-half", "gpu-0", 20480)):
        pod = await placed(client, name)
        assert pod["spec"]["nodeName"] == mixed
        [(pool, got, consumed)] = allocated(await claim_named_in(client, pod))
        assert (pool, got) == (mixed, device)
        assert consumed == {"memory": mib * MIB, "cores": 0}, name

    # HAMi's substring rule: "NVIDIA-" prefixed types too; the nouse list excludes the H100
    avoid = {"nvidia.com/use-gputype": "nvidia", "nvidia.com/nouse-gputype": "H100, 80GB"}
    await client.create(PODS, gpu_pod("not-h100", {"nvidia.com/gpumem": "1024"}, avoid), NS)
    [(pool, device, _)] = allocated(await claim_named_in(client, await placed(client, "not-h100")))
    assert (pool, device) == (mixed, "gpu-0")

    # a constraint on a request with alternatives holds for the alternative chosen
    await client.delete(PODS, "bound", NS)
    quarter = {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "25"}
    await client.create(PODS, gpu_pod("bound-quarters", quarter, {"nvidia.com/numa-bind": "1"}), NS)
    claim = await claim_named_in(client, await placed(client, "bound-quarters"))
    assert sorted(allocated(claim)) == [
        (numa, "gpu-1", {"memory": 20480 * MIB, "cores": 0}),
        (numa, "gpu-2", {"memory": 20480 * MIB, "cores": 0}),
    ]

    # kube-apiserver compiles every escape cel_string writes: quote, backslash, \u and \U forms
    hostile = {"nvidia.com/use-gputype": 'H100"]) || true || (["\\\n\u2028\U000e0001é'}
    await client.create(PODS, gpu_pod("hostile", {"nvidia.com/gpumem": "1024"}, hostile), NS)
    message = await unschedulable(client, "hostile")
    assert "cannot allocate all claims" in message
    [claim_name] = [
        s["resourceClaimName"]
        for s in (await client.get(PODS, "hostile", NS))["status"]["resourceClaimStatuses"]
    ]
    assert "allocation" not in (await client.get(RESOURCE_CLAIMS, claim_name, NS)).get("status", {})


async def user_guide_templates_are_accepted(client: KubeClient) -> None:
    """The user guide's topology templates, applied as written (one cluster start serves both
    checks: each costs seconds)."""
    blocks = re.findall(r"```yaml\n(.*?)```", USER_GUIDE.read_text(), re.DOTALL)
    templates = [
        doc
        for block in blocks
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict)
        and doc.get("kind") == "ResourceClaimTemplate"
        and "constraints" in str(doc)
    ]
    attributes = set()
    for template in templates:
        created = await client.create(RESOURCE_CLAIM_TEMPLATES, template, NS)
        [constraint] = created["spec"]["spec"]["devices"]["constraints"]
        attributes.add(constraint["matchAttribute"])
    assert attributes == {"gpu.pyhami.io/numaNode", "gpu.pyhami.io/nvlinkDomain"}
