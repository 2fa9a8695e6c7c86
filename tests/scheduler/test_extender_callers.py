"""Who may call the extender, and what a call may touch, over real sockets.

/filter, /bind, /preempt and /explain answer only callers with a client certificate from the
extender's client CA (kube-scheduler's); kube-apiserver reaches /webhook and the kubelet
/healthz with none. A caller that does get through still cannot make /filter decide for a pod
it describes itself, nor /bind undo a charge this scheduler did not make for that bind.
"""

import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pyhami.kube.extender_wire import SentPod
from pyhami.model import NodeName
from pyhami.protocol import KEY_BIND_PHASE, KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE
from pyhami.scheduler.eviction import Nomination
from pyhami.scheduler.settings import SchedulerSettings, SettingsError
from pyhami.testing.certs import write_serving_certificate
from pyhami.testing.scheduler_harness import Result

from .builders import card as gpu
from .cluster import (
    Cluster,
    DevicePluginDouble,
    node_object,
    pod_object,
    running_cluster,
    wait_for,
)


def _session(cluster: Cluster, certificate: Any = None) -> aiohttp.ClientSession:
    context = ssl.create_default_context(cadata=cluster.ca.decode())
    if certificate is not None:
        certificate.load_into(context)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))


async def _call(
    http: aiohttp.ClientSession, method: str, url: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, url, json=body) as response:
        assert response.content_type == "application/json", await response.text()
        return response.status, await response.json()


async def test_extender_routes_refuse_callers_without_a_client_certificate(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        await cluster.add_nodes(node_object("n1", [gpu("GPU-a", 0)]))
        process = await cluster.scheduler()
        await wait_for(process.synced.is_set, what="caches synced")
        pod = await cluster.create_pod(pod_object("p", mem=1000))
        uid = pod["metadata"]["uid"]
        base = f"https://127.0.0.1:{process.main_port}"
        async with _session(cluster) as anonymous:
            status, answer = await _call(
                anonymous, "POST", f"{base}/filter", {"Pod": pod, "NodeNames": ["n1"]}
            )
            assert status == 401 and "needs a client certificate" in answer["Error"]
            assert set(answer) >= {"NodeNames", "FailedNodes", "Error"}
            bind = {"PodName": "p", "PodNamespace": "default", "PodUID": uid, "Node": "n1"}
            status, answer = await _call(anonymous, "POST", f"{base}/bind", bind)
            assert status == 401 and answer == {"Error": answer["Error"]} and answer["Error"]
            status, answer = await _call(anonymous, "GET", f"{base}/explain?pod=default/p")
            assert status == 401 and "needs a client certificate" in answer["error"]
            preempt = {"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "x"}]}}}
            status, answer = await _call(anonymous, "POST", f"{base}/preempt", preempt)
            assert status == 401 and "needs a client certificate" in answer["error"]
            # kube-apiserver and the kubelet need none.
            status, review = await _call(anonymous, "POST", f"{base}/webhook", {})
            assert status == 200 and review["response"]["allowed"] is False
            async with anonymous.get(f"{base}/healthz") as health:
                assert health.status == 200
        assert process.state.ledger.pod(uid) is None
        stored = cluster.api.store.get("pods", "default", "p").body
        assert KEY_VGPU_NODE not in (stored["metadata"].get("annotations") or {})
        # kube-scheduler's certificate (CN=kube-scheduler; any name the CA signed would do).
        answer = await cluster.post(process, "/filter", {"Pod": pod, "NodeNames": ["n1"]})
        assert answer["NodeNames"] == ["n1"] and answer["Error"] == ""
        # the pod fits: nothing to evict for it, and kube-scheduler's proposal stands
        proposal = {"Pods": [{"UID": "u-x"}], "NumPDBViolations": 0}
        answer = await cluster.post(
            process, "/preempt", {"Pod": pod, "NodeNameToMetaVictims": {"n1": proposal}}
        )
        assert answer == {"NodeNameToMetaVictims": {"n1": proposal}}
        registry = process.metrics.registry
        counted = {"path": "extender", "outcome": "kept"}
        assert registry.get_sample_value("pyhami_scheduler_preemption_attempts_total", counted) == 1
        # while the scheduler's own preemption evicts for the pod, kube-scheduler gets no node
        process.evicting.nominations[uid] = Nomination(
            NodeName("n1"), ("default/x",), datetime.now(UTC) + timedelta(minutes=1)
        )
        answer = await cluster.post(
            process, "/preempt", {"Pod": pod, "NodeNameToMetaVictims": {"n1": proposal}}
        )
        assert answer == {"NodeNameToMetaVictims": {}}


async def test_a_certificate_from_another_ca_fails_the_handshake(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        process = await cluster.scheduler()
        other = tmp_path / "other"
        other.mkdir()
        stranger = write_serving_certificate(other).client_certificate("kube-scheduler")
        async with _session(cluster, stranger) as http:
            with pytest.raises(aiohttp.ClientError):
                await _call(
                    http, "POST", f"https://127.0.0.1:{process.main_port}/bind", {"PodName": "p"}
                )


def test_a_port_beyond_loopback_needs_a_client_ca_or_an_explicit_opt_out(tmp_path: Path) -> None:
    base: dict[str, Any] = {"device_config_file": "x.yaml", "http_bind": "0.0.0.0:8443"}
    with pytest.raises(SettingsError, match="--extender-client-ca FILE"):
        SchedulerSettings(**base, cert_file="tls.crt", key_file="tls.key")
    SchedulerSettings(**base, extender_allow_any_caller=True)
    SchedulerSettings(**base, cert_file="c", key_file="k", extender_client_ca="ca.crt")
    SchedulerSettings(device_config_file="x.yaml", http_bind="127.0.0.1:8080")  # the pod only
    with pytest.raises(SettingsError, match="needs --cert_file"):
        SchedulerSettings(**base, extender_client_ca="ca.crt")


async def test_a_lagging_kube_scheduler_cannot_unbind_what_it_just_bound(tmp_path: Path) -> None:
    """kube-scheduler's cache still shows a pod unbound after its binding and filters it
    again: the filter is refused, and no failed bind strips the bound pod or frees its cards."""
    async with running_cluster(tmp_path) as cluster:
        await cluster.add_nodes(node_object("n1", [gpu("GPU-a", 0), gpu("GPU-b", 1)]))
        process = await cluster.scheduler()
        await wait_for(process.synced.is_set, what="caches synced")
        cluster.register_webhook(process)
        plugin = DevicePluginDouble(cluster)
        plugin.start()
        harness = cluster.harness(process.main_port)
        try:
            async with harness:
                unbound = await cluster.create_pod(pod_object("p", mem=3000, cores=None))
                assert (await harness.wait_for("default", "p")).node == "n1"
                await wait_for(
                    lambda: _notes(cluster, "p").get(KEY_BIND_PHASE) == "success",
                    what="the device plugin's success",
                )
                bound = _notes(cluster, "p")
                again = await harness.schedule_again(SentPod.read(unbound))
        finally:
            await plugin.stop()
        # Before: the refiltered pod's bind got 409 and its failure path stripped the running
        # pod's allocation record and gave its cards back.
        assert KEY_NVIDIA_ALLOCATED in bound
        assert _notes(cluster, "p") == bound
        charged = process.state.ledger.pod(unbound["metadata"]["uid"])
        assert charged is not None and charged.node == "n1"
        assert again.result is Result.FILTER_ERROR
        assert "already bound to n1" in again.error


def _notes(cluster: Cluster, name: str) -> dict[str, str]:
    stored = cluster.api.store.get("pods", "default", name).body
    return dict(stored["metadata"].get("annotations") or {})
