"""Any body on any route of the scheduler's main port gets the route's JSON answer, never a
plain-text 500: not JSON, nested 200,000 deep, larger than the limit, the wrong content type,
the wrong shape, the wrong method, no such route.

The routes run with the real service, admission and connection guard on a loopback port
served from a thread, and hypothesis sends the requests with a plain blocking client."""

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import EngineConfig
from pyhami.kube import NodeLocker
from pyhami.kube.extender_wire import MAX_EXTENDER_BODY
from pyhami.kube.scheduler_pods import SchedulerPods
from pyhami.kube.views import read_node, read_pod
from pyhami.scheduler.events import EventRecorder
from pyhami.scheduler.metrics import MetricsSnapshot, SchedulerMetrics
from pyhami.scheduler.ownership import OWNED_ANNOTATIONS
from pyhami.scheduler.server import build_app
from pyhami.scheduler.service import FilterBind
from pyhami.scheduler.state import ClusterState
from pyhami.scheduler.webhook import PodAdmission, WebhookConfig
from pyhami.serving import ConnectionGuard, ConnectionLimits
from pyhami.testing import ManualClock

from .builders import card, gpu_pod, inventory, node
from .memory_kube import MemoryKube

ENGINE_CONFIG = EngineConfig(vendor=NvidiaVendor())

NOW = datetime(2026, 8, 21, 12, 0, 0, tzinfo=UTC)
JSON_ROUTES = ("/filter", "/bind", "/webhook", "/webhook/ownership", "/explain", "/nowhere")
ROUTES = (*JSON_ROUTES, "/healthz", "/readyz")


def _app() -> web.Application:
    inventories = {"n1": inventory(card("GPU-1a", 0), card("GPU-1b", 1))}
    state = ClusterState(ENGINE_CONFIG, lambda n: inventories.get(n.name))
    state.on_node(read_node(node("n1")))
    state.on_pod(read_pod(gpu_pod("p", mem=1000)))
    kube = MemoryKube()
    metrics = SchedulerMetrics(MetricsSnapshot)
    clock = ManualClock(NOW)
    service = FilterBind(
        state,
        SchedulerPods(kube),
        NodeLocker(kube, clock=clock),
        EventRecorder(kube.create_event, "hami-scheduler", clock),
        metrics,
        clock=clock,
        owned_annotations=OWNED_ANNOTATIONS,
    )
    service.synced.set()
    admission = PodAdmission(
        WebhookConfig(scheduler_name="hami-scheduler", owned_annotations=OWNED_ANNOTATIONS),
        NvidiaConfig(),
        state.exceeds_quota,
    )
    return build_app(service, admission, metrics, body_timeout_s=5.0)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    loop = asyncio.new_event_loop()
    ready: list[int] = []
    started = threading.Event()

    guard = ConnectionGuard(ConnectionLimits())

    async def serve() -> None:
        ready.append(await guard.serve(_app(), "127.0.0.1", 0, None))

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="fuzz-server", daemon=True)
    thread.start()
    assert started.wait(30)
    yield ready[0]

    asyncio.run_coroutine_threadsafe(guard.close(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)
    loop.close()


def _request(port: int, method: str, path: str, body: bytes, content_type: str) -> tuple:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def _check(status: int, content_type: str, body: bytes, path: str) -> None:
    route = path.split("?", maxsplit=1)[0]
    if route in JSON_ROUTES or status >= 500:
        assert content_type.startswith("application/json"), (status, content_type, body[:200])
        assert status != 500 or b"internal error" in body
        answer = json.loads(body)
        assert isinstance(answer, dict)
        if route in ("/filter", "/bind"):
            assert isinstance(answer["Error"], str)
        elif route.startswith("/webhook"):  # a review, bare when the body was not one
            assert isinstance(answer["response"]["allowed"], bool)
        elif status >= 400:
            assert isinstance(answer["error"], str) and answer["error"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)
field_names = st.sampled_from(
    [
        "Pod",
        "pod",
        "NodeNames",
        "Nodes",
        "PodName",
        "PodNamespace",
        "PodUID",
        "Node",
        "request",
        "apiVersion",
        "kind",
        "metadata",
        "spec",
        "uid",
        "name",
        "namespace",
        "object",
    ]
)
shaped = st.recursive(
    json_values,
    lambda inner: st.dictionaries(field_names, inner, max_size=5),
    max_leaves=25,
)
# Large bodies are drawn as a recipe and built in the test (hypothesis prints what it draws).
RECIPES = {
    "brackets": lambda n: b"[" * n,
    "open objects": lambda n: b'{"a":' * n,
    "padded": lambda n: b" " * (MAX_EXTENDER_BODY + n) + b"{}",
}
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    shaped.map(lambda v: json.dumps(v).encode()),
    st.tuples(st.sampled_from(sorted(RECIPES)), st.integers(1, 200_000)),
    st.just(json.dumps({"Pod": gpu_pod("p"), "NodeNames": ["n1", 5]}).encode()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    route=st.sampled_from(ROUTES),
    query=st.sampled_from(["", "?pod=default/p", "?pod=%00", "?pod=a/b/c"]),
    method=st.sampled_from(["POST", "POST", "GET", "PUT"]),
    content_type=st.sampled_from(
        ["application/json", "application/json; charset=utf-8", "text/plain", ""]
    ),
    body=bodies,
)
def test_every_route_answers_every_body_in_its_json_shape(
    port: int,
    route: str,
    query: str,
    method: str,
    content_type: str,
    body: bytes | tuple[str, int],
) -> None:
    if isinstance(body, tuple):
        recipe, size = body
        body = RECIPES[recipe](size)
    status, answer_type, answer = _request(port, method, route + query, body, content_type)
    _check(status, answer_type, answer, route)


@pytest.mark.parametrize("route", ROUTES)
def test_two_hundred_thousand_brackets_are_a_json_error(port: int, route: str) -> None:
    status, answer_type, answer = _request(port, "POST", route, b"[" * 200_000, "application/json")
    _check(status, answer_type, answer, route)
    if route in ("/filter", "/bind"):
        assert status == 200 and "nested too deeply" in json.loads(answer)["Error"]
    if route.startswith("/webhook"):
        assert "nested too deeply" in json.loads(answer)["response"]["status"]["message"]


def test_the_wrong_content_type_is_named(port: int) -> None:
    body = json.dumps({"Pod": gpu_pod("p"), "NodeNames": ["n1"]}).encode()
    status, _, answer = _request(port, "POST", "/filter", body, "text/plain")
    assert status == 200
    assert "content type text/plain is not application/json" in json.loads(answer)["Error"]
    status, _, answer = _request(port, "GET", "/filter", b"", "")
    assert status == 405 and json.loads(answer)["Error"]
