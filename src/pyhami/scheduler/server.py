"""The HTTP surface: extender verbs, webhook, health, explanations, metrics.

Handlers only decode, call the service and encode. Every failure becomes the answer the
spec gives for it (`{"Error": …}` with HTTP 200 for extender verbs, an AdmissionReview for
the webhook); nothing a client sends can crash the process or drop the connection.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pyhami.scheduler.admission import (
    MAX_ADMISSION_BODY,
    AdmissionDecodeError,
    AdmissionRequest,
    AdmissionResponse,
)
from pyhami.scheduler.extender import (
    MAX_EXTENDER_BODY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderDecodeError,
    ExtenderFilterResult,
    PodRef,
)
from pyhami.scheduler.metrics import SchedulerMetrics

log = structlog.get_logger(__name__)

JsonObject = dict[str, Any]


class ExtenderService(Protocol):
    """What the routes need from the scheduler."""

    async def filter(self, args: ExtenderArgs) -> ExtenderFilterResult: ...

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult: ...

    def explain(self, pod: PodRef) -> JsonObject | None: ...

    def readiness(self) -> tuple[bool, str]: ...


class Admission(Protocol):
    def review(self, request: AdmissionRequest) -> AdmissionResponse: ...

    def review_ownership(self, request: AdmissionRequest) -> AdmissionResponse: ...


Decide = Callable[[AdmissionRequest], AdmissionResponse]


def _json(body: JsonObject, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


async def _read_limited(request: web.Request, limit: int) -> bytes:
    """The body, or limit+1 bytes when it is longer (the decoder then says so)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)


def build_app(
    service: ExtenderService,
    admission: Admission,
    metrics: SchedulerMetrics,
    *,
    metrics_route: bool = False,
) -> web.Application:
    """The main server's routes (and `/metrics` too when asked, e.g. for a single-port demo)."""

    async def filter_route(request: web.Request) -> web.Response:
        body = await _read_limited(request, MAX_EXTENDER_BODY)
        try:
            args = ExtenderArgs.from_json(body)
        except ExtenderDecodeError as err:
            metrics.decisions.labels(verb="filter", outcome="bad-request").inc()
            return _json(ExtenderFilterResult.failure(str(err)).to_json())
        if args.pod is None:
            metrics.decisions.labels(verb="filter", outcome="bad-request").inc()
            return _json(ExtenderFilterResult.failure("extender args missing pod").to_json())
        path = "simulation" if args.nodes is not None else "live"
        with metrics.filter_seconds.labels(path=path).time():
            try:
                result = await service.filter(args)
            except Exception as err:  # our bug must still be an answer, not a dropped socket
                log.exception("filter failed")
                result = ExtenderFilterResult.failure(f"internal error: {err}")
        return _json(result.to_json())

    async def bind_route(request: web.Request) -> web.Response:
        body = await _read_limited(request, MAX_EXTENDER_BODY)
        try:
            args = ExtenderBindingArgs.from_json(body)
        except ExtenderDecodeError as err:
            metrics.decisions.labels(verb="bind", outcome="bad-request").inc()
            return _json(ExtenderBindingResult(str(err)).to_json())
        with metrics.bind_seconds.time():
            try:
                result = await service.bind(args)
            except Exception as err:
                log.exception("bind failed")
                result = ExtenderBindingResult(f"internal error: {err}")
        return _json(result.to_json())

    def admission_route(decide: Decide) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def route(request: web.Request) -> web.Response:
            body = await _read_limited(request, MAX_ADMISSION_BODY)
            try:
                review = AdmissionRequest.from_http(body, request.content_type)
            except AdmissionDecodeError as err:
                return _json(AdmissionResponse.errored(err.code, str(err)).to_bare_review())
            try:
                response = decide(review)
            except Exception as err:
                log.exception("admission failed", path=request.path)
                response = AdmissionResponse.errored(500, f"internal error: {err}")
            return _json(response.to_review(review))

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
            return _json({"error": str(err)}, status=400)
        found = service.explain(ref)
        if found is None:
            return _json({"error": f"no decision recorded for pod {ref}"}, status=404)
        return _json(found)

    app = web.Application(client_max_size=MAX_ADMISSION_BODY + 1)
    app.router.add_post("/filter", filter_route)
    app.router.add_post("/bind", bind_route)
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
    """The metrics server: only `/metrics`, plain HTTP (scheduler.md §1.5)."""
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(metrics))
    return app
