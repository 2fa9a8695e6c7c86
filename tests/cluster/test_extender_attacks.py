"""The extender attacks that once worked on `pyhami demo`, tried again on the demo cluster, on
the embedded double with the kube-scheduler harness and on Kubernetes' own control plane.

A hostile pod in the cluster that reaches the extender's port used to be able to:
* post a `/bind` of a Running pod to a node that does not exist: the answer was "not found",
  but the pod's charge was released, and the next pod asking for two whole V100s got the
  same two cards (both Running);
* post a `/filter` carrying a Running pod's UID and a 1 MiB request: the scheduler rewrote the
  pod's allocation record with its own trusted identity.
Now the port refuses a caller without kube-scheduler's client certificate, and even a caller
holding one (a leaked certificate) cannot do either. The forged `/filter` with kube-scheduler's
own certificate is also what a lagging kube-scheduler sends for a pod it has just bound: it is
refused, so no binding can fail with 409 and take a running pod's charge with it.
"""

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from pyhami.kube import JsonObject
from pyhami.protocol import KEY_NVIDIA_ALLOCATED
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.testing.fake_nvml import v100_32g

NODE = "gpu-node-1"
TWO_V100 = DemoSettings(
    cards=[[v100_32g(uuid=card_uuid(1, 0)), v100_32g(uuid=card_uuid(1, 1))]],
    harness_backoff_s=(0.05, 0.2),
)


def _two_whole_cards(name: str) -> dict[str, Any]:
    limits = {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem-percentage": "100",
        "nvidia.com/gpucores": "100",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "cuda", "resources": {"limits": limits}}]},
    }


async def _running(cluster: DemoCluster, name: str) -> dict[str, Any]:
    await cluster.client.create_pod("default", _two_whole_cards(name))
    await cluster.node(NODE).agent.wait_started("default", name)
    while (pod := await cluster.client.get_pod("default", name))["status"].get(
        "phase"
    ) != "Running":
        await asyncio.sleep(0.05)
    return pod


def _sessions(cluster: DemoCluster) -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
    """A pod's HTTP client (trusts the serving CA, has no client certificate), and one that
    holds kube-scheduler's certificate."""
    anonymous = ssl.create_default_context(cadata=cluster.ca_pem.decode())
    leaked = cluster.client_certificate.load_into(
        ssl.create_default_context(cadata=cluster.ca_pem.decode())
    )
    return (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=anonymous)),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=leaked)),
    )


async def _post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with http.post(url, json=body) as response:
        return response.status, await response.json(content_type=None)


async def _unschedulable(cluster: DemoCluster, name: str) -> JsonObject:
    """The pod once kube-scheduler wrote that no node fits it (PodScheduled=False)."""
    while True:
        pod = await cluster.client.get_pod("default", name)
        conditions = pod.get("status", {}).get("conditions") or ()
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
            return pod
        await asyncio.sleep(0.05)


@pytest.fixture(params=["embedded", "real"])
async def cluster(
    request: pytest.FixtureRequest, chart_rbac: list[JsonObject]
) -> AsyncIterator[DemoCluster]:
    """Two V100s on one node, on the API double with the harness, or on Kubernetes' own control
    plane with our components under the chart's RBAC."""
    if request.param == "embedded":
        async with DemoCluster(TWO_V100) as demo:
            yield demo
        return
    kubernetes = request.getfixturevalue("kubernetes")
    async with DemoCluster(TWO_V100, kubernetes=kubernetes, rbac=chart_rbac) as demo:
        yield demo


async def test_a_forged_bind_cannot_free_a_running_pods_cards(cluster: DemoCluster) -> None:
    first = await _running(cluster, "first")
    record = first["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED]
    forged = {
        "PodName": "first",
        "PodNamespace": "default",
        "PodUID": first["metadata"]["uid"],
        "Node": "no-such-node",
    }
    anonymous, leaked = _sessions(cluster)
    async with anonymous, leaked:
        refused = await _post(anonymous, f"{cluster.scheduler_url}/bind", forged)
        held = await _post(leaked, f"{cluster.scheduler_url}/bind", forged)
    await cluster.client.create_pod("default", _two_whole_cards("second"))
    # Two whole V100s are taken: no double booking.
    second = await asyncio.wait_for(_unschedulable(cluster, "second"), 30)
    assert not second["spec"].get("nodeName")
    charged = cluster.scheduler.state.ledger.pod(first["metadata"]["uid"])
    assert charged is not None and charged.node == NODE
    current = await cluster.client.get_pod("default", "first")
    assert current["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED] == record
    assert refused[0] == 401 and "client certificate" in refused[1]["Error"]
    assert held[0] == 200 and "has no filter decision" in held[1]["Error"]


async def test_a_forged_filter_cannot_rewrite_a_running_pods_allocation(
    cluster: DemoCluster,
) -> None:
    first = await _running(cluster, "first")
    before = dict(first["metadata"]["annotations"])
    tiny = {
        "metadata": {
            "name": "first",
            "namespace": "default",
            "uid": first["metadata"]["uid"],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1"}
                    },
                }
            ]
        },
    }
    forged = {"Pod": tiny, "NodeNames": [NODE]}
    anonymous, leaked = _sessions(cluster)
    async with anonymous, leaked:
        refused = await _post(anonymous, f"{cluster.scheduler_url}/filter", forged)
        held = await _post(leaked, f"{cluster.scheduler_url}/filter", forged)
    current = await cluster.client.get_pod("default", "first")
    assert current["metadata"]["annotations"] == before
    charged = cluster.scheduler.state.ledger.pod(first["metadata"]["uid"])
    assert charged is not None and charged.node == NODE
    assert sum(d.usedmem for c in charged.containers for d in c) == 2 * 32768
    assert refused[0] == 401 and "client certificate" in refused[1]["Error"]
    assert held[0] == 200 and f"already bound to {NODE}" in held[1]["Error"]
