"""The HTTP surface: extender verbs, webhook, health, explanations, metrics.

Handlers only decode, call the service and encode. Every failure becomes the answer the
spec gives for it (`{"Error": …}` with HTTP 200 for extender verbs, an AdmissionReview for
the webhook); nothing a client sends can crash the process or drop the connection. Whatever
goes wrong elsewhere (no such route, a body too slow, an unexpected exception, a caller
refused) is answered in the same JSON shape of the route asked for, with the HTTP status
that says what it was (`error_answer`); never a plain-text page.

Callers: with `require_client_certificate`, `/filter`, `/bind` and `/explain` (which shows
every recent decision) answer 401 to a connection that presented no client certificate; any
certificate presented was already checked against the client-CA bundle during the TLS
handshake (tls.py). `/webhook*` is kube-apiserver's and `/healthz`, `/readyz` the kubelet's:
they need none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pyhami.kube.admission_review import (
    MAX_ADMISSION_BODY,
    AdmissionDecodeError,
    AdmissionRequest,
    AdmissionResponse,
)
from pyhami.kube.extender_wire import (
    MAX_EXTENDER_BODY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderDecodeError,
    ExtenderFilterResult,
    compact_json,
)
from pyhami.scheduler.explain_wire import encode_explanation
from pyhami.scheduler.explanations import Explanation, PodRef, PreemptionExplanation
from pyhami.scheduler.metrics import SchedulerMetrics
from pyhami.scheduler.webhook import PodAdmission
from pyhami.serving import BodyTimeoutError, Handler, read_body

log = structlog.get_logger(__name__)


class ExtenderService(Protocol):
    """What the routes need from the scheduler."""

    async def filter(self, args: ExtenderArgs) -> ExtenderFilterResult: ...

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult: ...

    def explain(self, pod: PodRef) -> Explanation | None: ...

    def readiness(self) -> tuple[bool, str]: ...


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


# Routes that only kube-scheduler (or an operator's tool with a client certificate) may call.
CALLER_ROUTES = frozenset({"/filter", "/bind", "/preempt", "/explain"})
JSON_CONTENT_TYPE = "application/json"


def error_answer(path: str, status: int, message: str) -> web.Response:
    """A failure in the JSON shape the route at `path` answers with."""
    if path == "/filter":
        body = ExtenderFilterResult(error=message).encode()
    elif path == "/bind":
        body = ExtenderBindingResult(message).encode()
    elif path.startswith("/webhook"):
        body = AdmissionResponse.errored(status, message).encode_bare_review()
    else:
        body = compact_json({"error": message})
    return _json(body, status)


def _presented_certificate(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and bool(transport.get_extra_info("peercert"))


def _middlewares(require_client_certificate: bool) -> list[Any]:
    @web.middleware
    async def answer_in_json(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except BodyTimeoutError as err:
            response = error_answer(request.path, 408, str(err))
            response.force_close()
            return response
        except web.HTTPException as err:  # aiohttp's own: no route (404), wrong method (405)
            return error_answer(request.path, err.status, f"{err.reason}: {request.path}")
        except Exception as err:
            log.exception("request failed", path=request.path)
            return error_answer(request.path, 500, f"internal error: {err}")

    @web.middleware
    async def known_callers(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in CALLER_ROUTES and not _presented_certificate(request):
            log.warning("caller refused: no client certificate", path=request.path)
            return error_answer(
                request.path,
                401,
                f"{request.path} needs a client certificate signed by the extender's client "
                "CA (kube-scheduler's tlsConfig certFile/keyFile)",
            )
        return await handler(request)

    return [answer_in_json, known_callers] if require_client_certificate else [answer_in_json]


def _check_content_type(request: web.Request, what: str) -> None:
    if request.content_type != JSON_CONTENT_TYPE:
        message = f"{what}: content type {request.content_type} is not {JSON_CONTENT_TYPE}"
        raise ExtenderDecodeError(message)


def build_app(
    service: ExtenderService,
    admission: PodAdmission,
    metrics: SchedulerMetrics,
    *,
    metrics_route: bool = False,
    require_client_certificate: bool = False,
    body_timeout_s: float = 10.0,
    preempt: Callable[[web.Request], Awaitable[web.Response]] | None = None,
    preemption_of: Callable[[str], PreemptionExplanation | None] = lambda _pod: None,
) -> web.Application:
    """The main server's routes (and `/metrics` too when asked, e.g. for a single-port demo)."""

    async def filter_route(request: web.Request) -> web.Response:
        body = await read_body(request, MAX_EXTENDER_BODY, body_timeout_s)
        try:
            _check_content_type(request, "ExtenderArgs")
            args = ExtenderArgs.from_json(body)
        except ExtenderDecodeError as err:
            metrics.decisions.labels(verb="filter", outcome="bad-request").inc()
            return _json(ExtenderFilterResult(error=str(err)).encode())
        path = "simulation" if args.nodes is not None else "live"
        with metrics.filter_seconds.labels(path=path).time():
            try:
                result = await service.filter(args)
            except Exception as err:  # our bug must still be an answer, not a dropped socket
                log.exception("filter failed")
                result = ExtenderFilterResult(error=f"internal error: {err}")
        return _json(result.encode())

    async def bind_route(request: web.Request) -> web.Response:
        body = await read_body(request, MAX_EXTENDER_BODY, body_timeout_s)
        try:
            _check_content_type(request, "ExtenderBindingArgs")
            args = ExtenderBindingArgs.from_json(body)
        except ExtenderDecodeError as err:
            metrics.decisions.labels(verb="bind", outcome="bad-request").inc()
            return _json(ExtenderBindingResult(str(err)).encode())
        with metrics.bind_seconds.time():
            try:
                result = await service.bind(args)
            except Exception as err:
                log.exception("bind failed")
                result = ExtenderBindingResult(f"internal error: {err}")
        return _json(result.encode())

    def admission_route(
        decide: Callable[[AdmissionRequest], AdmissionResponse],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def route(request: web.Request) -> web.Response:
            body = await read_body(request, MAX_ADMISSION_BODY, body_timeout_s)
            try:
                review = AdmissionRequest.from_http(body, request.content_type)
            except AdmissionDecodeError as err:
                return _json(AdmissionResponse.errored(err.code, str(err)).encode_bare_review())
            try:
                response = decide(review)
                if response.allowed and response.claim_templates:
                    response = await response.create_claim_templates(admission.ensure_object)
            except Exception as err:
                log.exception("admission failed", path=request.path)
                response = AdmissionResponse.errored(500, f"internal error: {err}")
            return _json(response.encode_review(review))

        return route

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def readyz(_: web.Request) -> web.Response:
        ready, why = service.readiness()
        return web.Response(status=200 if ready else 503, text="" if ready else why)

    async def explain(request: web.Request) -> web.Response:
        try:
            ref = PodRef.parse(request.query.get("pod", ""))
        except ValueError as err:
            return _json(compact_json({"error": str(err)}), status=400)
        found = service.explain(ref)
        if found is None:
            return _json(compact_json({"error": f"no decision recorded for pod {ref}"}), status=404)
        return _json(encode_explanation(found, preemption_of(str(ref))))

    app = web.Application(
        client_max_size=MAX_ADMISSION_BODY + 1,
        middlewares=_middlewares(require_client_certificate),
    )
    app.router.add_post("/filter", filter_route)
    app.router.add_post("/bind", bind_route)
    if preempt is not None:  # kube-scheduler's preemptVerb (scheduler/preemption.py)
        app.router.add_post("/preempt", preempt)
    app.router.add_post("/webhook", admission_route(admission.review))
    app.router.add_post("/webhook/ownership", admission_route(admission.review_ownership))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/explain", explain)
    if metrics_route:
        app.router.add_get("/metrics", metrics_handler(metrics))
    return app


def metrics_handler(metrics: SchedulerMetrics) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handler


def build_metrics_app(metrics: SchedulerMetrics) -> web.Application:
    """The metrics server: only `/metrics`, plain HTTP, as HAMi's."""
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(metrics))
    return app
