"""Two scheduler replicas with leader election on a real Lease, and a failover, on Kubernetes'
own control plane.

Both replicas are `pyhami scheduler` processes under the chart's ServiceAccount (each with a
token of its own, so the audit log tells them apart), campaigning for one Lease
(`--leader-elect-campaign`). How kube-scheduler reaches them: HAMi's chart puts a kube-scheduler
beside each extender in one pod, and the extender follows that kube-scheduler's Lease; here, one
kube-scheduler for the whole cluster calls a stable address, as it would call a Service whose
readiness probe is the extender's `/readyz`: a follower answers 503 ("not the leader"), so only
the leader gets connections (`ReadyEndpoint` plays that Service). A follower that is called all
the same (a stale endpoint, a keep-alive connection) refuses `/filter` and `/bind` before
writing anything; the test calls it directly to show that. A second test runs the chart's own
layout for one replica: kube-scheduler campaigns, the extender follows its Lease.
"""

import asyncio
import base64
import json
import socket
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import LEASES, JsonObject, KubeClient
from pyhami.kube.lease import record_from_lease
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE
from pyhami.sim.demo.cluster import COMPONENT_NAMESPACE, SCHEDULER_USER, DemoCluster
from pyhami.sim.demo.settings import DemoSettings
from pyhami.testing.real_cluster import free_port

from .conftest import render_chart
from .replicas import ReadyEndpoint, SchedulerReplica, scheduler_replica
from .test_pod_path import NS, gpu_container, pod

LEASE = "pyhami-scheduler-extender"  # the chart's name for the extender's Lease
LEASE_DURATION_S = 6
ELECTION = (
    "--leader-elect",
    "--leader-elect-campaign",
    f"--leader-elect-resource-name={LEASE}",
    f"--leader-elect-resource-namespace={COMPONENT_NAMESPACE}",
    f"--leader-elect-lease-duration={LEASE_DURATION_S}s",
    "--leader-elect-renew-deadline=4s",
    "--leader-elect-retry-period=1s",
)
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@pytest.fixture
async def replicas(
    kubernetes: BuiltBinaries,
) -> AsyncIterator[tuple[DemoCluster, dict[str, SchedulerReplica]]]:
    """Two nodes of two cards; replicas `scheduler-a` and `scheduler-b` behind one endpoint."""
    endpoint = ReadyEndpoint([])
    await endpoint.start()
    async with DemoCluster(
        DemoSettings(nodes=2, gpus=2),
        kubernetes=kubernetes,
        extender_url=endpoint.url,
    ) as demo:
        started: dict[str, SchedulerReplica] = {}
        try:
            for name in ("scheduler-a", "scheduler-b"):
                replica = await scheduler_replica(demo, name, *ELECTION)
                replica.kubeconfig = _own_copy(replica.kubeconfig, demo.workdir / name)
                started[name] = replica
            await asyncio.gather(*(r.start() for r in started.values()))
            endpoint.replicas = list(started.values())
            yield demo, started
        finally:
            await endpoint.stop()
            await asyncio.gather(*(r.stop() for r in started.values()))
        assert demo.real is not None
        refused = demo.real.refused_requests({SCHEDULER_USER})
        assert refused == [], "a replica was refused:\n" + "\n".join(refused)


def _own_copy(kubeconfig: Path, stem: Path) -> Path:
    """The ServiceAccount's kubeconfig, kept apart before the next replica's token overwrites
    it: each replica holds a token of its own."""
    copy = stem.with_suffix(".kubeconfig")
    copy.write_text(kubeconfig.read_text())
    return copy


async def _lease(client: KubeClient) -> JsonObject:
    return await client.get(LEASES, LEASE, COMPONENT_NAMESPACE)


async def _holder_becomes(client: KubeClient, wanted: set[str], timeout_s: float) -> JsonObject:
    async with asyncio.timeout(timeout_s):
        while True:
            lease = await _lease(client)
            if lease["spec"].get("holderIdentity") in wanted:
                return lease
            await asyncio.sleep(0.2)


async def _all_bound(client: KubeClient, names: list[str], timeout_s: float = 60) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            for name in names:
                while not (await client.get_pod(NS, name))["spec"].get("nodeName"):
                    await asyncio.sleep(0.2)
    except TimeoutError:
        pods = [await client.get_pod(NS, name) for name in names]
        unbound = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
        raise AssertionError(f"not bound after {timeout_s:.0f}s: {unbound}") from None


async def _create(client: KubeClient, names: list[str]) -> None:
    await asyncio.gather(
        *(client.create_pod(NS, pod(name, gpu_container("main", 3000))) for name in names)
    )


def _token_of(replica: SchedulerReplica) -> str:
    """The ID the API server records for the replica's token: its JWT ID (`jti`)."""
    token = yaml.safe_load(replica.kubeconfig.read_text())["users"][0]["user"]["token"]
    claims = token.split(".")[1]
    return "JTI=" + json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["jti"]


def _code(event: JsonObject) -> int:
    return int((event.get("responseStatus") or {}).get("code") or 0)


def _credential(event: JsonObject) -> str:
    """Which token made the request (the API server records each token's ID)."""
    extra = event["user"].get("extra") or {}
    return ",".join(extra.get("authentication.kubernetes.io/credential-id", ()))


async def _extender_call(
    demo: DemoCluster, replica: SchedulerReplica, verb: str, body: JsonObject
) -> Any:
    """A call as kube-scheduler makes it, with its client certificate."""
    context = demo.client_certificate.load_into(
        ssl.create_default_context(cadata=demo.ca_pem.decode())
    )
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http,
        http.post(f"{replica.url}/{verb}", json=body) as answer,
    ):
        assert answer.status == 200
        return await answer.json()


async def test_one_replica_holds_the_lease_and_the_other_takes_over_when_it_is_killed(
    replicas: tuple[DemoCluster, dict[str, SchedulerReplica]],
) -> None:
    demo, started = replicas
    client = demo.client
    real = demo.real
    assert real is not None

    # exactly one holds the Lease; the other knows it and is not ready
    lease = await _holder_becomes(client, set(started), timeout_s=30)
    leader = started[lease["spec"]["holderIdentity"]]
    [follower] = [r for r in started.values() if r is not leader]
    assert lease["spec"]["leaseDurationSeconds"] == LEASE_DURATION_S
    assert await leader.probe("/readyz") == 200
    assert await follower.probe("/readyz") == 503

    first = [f"before-{n}" for n in range(4)]
    await _create(client, first)
    await _all_bound(client, first)

    # a follower called directly decides nothing and writes nothing
    target = await client.get_pod(NS, first[0])
    filtered = await _extender_call(
        demo,
        follower,
        "filter",
        {"Pod": target, "NodeNames": ["gpu-node-1", "gpu-node-2"]},
    )
    assert f"not the leader (leader: {leader.name})" in filtered["Error"]
    bound = await _extender_call(
        demo,
        follower,
        "bind",
        {
            "PodName": first[0],
            "PodNamespace": NS,
            "PodUID": target["metadata"]["uid"],
            "Node": "gpu-node-1",
        },
    )
    assert f"not the leader (leader: {leader.name})" in bound["Error"]

    # the leader dies with pods on their way
    second = [f"during-{n}" for n in range(4)]
    await _create(client, second)
    last_renewal = record_from_lease(await _lease(client))
    await leader.kill()
    before_failover = real.audit_events()
    taken = record_from_lease(
        await _holder_becomes(client, {follower.name}, timeout_s=4 * LEASE_DURATION_S)
    )
    # taken over once the dead leader's term ran out, and not before
    assert taken.transitions == last_renewal.transitions + 1
    assert last_renewal.renew_time is not None and taken.acquire_time is not None
    assert taken.acquire_time - last_renewal.renew_time >= timedelta(seconds=LEASE_DURATION_S)

    third = [f"after-{n}" for n in range(4)]
    await _create(client, third)
    await _all_bound(client, second + third)

    # the follower wrote nothing while it followed: no pod, node, binding or event, and its
    # campaign for the Lease (a create that raced the other replica's) never won
    follower_token = _token_of(follower)
    follower_writes = [
        f"{e['verb']} {e['requestURI']} -> {_code(e)}"
        for e in before_failover
        if e["verb"] in WRITES
        and _credential(e) == follower_token
        and (_code(e) < 300 or "/leases" not in e["requestURI"])
    ]
    assert follower_writes == []

    # every pod bound exactly once, where its allocation says, and by the leader of the time
    bindings: Counter[str] = Counter()
    binders: dict[str, set[str]] = {}
    for event in real.audit_events():
        uri = event["requestURI"]
        if event["verb"] == "create" and uri.endswith("/binding") and _code(event) == 201:
            name = uri.split("/")[-2]
            bindings[name] += 1
            binders.setdefault(name, set()).add(_credential(event))
    assert bindings == Counter({name: 1 for name in first + second + third})
    assert all(binders[name] == {_token_of(leader)} for name in first)
    assert all(binders[name] == {follower_token} for name in third)
    for name in first + second + third:
        current = await client.get_pod(NS, name)
        annotations = current["metadata"]["annotations"]
        assert annotations[KEY_VGPU_NODE] == current["spec"]["nodeName"]
        assert annotations[KEY_NVIDIA_ALLOCATED].split(",")[2] == "3000"


async def test_as_the_chart_runs_it_the_extender_leads_while_the_kube_scheduler_beside_it_does(
    kubernetes: BuiltBinaries,
) -> None:
    """The chart's own layout: kube-scheduler campaigns for the Lease its configuration names,
    under the scheduler's ServiceAccount, and the extender started with the chart's flags
    follows it: it leads while the holder is `<its pod's name>_<uuid>` (a pod's hostname is
    its name; here both run on this machine, whose hostname stands for the pod's name)."""
    rendered = render_chart()
    config_map = next(o for o in rendered if o["metadata"]["name"].endswith("-newversion"))
    election = yaml.safe_load(config_map["data"]["config.yaml"])["leaderElection"]
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    [extender] = [
        c
        for c in deployment["spec"]["template"]["spec"]["containers"]
        if c["name"] == "vgpu-scheduler-extender"
    ]
    flags = [arg for arg in extender["command"] if arg.startswith("--leader-elect")]
    assert "--leader-elect" in flags
    pod_name = socket.gethostname()
    port = free_port()
    async with DemoCluster(
        DemoSettings(nodes=1, gpus=2),
        kubernetes=kubernetes,
        extender_url=f"https://127.0.0.1:{port}",
        kube_scheduler_election=election,
    ) as demo:
        replica = await scheduler_replica(demo, pod_name, *flags, port=port)
        try:
            await replica.start()
            await _create(demo.client, ["trainer"])
            await _all_bound(demo.client, ["trainer"])
        finally:
            await replica.stop()
        lease = await demo.client.get(LEASES, election["resourceName"], COMPONENT_NAMESPACE)
        assert lease["spec"]["holderIdentity"].startswith(f"{pod_name}_")
        assert demo.real is not None
        refused = demo.real.refused_requests({SCHEDULER_USER})
        assert refused == [], "the scheduler pod was refused:\n" + "\n".join(refused)
