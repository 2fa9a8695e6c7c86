"""KubeSchedulerHarness: drives an HTTP(S) scheduler extender the way kube-scheduler does.

It plays the kube-scheduler container of HAMi's chart: it watches unbound pods
whose `schedulerName` is its own, runs a few predicates of its own (Ready condition,
`spec.unschedulable`, NoSchedule/NoExecute taints, nodeSelector, extended resources that are
not `ignoredByScheduler`), then, for pods the extender is interested in (they ask for one of
its `managedResources`, or it manages none), `POST <urlPrefix>/<filterVerb>` with
`ExtenderArgs` — `NodeNames` when `nodeCacheCapable`, the full `Nodes` list otherwise — and
keeps only the nodes it answers with. A filter error fails the attempt unless the extender is
`ignorable`. The binding cycle runs concurrently with the next pod's filter, as in
kube-scheduler: `POST <urlPrefix>/<bindVerb>` with `ExtenderBindingArgs` when the extender
binds, else `pods/binding` directly. Failed attempts are retried with exponential backoff
(kube-scheduler's defaults: 1 s doubling to 10 s). Every attempt is recorded as a
`ScheduleOutcome`; `metrics` keeps counts and latencies.

Not modelled: scoring/prioritize verbs (the first surviving node is taken), preemption, pod
affinity, non-extended resource accounting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import structlog

from pyhami.kube import (
    NODES,
    PODS,
    Clock,
    EventHandlers,
    Informer,
    KubeClient,
    KubeError,
    PatchType,
    SystemClock,
    cancel_and_wait,
    guarded_task,
)
from pyhami.kube.events import EventRecorder
from pyhami.kube.extender_wire import SentPod, go_field
from pyhami.kube.lifecycle import AsyncService
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeView, PodView
from pyhami.testing.scheduler_harness.config import ExtenderConfig
from pyhami.testing.scheduler_harness.outcomes import HarnessMetrics, Result, ScheduleOutcome
from pyhami.testing.scheduler_harness.predicates import (
    NodeFacts,
    is_extended,
    requested,
    unschedulable_message,
)

log = structlog.get_logger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Answer:
    """An extender's answer, decoded as Go's decoder does (a key matches ignoring case)."""

    error: str
    failed: dict[str, str]  # FailedNodes and FailedAndUnresolvableNodes: no preemption here
    node_names: list[str] | None  # the nodes kept; None when the answer's list is no list


def _decode_answer(answer: object, verb: str, node_cache_capable: bool) -> _Answer:
    if not isinstance(answer, dict):
        raise _AttemptFailedError(Result.FILTER_ERROR, f"extender {verb}: answer is not an object")

    def string_map(value: object) -> dict[str, str]:
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    names = go_field(answer, "NodeNames") or []
    if not node_cache_capable:
        nodes = go_field(answer, "Nodes")
        items = (nodes.get("items") if isinstance(nodes, dict) else None) or []
        names = [i.get("metadata", {}).get("name") for i in items if isinstance(i, dict)]
    return _Answer(
        error=str(go_field(answer, "Error") or ""),
        failed=string_map(go_field(answer, "FailedNodes"))
        | string_map(go_field(answer, "FailedAndUnresolvableNodes")),
        node_names=[n for n in names if isinstance(n, str)] if isinstance(names, list) else None,
    )


@dataclass(slots=True)
class _Attempt:
    """One pod's pass through the scheduling and binding cycles."""

    key: tuple[str, str]
    pod: SentPod
    number: int
    interested: bool  # the extender manages a resource this pod asks for
    extender_called: bool = False
    failed: Mapping[str, str] = field(default_factory=dict)
    filter_s: float = 0.0
    bind_s: float = 0.0

    def outcome(self, result: Result, *, node: str = "", error: str = "") -> ScheduleOutcome:
        return ScheduleOutcome(
            namespace=self.key[0],
            name=self.key[1],
            uid=self.pod.view.uid,
            attempt=self.number,
            result=result,
            node=node,
            failed_nodes=dict(self.failed),
            error=error,
            filter_s=self.filter_s,
            bind_s=self.bind_s,
            extender_called=self.extender_called,
        )


class _AttemptFailedError(Exception):
    def __init__(self, result: Result, error: str, failed: Mapping[str, str] | None = None) -> None:
        super().__init__(error)
        self.result = result
        self.failed = dict(failed or {})


class KubeSchedulerHarness(AsyncService):
    """`async with KubeSchedulerHarness(client, ExtenderConfig.hami_chart(url)) as h:`."""

    def __init__(
        self,
        client: KubeClient,
        extender: ExtenderConfig | None,
        *,
        scheduler_name: str = "hami-scheduler",
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 10.0,
        record_events: bool = True,  # events and the PodScheduled condition
        clock: Clock | None = None,
    ) -> None:
        if not 0 < backoff_initial_s <= backoff_max_s:
            raise ValueError("backoff needs 0 < backoff_initial_s <= backoff_max_s")
        self._client = client
        self.extender = extender
        self.scheduler_name = scheduler_name
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._record_events = record_events
        self._clock: Clock = clock or SystemClock()
        self._events = EventRecorder(client.create_event, scheduler_name, self._clock)
        selector = (
            f"spec.nodeName=,spec.schedulerName={scheduler_name},"
            "status.phase!=Succeeded,status.phase!=Failed"
        )
        self.pods = Informer(
            client,
            PODS,
            field_selector=selector,
            clock=self._clock,
            name=f"harness/{scheduler_name}/pods",
        )
        self.nodes = Informer(
            client, NODES, clock=self._clock, name=f"harness/{scheduler_name}/nodes"
        )
        self._ignored = frozenset(
            r.name
            for r in (extender.managed_resources if extender else ())
            if r.ignored_by_scheduler
        )
        # What the predicates read from each node, parsed once per node event.
        self._node_facts: dict[str, NodeFacts] = {}
        self.outcomes: list[ScheduleOutcome] = []
        self.metrics = HarnessMetrics()
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._pending: set[tuple[str, str]] = set()  # queued, backing off, or binding
        self._attempts: dict[str, int] = {}
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_configuration(
        cls, client: KubeClient, document: object, **options: Any
    ) -> KubeSchedulerHarness:
        """A harness set up from a KubeSchedulerConfiguration (first profile, its extender)."""
        kind = document.get("kind") if isinstance(document, dict) else None
        if not isinstance(document, dict) or kind != "KubeSchedulerConfiguration":
            raise ValueError(f"expected a KubeSchedulerConfiguration, got {kind!r}")
        profiles = document.get("profiles") or [{}]
        extenders = document.get("extenders") or []
        if len(extenders) > 1:
            raise ValueError(
                f"this harness drives one extender, the configuration has {len(extenders)}"
            )
        extender = ExtenderConfig.from_kube_scheduler_config(extenders[0]) if extenders else None
        name = str(profiles[0].get("schedulerName") or "default-scheduler")
        return cls(client, extender, scheduler_name=name, **options)

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        # One TLS context for the session: connections to the extender are kept and reused,
        # as kube-scheduler's HTTP transport keeps them (no handshake per filter or bind).
        context = self.extender.ssl_context() if self.extender is not None else None
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context or True))
        self.pods.add_handlers(
            EventHandlers(
                on_add=lambda pod: self._pod_seen(read_pod(pod)),
                on_update=lambda _old, new: self._pod_seen(read_pod(new)),
            )
        )
        self.nodes.add_handlers(
            EventHandlers(
                on_add=lambda node: self._node_seen(read_node(node)),
                on_update=lambda _old, new: self._node_seen(read_node(new)),
                on_delete=lambda node: self._node_gone(read_node(node)),
            )
        )
        self.nodes.start()
        await self.nodes.wait_synced()
        self.pods.start()
        await self.pods.wait_synced()
        self._loop_task = guarded_task(
            self._schedule_loop(), f"harness/{self.scheduler_name}/schedule"
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._loop_task, *self._tasks)
        await self.pods.stop()
        await self.nodes.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- reading results ------------------------------------------------------------------

    def outcomes_for(self, namespace: str, name: str) -> list[ScheduleOutcome]:
        return [o for o in self.outcomes if (o.namespace, o.name) == (namespace, name)]

    def is_pending(self, namespace: str, name: str) -> bool:
        """Whether the pod is queued, backing off or in a scheduling cycle now."""
        return (namespace, name) in self._pending

    async def wait_for(
        self, namespace: str, name: str, *, result: Result = Result.BOUND, timeout_s: float = 10.0
    ) -> ScheduleOutcome:
        """The first outcome of `result` for the pod (waits for it; TimeoutError if none)."""

        def first() -> ScheduleOutcome | None:
            outcomes = self.outcomes_for(namespace, name)
            return next((o for o in outcomes if o.result is result), None)

        return await self._until(first, timeout_s)

    async def schedule_again(self, pod: SentPod, *, timeout_s: float = 10.0) -> ScheduleOutcome:
        """Run one scheduling attempt for `pod` as given, whatever the informer shows now, and
        return its outcome: kube-scheduler does this when its cache lags behind a binding
        (it still sees the pod unbound and filters it again)."""
        key = (pod.view.namespace, pod.view.name)
        seen = len(self.outcomes_for(*key))
        self._pending.add(key)
        await self._schedule_one(key, pod)
        return await self._until(
            lambda: next(iter(self.outcomes_for(*key)[seen:]), None), timeout_s
        )

    async def wait_bound_count(self, count: int, *, timeout_s: float = 30.0) -> None:
        await self._until(lambda: self.metrics.results[Result.BOUND] >= count or None, timeout_s)

    async def _until(self, found: Callable[[], _T | None], timeout_s: float) -> _T:
        """`found()` once it is not None, asked again after each outcome; TimeoutError if never."""

        async def wait() -> _T:
            while (value := found()) is None:
                self._changed.clear()
                await self._changed.wait()
            return value

        return await asyncio.wait_for(wait(), timeout_s)

    # --- queueing -------------------------------------------------------------------------

    def _pod_seen(self, pod: PodView) -> None:
        key = (pod.namespace, pod.name)
        if key in self._pending or pod.deleting:
            return
        self._pending.add(key)
        self._queue.put_nowait(key)

    def _node_seen(self, node: NodeView) -> None:
        self._node_facts[node.name] = NodeFacts.of(node)

    def _node_gone(self, node: NodeView) -> None:
        self._node_facts.pop(node.name, None)

    def _record(self, outcome: ScheduleOutcome) -> None:
        self.outcomes.append(outcome)
        self.metrics.results[outcome.result] += 1
        self._changed.set()

    def _retry_later(self, key: tuple[str, str], attempt: int) -> None:
        initial, ceiling = self._backoff
        delay = min(initial * 2 ** (attempt - 1), ceiling)

        async def requeue() -> None:
            await self._clock.sleep(delay)
            self._queue.put_nowait(key)

        self._spawn(requeue(), f"harness/backoff/{key[0]}/{key[1]}")

    def _spawn(self, coro: Any, name: str) -> None:
        task = guarded_task(coro, name, may_finish=True)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the scheduling cycle -------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while True:
            key = await self._queue.get()
            pod = self.pods.get(key[1], key[0])
            if pod is None:  # bound, deleted or no longer ours
                self._pending.discard(key)
                continue
            await self._schedule_one(key, SentPod.read(pod))

    async def _schedule_one(self, key: tuple[str, str], pod: SentPod) -> None:
        uid = pod.view.uid
        number = self._attempts[uid] = self._attempts.get(uid, 0) + 1
        self.metrics.attempts += 1
        interested = self.extender is not None and self.extender.interested_in(pod.view)
        attempt = _Attempt(key, pod, number, interested)
        started = self._clock.monotonic()
        try:
            node, attempt.failed = await self._pick_node(attempt)
        except _AttemptFailedError as failure:
            self._filter_timed(attempt, started)
            attempt.failed = failure.failed
            await self._fail(attempt, failure.result, str(failure))
            return
        self._filter_timed(attempt, started)
        self._spawn(self._bind(attempt, node), f"harness/bind/{key[0]}/{key[1]}")

    def _filter_timed(self, attempt: _Attempt, started: float) -> None:
        attempt.filter_s = self._clock.monotonic() - started
        if attempt.extender_called:
            self.metrics.filter_latencies_s.append(attempt.filter_s)

    async def _fail(self, attempt: _Attempt, result: Result, error: str, node: str = "") -> None:
        message = error if result is not Result.BIND_ERROR else f"Binding rejected: {error}"
        await self._event(attempt.pod.view, "Warning", "FailedScheduling", message)
        await self._mark_unscheduled(attempt, result, message)
        self._retry_later(attempt.key, attempt.number)
        self._record(attempt.outcome(result, node=node, error=error))

    async def _pick_node(self, attempt: _Attempt) -> tuple[str, dict[str, str]]:
        pod = attempt.pod.view
        # Checked against allocatable: extended resources kube-scheduler does not ignore.
        checked = {
            r: n for r, n in requested(pod).items() if r not in self._ignored and is_extended(r)
        }
        reasons = {
            name: facts.rejects(pod.tolerations, pod.node_selector, checked)
            for name, facts in sorted(self._node_facts.items())
        }
        failed = {name: reason for name, reason in reasons.items() if reason}
        feasible = [name for name, reason in reasons.items() if not reason]
        if feasible and attempt.interested:
            attempt.extender_called = True
            assert self.extender is not None
            try:
                feasible, extra = await self._filter(attempt.pod, feasible)
                failed.update(extra)
            except _AttemptFailedError:
                if not self.extender.ignorable:
                    raise
                log.info("ignorable extender failed; scheduling without it", pod=pod.name)
        if not feasible:
            raise _AttemptFailedError(
                Result.UNSCHEDULABLE,
                unschedulable_message(len(self._node_facts), failed),
                failed,
            )
        return feasible[0], failed

    async def _post(self, verb: str, body: object) -> _Answer:
        assert self.extender is not None and self._session is not None
        url = f"{self.extender.url_prefix.rstrip('/')}/{verb}"
        try:
            async with self._session.post(
                url,
                json=body,
                server_hostname=self.extender.tls_server_name,
                timeout=aiohttp.ClientTimeout(total=self.extender.http_timeout_s),
            ) as response:
                text = await response.text()
                if response.status != 200:
                    raise _AttemptFailedError(
                        Result.FILTER_ERROR,
                        f"extender {verb}: HTTP {response.status}: {text[:200]}",
                    )
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise _AttemptFailedError(
                Result.FILTER_ERROR, f'extender {verb}: Post "{url}": {err!r}'
            ) from err
        return _decode_answer(answer, verb, self.extender.node_cache_capable)

    async def _filter(self, pod: SentPod, feasible: list[str]) -> tuple[list[str], dict[str, str]]:
        assert self.extender is not None
        if self.extender.node_cache_capable:
            args = pod.filter_args(feasible)
        else:
            nodes = [self.nodes.get(name) for name in feasible]
            args = pod.filter_args(None, [node for node in nodes if node is not None])
        answer = await self._post(self.extender.filter_verb, args)
        if answer.error:
            raise _AttemptFailedError(Result.FILTER_ERROR, f"extender filter: {answer.error}")
        if answer.node_names is None:
            raise _AttemptFailedError(
                Result.FILTER_ERROR, "extender filter: node list is not a list"
            )
        # kube-scheduler keeps only names it sent; anything else is dropped.
        kept = [n for n in answer.node_names if n in feasible]
        return kept, answer.failed

    # --- the binding cycle ----------------------------------------------------------------

    async def _bind(self, attempt: _Attempt, node: str) -> None:
        namespace, name = attempt.key
        started = self._clock.monotonic()
        try:
            if attempt.interested and self.extender is not None and self.extender.bind_verb:
                answer = await self._post(
                    self.extender.bind_verb,
                    {
                        "PodName": name,
                        "PodNamespace": namespace,
                        "PodUID": attempt.pod.view.uid,
                        "Node": node,
                    },
                )
                if answer.error:
                    raise _AttemptFailedError(Result.BIND_ERROR, f"extender bind: {answer.error}")
            else:
                await self._client.bind_pod(namespace, name, node, uid=attempt.pod.view.uid)
        except (_AttemptFailedError, KubeError) as err:
            attempt.bind_s = self._clock.monotonic() - started
            self.metrics.bind_latencies_s.append(attempt.bind_s)
            await self._fail(attempt, Result.BIND_ERROR, str(err), node=node)
            return
        attempt.bind_s = self._clock.monotonic() - started
        self.metrics.bind_latencies_s.append(attempt.bind_s)
        self._pending.discard(attempt.key)
        await self._event(
            attempt.pod.view,
            "Normal",
            "Scheduled",
            f"Successfully assigned {namespace}/{name} to {node}",
        )
        self._record(attempt.outcome(Result.BOUND, node=node))

    async def _mark_unscheduled(self, attempt: _Attempt, result: Result, message: str) -> None:
        """The PodScheduled=False condition kube-scheduler writes after a failed attempt."""
        if not self._record_events:
            return
        reason = "Unschedulable" if result is Result.UNSCHEDULABLE else "SchedulerError"
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": self._clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            await self._client.patch_pod_status(
                attempt.key[0],
                attempt.key[1],
                {"status": {"conditions": [condition]}},
                patch_type=PatchType.STRATEGIC,
            )
        except KubeError as err:  # best effort, as in kube-scheduler
            log.warning("could not update the pod condition", pod=attempt.key, error=str(err))

    async def _event(self, pod: PodView, kind: str, reason: str, message: str) -> None:
        if not self._record_events:
            return
        try:
            await self._client.create_event(
                pod.namespace, self._events.body(pod, kind, reason, message)
            )
        except KubeError as err:  # events are best effort, as in kube-scheduler
            log.warning("could not record event", reason=reason, error=str(err))
