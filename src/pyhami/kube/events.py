"""Kubernetes Events on pods, written in the background by `EventRecorder`.

A slow or failing Events API never delays or fails a scheduling answer. Failures are logged;
`drain` waits for what is in flight (tests, shutdown).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable

import structlog

from pyhami.kube.client import JsonObject
from pyhami.kube.clock import Clock
from pyhami.model import PodView

log = structlog.get_logger(__name__)

CreateEvent = Callable[[str, JsonObject], Awaitable[object]]


class EventRecorder:
    """Writes core/v1 Events about pods through `create(namespace, body)`."""

    def __init__(self, create: CreateEvent, component: str, clock: Clock) -> None:
        self._create = create
        self.component = component or "pyhami-scheduler"
        self._clock = clock
        self._inflight: set[asyncio.Task[None]] = set()

    def body(self, pod: PodView, kind: str, reason: str, message: str) -> JsonObject:
        name, namespace = pod.name, pod.namespace
        stamp = self._clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "namespace": namespace,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component},
            "reportingComponent": self.component,
        }

    def emit(self, pod: PodView, kind: str, reason: str, message: str) -> None:
        body = self.body(pod, kind, reason, message)
        task = asyncio.create_task(self._send(body), name=f"event {reason}")
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _send(self, body: JsonObject) -> None:
        try:
            await self._create(body["metadata"]["namespace"], body)
        except Exception as err:
            log.warning("event not written", reason=body["reason"], error=str(err))

    async def drain(self) -> None:
        while self._inflight:
            await asyncio.gather(*list(self._inflight))
