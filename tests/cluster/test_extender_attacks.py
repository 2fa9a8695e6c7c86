"""The extender attacks that once worked on `pyhami demo`, tried again on the demo cluster.

A hostile pod in the cluster that reaches the extender's port used to be able to:
* post a `/bind` of a Running pod to a node that does not exist: the answer was "not found",
  but the pod's charge was released, and the next pod asking for two whole V100s got the
  same two cards (both Running);
* post a `/filter` carrying a Running pod's UID and a 1 MiB request: the scheduler rewrote the
  pod's allocation record with its own trusted identity.
Now the port refuses a caller without kube-scheduler's client certificate, and even a caller
holding one (a leaked certificate) cannot do either.
"""

import asyncio
import ssl
from typing import Any

import aiohttp

from pyhami.protocol import KEY_NVIDIA_ALLOCATED
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.testing.fake_nvml import v100_32g
from pyhami.testing.scheduler_harness import Result

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


async def _first_outcome(cluster: DemoCluster, name: str) -> Result:
    while not (outcomes := cluster.harness.outcomes_for("default", name)):
        await asyncio.sleep(0.05)
    return outcomes[0].result


async def test_a_forged_bind_cannot_free_a_running_pods_cards() -> None:
    async with DemoCluster(TWO_V100) as cluster:
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
        outcome = await asyncio.wait_for(_first_outcome(cluster, "second"), 20)
        second = await cluster.client.get_pod("default", "second")
        assert outcome is Result.UNSCHEDULABLE, "two whole V100s are taken: no double booking"
        assert not second["spec"].get("nodeName")
        charged = cluster.scheduler.state.ledger.pod(first["metadata"]["uid"])
        assert charged is not None and charged.node == NODE
        current = await cluster.client.get_pod("default", "first")
        assert current["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED] == record
        assert refused[0] == 401 and "client certificate" in refused[1]["Error"]
        assert held[0] == 200 and "has no filter decision" in held[1]["Error"]


async def test_a_forged_filter_cannot_rewrite_a_running_pods_allocation() -> None:
    async with DemoCluster(TWO_V100) as cluster:
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
