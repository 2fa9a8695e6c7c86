"""KubeSchedulerHarness against a tiny extender, over real sockets (HTTP and HTTPS)."""

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pyhami.kube import EVENTS, NODES, KubeClient
from pyhami.kube.views import read_pod
from pyhami.testing import ExtenderConfig, FakeKubeAPIServer, KubeSchedulerHarness
from pyhami.testing.certs import write_serving_certificate
from pyhami.testing.scheduler_harness import (
    HAMI_NVIDIA_RESOURCES,
    ManagedResource,
    Result,
)
from pyhami.testing.scheduler_harness.predicates import quantity

from .builders import node, pod
from .extender import TinyExtender


@pytest.fixture
async def kube(apiserver: FakeKubeAPIServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(apiserver.configuration(), timeout_s=5) as client:
        yield client


@pytest.fixture
async def extender(kube: KubeClient) -> AsyncIterator[TinyExtender]:
    async def bind(namespace: str, name: str, node_name: str, uid: str) -> None:
        await kube.bind_pod(namespace, name, node_name, uid=uid)

    tiny = TinyExtender(bind)
    await tiny.start()
    yield tiny
    await tiny.stop()


async def add_nodes(kube: KubeClient, tiny: TinyExtender, **gpu: bool) -> None:
    for name, has_gpu in gpu.items():
        await kube.create(NODES, node(name))
        tiny.node_labels[name] = {"gpu": "yes" if has_gpu else "no"}


def harness(kube: KubeClient, config: ExtenderConfig | None) -> KubeSchedulerHarness:
    return KubeSchedulerHarness(kube, config, backoff_initial_s=0.02, backoff_max_s=0.1)


async def test_gpu_pod_goes_through_filter_and_extender_bind(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await add_nodes(kube, extender, n1=False, n2=True)
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        outcome = await h.wait_for("default", "p")
    assert outcome.node == "n2" and outcome.extender_called
    assert outcome.failed_nodes == {"n1": "no gpu here"}
    call = extender.filter_calls[0]
    assert set(call) == {"Pod", "Nodes", "NodeNames"}
    assert call["Nodes"] is None and call["NodeNames"] == ["n1", "n2"]
    assert call["Pod"]["metadata"]["name"] == "p"
    bind = extender.bind_calls[0]
    assert bind == {"PodName": "p", "PodNamespace": "default", "PodUID": outcome.uid, "Node": "n2"}
    assert (await kube.get_pod("default", "p"))["spec"]["nodeName"] == "n2"


async def test_pod_without_managed_resources_skips_the_extender(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await add_nodes(kube, extender, n1=False)
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await kube.create_pod("default", pod("plain", scheduler="hami-scheduler"))
        outcome = await h.wait_for("default", "plain")
    assert outcome.node == "n1" and not outcome.extender_called
    assert extender.filter_calls == [] and extender.bind_calls == []


async def test_other_schedulers_pods_are_left_alone(
    kube: KubeClient, extender: TinyExtender, apiserver: FakeKubeAPIServer
) -> None:
    await add_nodes(kube, extender, n1=True)
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await kube.create_pod("default", pod("theirs", gpus=1))
        await kube.create_pod("default", pod("ours", scheduler="hami-scheduler", gpus=1))
        await h.wait_for("default", "ours")
        assert h.outcomes_for("default", "theirs") == []
    assert not apiserver.store.get("pods", "default", "theirs").fields["spec.nodeName"]


async def test_unschedulable_then_retried_when_a_node_fits(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await add_nodes(kube, extender, n1=False)
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        failed = await h.wait_for("default", "p", result=Result.UNSCHEDULABLE)
        assert failed.error == "0/1 nodes are available: 1 no gpu here."
        pending = await kube.get_pod("default", "p")
        [condition] = pending["status"]["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        )
        extender.node_labels["n1"] = {"gpu": "yes"}
        bound = await h.wait_for("default", "p")
        assert bound.attempt > failed.attempt
    bound_pod = await kube.get_pod("default", "p")
    assert [(c["type"], c["status"]) for c in bound_pod["status"]["conditions"]] == [
        ("PodScheduled", "True")
    ]
    events = await kube.list(EVENTS, "default")
    reasons = {e["reason"] for e in events.items}
    assert {"FailedScheduling", "Scheduled"} <= reasons


async def test_filter_error_fails_the_attempt_unless_ignorable(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await add_nodes(kube, extender, n1=False)
    extender.filter_error = "scheduler not synced"
    strict = ExtenderConfig.hami_chart(extender.url)
    async with harness(kube, strict) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        outcome = await h.wait_for("default", "p", result=Result.FILTER_ERROR)
        assert "scheduler not synced" in outcome.error
    lenient = ExtenderConfig(
        url_prefix=extender.url,
        filter_verb="filter",
        node_cache_capable=True,
        ignorable=True,
        managed_resources=(ManagedResource("nvidia.com/gpu"),),
    )
    async with harness(kube, lenient) as h:
        outcome = await h.wait_for("default", "p")
        assert outcome.node == "n1"


async def test_http_failure_of_the_extender_is_a_filter_error(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await add_nodes(kube, extender, n1=True)
    extender.filter_status = 500
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        outcome = await h.wait_for("default", "p", result=Result.FILTER_ERROR)
    assert "HTTP 500" in outcome.error


async def test_bind_error_is_retried(kube: KubeClient, extender: TinyExtender) -> None:
    await add_nodes(kube, extender, n1=True)
    extender.bind_errors = 2
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        bound = await h.wait_for("default", "p")
        errors = [o for o in h.outcomes_for("default", "p") if o.result is Result.BIND_ERROR]
    assert len(errors) == 2 and "node lock contention" in errors[0].error
    assert bound.attempt == 3 and len(extender.filter_calls) == 3


async def test_without_bind_verb_the_harness_binds(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await add_nodes(kube, extender, n1=True)
    config = ExtenderConfig(url_prefix=extender.url, filter_verb="filter", node_cache_capable=False)
    async with harness(kube, config) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler"))
        outcome = await h.wait_for("default", "p")
    assert outcome.node == "n1" and extender.bind_calls == []
    call = extender.filter_calls[0]
    assert call["NodeNames"] is None
    assert [n["metadata"]["name"] for n in call["Nodes"]["items"]] == ["n1"]


async def test_own_predicates(kube: KubeClient, extender: TinyExtender) -> None:
    await kube.create(NODES, node("down", ready=False))
    await kube.create(NODES, node("cordoned", unschedulable=True))
    tainted = node("tainted")
    tainted["spec"]["taints"] = [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]
    await kube.create(NODES, tainted)
    not_ignored = ExtenderConfig(
        url_prefix=extender.url,
        node_cache_capable=True,
        managed_resources=(ManagedResource("nvidia.com/gpu", False),),
    )
    async with harness(kube, not_ignored) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        outcome = await h.wait_for("default", "p", result=Result.UNSCHEDULABLE)
    assert outcome.failed_nodes == {
        "down": "node(s) were not ready",
        "cordoned": "node(s) were unschedulable",
        "tainted": "node(s) had untolerated taint {gpu: busy}",
    }
    assert not outcome.extender_called  # no node survived kube-scheduler's own checks


async def test_not_ignored_extended_resource_needs_allocatable(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await kube.create(NODES, node("n1"))
    extender.node_labels["n1"] = {"gpu": "yes"}
    config = ExtenderConfig(
        url_prefix=extender.url,
        node_cache_capable=True,
        managed_resources=(ManagedResource("nvidia.com/gpu", False),),
    )
    async with harness(kube, config) as h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        outcome = await h.wait_for("default", "p", result=Result.UNSCHEDULABLE)
    assert outcome.failed_nodes == {"n1": "Insufficient nvidia.com/gpu"}


async def test_https_extender_with_ca(kube: KubeClient, tmp_path: Path) -> None:
    cert = write_serving_certificate(tmp_path)

    async def bind(namespace: str, name: str, node_name: str, uid: str) -> None:
        await kube.bind_pod(namespace, name, node_name, uid=uid)

    tiny = TinyExtender(bind)
    await tiny.start(cert.server_context())
    try:
        await add_nodes(kube, tiny, n1=True)
        verified = ExtenderConfig.from_kube_scheduler_config(
            {
                "urlPrefix": tiny.url,
                "filterVerb": "filter",
                "bindVerb": "bind",
                "enableHTTPS": True,
                "nodeCacheCapable": True,
                "httpTimeout": "5s",
                "tlsConfig": {"caData": base64.b64encode(cert.ca_pem).decode()},
                "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": True}],
            }
        )
        async with harness(kube, verified) as h:
            await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
            assert (await h.wait_for("default", "p")).node == "n1"
        # filter, then bind, over one kept TLS connection (kube-scheduler's transport does so)
        assert len(tiny.peers) == 2 and len(set(tiny.peers)) == 1, tiny.peers
        wrong_ca = ExtenderConfig(url_prefix=tiny.url, node_cache_capable=True)
        async with harness(kube, wrong_ca) as h:
            await kube.create_pod("default", pod("q", scheduler="hami-scheduler"))
            outcome = await h.wait_for("default", "q", result=Result.FILTER_ERROR)
            assert "CERTIFICATE_VERIFY_FAILED" in outcome.error
    finally:
        await tiny.stop()


async def test_metrics_count_attempts_and_latencies(
    kube: KubeClient, extender: TinyExtender
) -> None:
    await add_nodes(kube, extender, n1=True, n2=True)
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        for i in range(10):
            await kube.create_pod("default", pod(f"p{i}", scheduler="hami-scheduler", gpus=1))
        await h.wait_bound_count(10)
    assert h.metrics.attempts == 10 and h.metrics.results[Result.BOUND] == 10
    assert len(h.metrics.filter_latencies_s) == 10 and len(h.metrics.bind_latencies_s) == 10
    assert 0 < h.metrics.filter_p(0.5) <= h.metrics.filter_p(0.99)


def test_config_parsing() -> None:
    chart = ExtenderConfig.hami_chart("https://127.0.0.1:443")
    assert chart.tls_insecure and chart.node_cache_capable and chart.bind_verb == "bind"
    assert [r.name for r in chart.managed_resources] == list(HAMI_NVIDIA_RESOURCES)
    assert chart.interested_in(read_pod(pod("x", gpus=1)))
    assert not chart.interested_in(read_pod(pod("y")))
    with pytest.raises(ValueError, match="urlPrefix"):
        ExtenderConfig(url_prefix="127.0.0.1:443")


async def test_many_pods_at_once_are_each_bound_once(
    kube: KubeClient, extender: TinyExtender, apiserver: FakeKubeAPIServer
) -> None:
    await add_nodes(kube, extender, **{f"n{i:02d}": True for i in range(20)})
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await asyncio.gather(
            *(
                kube.create_pod("default", pod(f"p{i:03d}", scheduler="hami-scheduler", gpus=1))
                for i in range(200)
            )
        )
        await h.wait_bound_count(200, timeout_s=60)
    bound = [o for o in h.outcomes if o.result is Result.BOUND]
    assert len({(o.namespace, o.name) for o in bound}) == 200 == len(bound)
    assert all(p.fields["spec.nodeName"] for p in apiserver.store.matching("pods"))
    assert len(extender.bind_calls) == 200


async def test_deleted_pod_is_not_scheduled(kube: KubeClient, extender: TinyExtender) -> None:
    await add_nodes(kube, extender, n1=False)
    async with harness(kube, ExtenderConfig.hami_chart(extender.url)) as h:
        await kube.create_pod("default", pod("gone", scheduler="hami-scheduler", gpus=1))
        await h.wait_for("default", "gone", result=Result.UNSCHEDULABLE)
        await kube.delete_pod("default", "gone")
        # Only once the harness has seen the delete and ended any cycle it had for the pod
        # does a node fit; otherwise a retry already under way could take it.
        async with asyncio.timeout(10):
            while h.pods.get("gone", "default") is not None or h.is_pending("default", "gone"):
                await asyncio.sleep(0.01)
        extender.node_labels["n1"] = {"gpu": "yes"}
        await kube.create_pod("default", pod("next", scheduler="hami-scheduler", gpus=1))
        await h.wait_for("default", "next")
        assert all(o.result is Result.UNSCHEDULABLE for o in h.outcomes_for("default", "gone"))


async def test_http_timeout_fails_a_slow_filter(kube: KubeClient) -> None:
    from aiohttp import web

    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({"NodeNames": ["n1"], "Error": ""})

    app = web.Application()
    app.router.add_post("/filter", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        await kube.create(NODES, node("n1"))
        config = ExtenderConfig(
            url_prefix=f"http://127.0.0.1:{runner.addresses[0][1]}",
            node_cache_capable=True,
            http_timeout_s=0.2,
        )
        async with harness(kube, config) as h:
            await kube.create_pod("default", pod("p", scheduler="hami-scheduler"))
            outcome = await h.wait_for("default", "p", result=Result.FILTER_ERROR)
        assert "Timeout" in outcome.error
    finally:
        await runner.cleanup()


CHART_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: hami-scheduler
extenders:
- urlPrefix: "{url}"
  filterVerb: filter
  bindVerb: bind
  preemptVerb: preempt
  nodeCacheCapable: true
  weight: 1
  httpTimeout: 30s
  enableHTTPS: false
  managedResources:
  - name: nvidia.com/gpu
    ignoredByScheduler: true
  - name: nvidia.com/gpumem
    ignoredByScheduler: true
  - name: nvidia.com/gpucores
    ignoredByScheduler: true
  - name: nvidia.com/gpumem-percentage
    ignoredByScheduler: true
  - name: nvidia.com/priority
    ignoredByScheduler: true
"""


async def test_harness_from_the_charts_scheduler_configuration(
    kube: KubeClient, extender: TinyExtender
) -> None:
    import yaml

    await add_nodes(kube, extender, n1=True)
    document = yaml.safe_load(CHART_CONFIG.replace("{url}", extender.url))
    h = KubeSchedulerHarness.from_configuration(
        kube, document, backoff_initial_s=0.02, backoff_max_s=0.1
    )
    assert h.scheduler_name == "hami-scheduler"
    assert h.extender == ExtenderConfig.hami_chart(extender.url)
    async with h:
        await kube.create_pod("default", pod("p", scheduler="hami-scheduler", gpus=1))
        assert (await h.wait_for("default", "p")).node == "n1"
    with pytest.raises(ValueError, match="KubeSchedulerConfiguration"):
        KubeSchedulerHarness.from_configuration(kube, {"kind": "Policy"})


def test_quantities_are_read_in_every_form_kube_apiserver_stores() -> None:
    """(a CPU request of 500m once read as nothing, an exa-suffixed one as well)"""
    assert quantity("500m") == 0.5
    assert quantity("4k") == quantity("4e3") == 4000
    assert quantity("1E") == 10**18
    assert quantity("1536Mi") == 1536 * 2**20
