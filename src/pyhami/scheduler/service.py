"""`/filter` and `/bind`: the engine's pure decision, with the effects around it.

Filter, as HAMi's: drop the pod's old reservation, `engine.decide`, reserve, events. Bind:
one merge patch of exactly HAMi's annotations (the filter's decision and the bind phase),
per-node in-process serialisation, HAMi's annotation node lock, `pods/binding`.

Deliberate differences from HAMi, each a bug there (docs/hami-compatibility.md):
* followers answer at once that they do not decide, instead of blocking for the whole
  extender timeout; a follower neither filters nor binds, and a leader that loses
  the lead while a filter or bind awaits the API writes nothing from then on;
* a fit names every rejected candidate with its reason in FailedNodes (HAMi: null);
* filter reads nothing from the body but the pod's namespace, name and UID: the pod itself
  comes from our informer (one GET when the informer has not seen it yet), and a pod that is
  bound, finished, or another incarnation of that name is refused before anything changes;
* bind acts only on a decision our own filter made for that pod UID and that node (HAMi checks
  neither), and a failed bind releases that reservation (the pod's scheduler
  annotations are removed too, so an informer echo cannot charge it again) only while the pod
  is still unbound: a 409 because kube-scheduler's lagging cache filtered a bound pod again
  leaves the running pod's charge alone;
* the decision is written by bind, in the patch that sets the bind phase (HAMi writes it at
  filter, then the phase at bind: two writes of one pod); filter answers once the decision is
  reserved in memory. Only a bound pod's annotations are read by a device plugin, and a
  restarted scheduler has no filter decision to bind anyway (docs/protocol.md);
* that patch also nulls scheduler annotations left from an earlier attempt (HAMi leaves them);
* bind takes the node lock from the informer's node (read from the API only on a 409), sends
  it with the pod's patch, and waits for a node another pod has locked instead of failing at
  once: the informer's events of that node wake it (docs/protocol.md);
* neither NodeNames nor Nodes is an error answer, not a crash (HAMi panics);
* per-reason FilteringFailed events are sent even when a node fits, for every rejected
  candidate (the engine's `all_reasons`: ~5 ms at 1,000 nodes against ~1 ms for the answer
  alone). `explain_all` also keeps every card check for /explain, at ~200 ms per 1,000 nodes.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import structlog

from pyhami.engine import (
    Decision,
    Outcome,
    PodKey,
    PodSpecError,
    decide,
    plan_pod,
)
from pyhami.kube import Clock, NodeLockContentionError, NodeLocker, NotFound
from pyhami.kube.extender_wire import (
    ClaimedPod,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
)
from pyhami.kube.scheduler_pods import SchedulerPods
from pyhami.model import NodeName, NodeView, PodView
from pyhami.protocol import (
    KEY_BIND_PHASE,
    KEY_BIND_TIME,
    KEY_NODE_LOCK,
    BindPhase,
    format_unix_seconds,
)
from pyhami.scheduler.bind_turns import BindTurns, NodeTurnTimeoutError
from pyhami.scheduler.events import NORMAL, WARNING, EventRecorder
from pyhami.scheduler.explanations import Explanation, Explanations, PodRef, keep_newest
from pyhami.scheduler.given_nodes import filter_given_nodes
from pyhami.scheduler.metrics import SchedulerMetrics
from pyhami.scheduler.outcome import Claim, FilterOutcome, annotations_of, filter_outcome
from pyhami.scheduler.state import ClusterState

log = structlog.get_logger(__name__)

# A bind waiting for a locked node looks again whenever the informer shows the node change,
# and reads the node through the API at least every LOCK_RETRY_INTERVAL.
LOCK_RETRY_INTERVAL = 1.0
# Binds past their node's turn (writing, or waiting for the node's lock), at most, before
# /filter waits for one to finish, and how long it waits at most: kube-scheduler filters far
# faster than the API server takes binds, and binds beyond what it can take only queue in our
# client, past kube-scheduler's 30 s timeout (with a new TLS connection each). Binds waiting
# for their node's turn (binpack's queue) do not count.
BINDS_AT_WORK = 32
ROOM_WAIT_S = 5.0
# Binds queued for one node, at most, before /filter waits (ROOM_WAIT_S at most) for one of
# them to finish before it answers with that node: a node takes its binds one at a time, at the
# pace of its Allocate, and binpack sends every pod to the same node, so a longer queue ends in
# --node-lock-retry-timeout failures, each a cleanup, a backoff and a new filter (at 1,000
# nodes x 2,000 binpacked pods: 82 bound, 2,175 failed in 200 s).
BINDS_QUEUED_PER_NODE = 16
# Filter decisions kept for their bind: kube-scheduler binds within seconds, so only pods that
# were deleted or sent elsewhere in between are ever dropped from here, oldest first.
CLAIMS_KEPT = 16384


class Leadership(Protocol):
    """Leadership as the extender sees it (`LeaderElector`): whether this replica leads, and
    which one does."""

    is_leader: bool
    leader: str


class FilterBind:
    """The extender verbs over a ClusterState."""

    def __init__(
        self,
        state: ClusterState,
        pods: SchedulerPods,
        locker: NodeLocker,
        events: EventRecorder,
        metrics: SchedulerMetrics,
        *,
        clock: Clock,
        owned_annotations: frozenset[str],
        leadership: Leadership | None = None,
        synced: asyncio.Event | None = None,
        sync_wait: timedelta = timedelta(seconds=25),
        lock_retry_timeout: timedelta = timedelta(seconds=28),
        explain_all: bool = False,
    ) -> None:
        self.state = state
        self.pods = pods
        self.locker = locker
        self.events = events
        self.metrics = metrics
        self.bind_turns = BindTurns()
        self.clock = clock
        self._owned = owned_annotations
        self._leadership = leadership
        self.synced = synced or asyncio.Event()
        self._sync_wait = sync_wait
        self._lock_retry = lock_retry_timeout
        self._explain_all = explain_all
        self.engine_seconds = 0.0  # time spent deciding (benchmarks read it)
        self._explanations = Explanations()
        # Filter decisions waiting for their bind, by pod UID, and binds in progress.
        self._claims: OrderedDict[PodKey, Claim] = OrderedDict()
        self._binding: dict[PodKey, str] = {}
        # Binds waiting for a locked node, woken by the informer's news of that node.
        self._node_news: dict[str, asyncio.Event] = {}
        state.node_changed = self._node_changed
        self._binds_at_work = 0
        self._bind_done = asyncio.Event()
        # Called when the pod fits none of its nodes: the scheduler's own preemption.
        self.on_unschedulable: Callable[[PodView, Decision], Awaitable[None]] | None = None

    # ----- leadership ------------------------------------------------------------------------

    def _not_leader(self) -> str | None:
        if self._leadership is None or self._leadership.is_leader:
            return None
        leader = self._leadership.leader or "unknown"
        return f"this replica is not the leader (leader: {leader}); followers do not decide"

    def _refused_unless_leading(self, verb: str) -> str | None:
        refusal = self._not_leader()
        if refusal is not None:
            self.metrics.decisions.labels(verb=verb, outcome="not-leader").inc()
        return refusal

    def _still_leading(self) -> None:
        refusal = self._refused_unless_leading("bind")
        if refusal is not None:
            raise NotLeadingError(refusal)

    def readiness(self) -> tuple[bool, str]:
        if not self.synced.is_set():
            return False, "caches not synced"
        reason = self._not_leader()
        return (reason is None), (reason or "")

    # ----- filter ----------------------------------------------------------------------------

    def _decide(self, pod: PodView, names: tuple[str, ...], explain: bool) -> Decision:
        started = self.clock.monotonic()
        try:
            return decide(
                plan_pod(pod, self.state.config),
                [NodeName(n) for n in names],
                self.state.ledger,
                config=self.state.config,
                quotas=self.state.quotas,
                all_reasons=True,
                explain=explain,
            )
        except PodSpecError as err:
            return Decision(pod.key, pod.namespace, pod.name, Outcome.ERROR, error=str(err))
        finally:
            self.engine_seconds += self.clock.monotonic() - started

    async def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        if args.nodes is not None:
            started = self.clock.monotonic()
            try:
                return filter_given_nodes(args.nodes, self.state)
            finally:
                self.engine_seconds += self.clock.monotonic() - started
        if args.node_names is None:
            return ExtenderFilterResult(error="extender args carry neither NodeNames nor Nodes")
        refusal = self._refused_unless_leading("filter")
        if refusal is not None:
            return ExtenderFilterResult(error=refusal)
        if not self.synced.is_set():
            try:
                await asyncio.wait_for(self.synced.wait(), self._sync_wait.total_seconds())
            except TimeoutError:
                return ExtenderFilterResult(error="scheduler caches are not synced yet")
        await self._room(lambda: self._binds_at_work >= BINDS_AT_WORK)
        try:
            pod = await self._trusted_pod(args.pod)
        except FilterRefusedError as err:
            self.metrics.decisions.labels(verb="filter", outcome="refused").inc()
            return ExtenderFilterResult(error=str(err))
        # the lead may have moved while the pod was read: a follower writes nothing
        refusal = self._refused_unless_leading("filter")
        if refusal is not None:
            return ExtenderFilterResult(error=refusal)
        key = pod.key
        self.state.release(key)  # a re-filtered pod must not compete with itself
        self._claims.pop(key, None)
        decision = self._decide(pod, args.node_names, self._explain_all)
        written = annotations_of(decision, self.state.config.vendor.keys, self.clock.now())
        self._explanations.remember(decision, written)
        outcome = filter_outcome(pod, decision, args.node_names, written, self._owned)
        self._apply(pod, outcome)
        if decision.outcome is Outcome.UNSCHEDULABLE and self.on_unschedulable is not None:
            await self.on_unschedulable(pod, decision)  # preemption for GPUs (eviction.py)
        elif decision.node is not None:
            chosen = decision.node
            await self._room(lambda: self.bind_turns.queued(chosen) >= BINDS_QUEUED_PER_NODE)
        return outcome.answer

    def _apply(self, pod: PodView, outcome: FilterOutcome) -> None:
        """Carry out a filter's outcome: its metrics, the reservation and claim its bind
        carries out (/bind writes the decision on the pod), then its events."""
        self.metrics.decisions.labels(verb="filter", outcome=outcome.label).inc()
        for word, count in outcome.failures.items():
            self.metrics.filter_failures.labels(reason=word).inc(count)
        claim = outcome.claim
        if claim is not None:
            if claim.allocation is not None:
                self.state.reserve(claim.allocation)
            keep_newest(self._claims, claim.key, claim, CLAIMS_KEPT)
        for event in outcome.events:
            self.events.emit(pod, event.kind, event.reason, event.message)

    async def _trusted_pod(self, claimed: ClaimedPod) -> PodView:
        """The pod the body names, as the API server has it: only its namespace, name and
        UID are read from the body (a caller cannot make us decide for a pod it made up).

        Our informer may not have seen a pod that kube-scheduler's has (it was just created),
        or still hold an earlier pod of that name: then one GET settles it."""
        namespace, name, uid = claimed.namespace, claimed.name, claimed.uid
        if not uid:
            raise FilterRefusedError(f"ExtenderArgs.Pod {namespace}/{name} carries no metadata.uid")
        pod = self.state.pods.get((namespace, name))
        if pod is None or pod.uid != uid:
            try:
                pod = await self.pods.read(namespace, name)
            except NotFound as err:
                raise FilterRefusedError(f"pod {namespace}/{name} does not exist") from err
            except Exception as err:
                raise FilterRefusedError(f"cannot read pod {namespace}/{name}: {err}") from err
        if pod.uid != uid:
            raise FilterRefusedError(
                f"pod {namespace}/{name} has uid {pod.uid or '(none)'}, not {uid}: "
                "it was deleted and created again; nothing filtered"
            )
        if pod.deleting or pod.finished:
            raise FilterRefusedError(f"pod {namespace}/{name} is finished or being deleted")
        bound = self.state.bound_node(uid, pod)
        if bound is not None:
            raise FilterRefusedError(
                f"pod {namespace}/{name} is already bound to {bound}; it is not filtered again"
            )
        if uid in self._binding:
            raise FilterRefusedError(
                f"pod {namespace}/{name} is being bound to {self._binding[uid]}; "
                "it is not filtered again"
            )
        return pod

    async def _room(self, crowded: Callable[[], bool]) -> None:
        """Wait while `crowded()`, looking again as each bind leaves its node's turn,
        ROOM_WAIT_S at most (a node whose lock is never released must not stop filtering)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + ROOM_WAIT_S
        while crowded():
            self._bind_done.clear()
            try:
                await asyncio.wait_for(self._bind_done.wait(), until - loop.time())
            except TimeoutError:
                return

    # ----- explanations ----------------------------------------------------------------------

    def explain(self, pod: PodRef) -> Explanation | None:
        remembered = self._explanations.get(pod.namespace, pod.name)
        if remembered is None:
            return None
        decision, written = remembered
        return Explanation(
            self._with_card_checks(decision), written, self.state.registration_errors
        )

    def _with_card_checks(self, decision: Decision) -> Decision:
        """Per-card detail for the one pod asked about: `/filter` keeps card checks only with
        `explain_all`, so the pod is decided again with them, on the same candidates and
        today's usage, its own reservation set aside (nothing awaits in between)."""
        wanted = (Outcome.SCHEDULED, Outcome.UNSCHEDULABLE)
        pod = self.state.pods.get((decision.namespace, decision.name))
        checked = any(verdict.checks for verdict in decision.verdicts.values())
        if pod is None or decision.outcome not in wanted or checked:
            return decision
        ledger = self.state.ledger
        own = ledger.pod(decision.key)
        if own is not None:
            ledger.remove_pod(decision.key)
        try:
            return self._decide(pod, tuple(decision.verdicts), explain=True)
        finally:
            if own is not None:
                ledger.add_pod(own)

    # ----- bind ------------------------------------------------------------------------------

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        """Bind only what this process filtered: that pod (by UID) to that node. Anything
        else is refused before a single write, and releases nothing."""
        refusal = self._refused_unless_leading("bind")
        if refusal is not None:
            return ExtenderBindingResult(refusal)
        namespace = args.pod_namespace or "default"
        claim = self._claims.get(args.pod_uid) if args.pod_uid else None
        unclaimed = self._unclaimed(claim, args, namespace)
        if unclaimed is not None:
            self.metrics.decisions.labels(verb="bind", outcome="not-filtered").inc()
            return ExtenderBindingResult(unclaimed)
        assert claim is not None  # _unclaimed said so
        # One bind per filter, taken before the first await: a second bind of the same decision
        # arriving meanwhile finds none.
        del self._claims[claim.key]
        self._binding[claim.key] = args.node
        try:
            return await self._bind_claimed(claim, args)
        finally:
            del self._binding[claim.key]

    async def _bind_claimed(self, claim: Claim, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        namespace = claim.namespace
        pod = self.state.pods.get((namespace, claim.name))
        if pod is None or pod.uid != claim.key:
            try:
                pod = await self.pods.read(namespace, claim.name)
            except Exception as err:
                self.metrics.decisions.labels(verb="bind", outcome="unknown-pod").inc()
                return ExtenderBindingResult(f'pod "{namespace}/{claim.name}" not found: {err}')
        if args.node not in self.state.nodes:
            self.events.emit(pod, WARNING, "BindingFailed", f"failed to get node {args.node}")
            return ExtenderBindingResult(f'node "{args.node}" not found')
        attempt = _BindAttempt()
        try:
            await self._write_binding(claim, args.node, attempt)
        except Exception as err:
            return await self._bind_failed(claim, args.node, pod, attempt, err)
        self.state.mark_bound(claim.key, args.node)
        self.metrics.decisions.labels(verb="bind", outcome="bound").inc()
        message = f"Successfully binding node [{args.node}] to {namespace}/{claim.name}"
        self.events.emit(pod, NORMAL, "BindingSucceed", message)
        return ExtenderBindingResult()

    async def _write_binding(self, claim: Claim, node: str, attempt: _BindAttempt) -> None:
        """The bind's writes, in their order: the pod's patch (and the node lock), then
        `pods/binding`; `attempt` notes what was written for `_bind_failed`."""
        # Waiting for the node (this process's earlier binds there, then the lock of a pod
        # that is not allocated yet) ends within --node-lock-retry-timeout, before
        # kube-scheduler's own timeout gives up on this bind.
        until = asyncio.get_running_loop().time() + self._lock_retry.total_seconds()
        async with self._turn(node, self._wait_left(until)):
            # Binds queued for a busy node write nothing before their turn (2,000 binpacked
            # pods' patches at once left the API server no room for the node's own binds).
            # The lead may move while a bind waits (for its turn, for each write): from
            # then on this replica writes nothing.
            self._still_leading()
            recorded = attempt.recorded = asyncio.ensure_future(self._record(claim))
            if claim.needs_lock:
                # The binding goes out only after the lock and the pod's patch landed.
                results = await asyncio.gather(
                    self._lock(node, claim.namespace, claim.name, until),
                    recorded,
                    return_exceptions=True,
                )
                # a lock write whose answer was lost may have landed: release it too
                attempt.locked = not isinstance(results[0], NodeLockContentionError)
                for result in results:
                    if isinstance(result, BaseException):
                        raise result
            else:
                await recorded
            self._still_leading()
            await self.pods.bind(claim.namespace, claim.name, node, claim.key)

    def _unclaimed(
        self, claim: Claim | None, args: ExtenderBindingArgs, namespace: str
    ) -> str | None:
        """Why this bind is not one this process's /filter asked for (None when it is)."""
        pod = f"{namespace}/{args.pod_name}"
        if not args.pod_uid:
            return f"bind of pod {pod} carries no PodUID; nothing done"
        if claim is None or (claim.namespace, claim.name) != (namespace, args.pod_name):
            return (
                f"pod {pod} (uid {args.pod_uid}) has no filter decision of this scheduler "
                "waiting for a bind; filter it again"
            )
        if claim.node is not None and args.node != claim.node:
            return f"pod {pod} was filtered for node {claim.node}, not {args.node}; filter it again"
        if claim.allocation is not None and not self.state.holds(claim.allocation):
            return f"pod {pod}: the reservation its filter made is gone; filter it again"
        return None

    @asynccontextmanager
    async def _turn(self, node: str, within: float | None) -> AsyncIterator[None]:
        """The node's turn for this bind, counted among the binds at work while held."""
        async with self.bind_turns.hold(node, within=within):
            self._binds_at_work += 1
            try:
                yield
            finally:
                self._binds_at_work -= 1
                self._bind_done.set()

    async def _record(self, claim: Claim) -> None:
        """The filter's decision and the bind phase, in one patch of the pod; from its answer
        on, the informer's view of the pod is current again (the reservation ends there)."""
        stamp = format_unix_seconds(self.clock.now())
        values = {**claim.annotations, KEY_BIND_PHASE: BindPhase.ALLOCATING, KEY_BIND_TIME: stamp}
        try:
            version = await self.pods.annotate(claim.namespace, claim.name, values)
        except Exception as err:
            pod = f"{claim.namespace}/{claim.name}"
            raise DecisionRecordError(f"failed to record the decision on pod {pod}: {err}") from err
        if claim.allocation is not None:
            self.state.recorded(claim.allocation, version)

    def _wait_left(self, until: float) -> float | None:
        """Seconds left to wait for a node; None (no limit) without a retry timeout."""
        if self._lock_retry.total_seconds() <= 0:
            return None
        return until - asyncio.get_running_loop().time()

    def _timed_out(self, node: str) -> NodeLockContentionError:
        return NodeLockContentionError(
            f"timed out after {self._lock_retry} waiting for node {node} to be unlocked"
        )

    async def _lock(self, node: str, namespace: str, name: str, until: float) -> None:
        """The node lock, from the node as the informer has it. A node locked by another pod
        is waited for, up to --node-lock-retry-timeout (HAMi fails the bind at once, except
        for pod groups), so a node busy with one pod's Allocate does not send the pods behind
        it back to kube-scheduler's backoff; see docs/protocol.md."""
        if self._wait_left(until) is None:
            await self.locker.lock(node, namespace, name, cached=self.state.nodes.get(node))
            return
        loop = asyncio.get_running_loop()
        news = self._node_news.setdefault(node, asyncio.Event())
        try:
            while True:
                self._still_leading()  # each try writes the node
                news.clear()
                cached = self.state.nodes.get(node)
                try:
                    await self.locker.lock(node, namespace, name, cached=cached)
                    return
                except NodeLockContentionError as err:
                    if loop.time() >= until:
                        raise self._timed_out(node) from err
                await self._unlocked(node, cached, news, until)
        finally:
            del self._node_news[node]

    async def _unlocked(
        self, node: str, tried: NodeView | None, news: asyncio.Event, until: float
    ) -> None:
        """Until the informer shows the node changed since `tried` and without a lock (the
        holder's device plugin released it), LOCK_RETRY_INTERVAL at most between reads through
        the API (an expired or dangling lock changes nothing on the node)."""
        loop = asyncio.get_running_loop()
        recheck = min(until, loop.time() + LOCK_RETRY_INTERVAL)
        while (current := self.state.nodes.get(node)) is tried or not _unlocked_in(current):
            left = recheck - loop.time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(news.wait(), left)
            except TimeoutError:
                return
            news.clear()

    def _node_changed(self, node: str) -> None:
        news = self._node_news.get(node)
        if news is not None:
            news.set()

    async def _bind_failed(
        self, claim: Claim, node: str, pod: PodView, attempt: _BindAttempt, err: Exception
    ) -> ExtenderBindingResult:
        """A failed bind, counted and told, its own writes and reservation undone (`_undo`),
        except when the lead moved: nothing is undone then either, since the new leader
        filters the pod again, which replaces its annotations, and a lock left here is taken
        back by the pod or, once it is placed elsewhere, treated as dangling."""
        if attempt.recorded is not None:
            await asyncio.wait([attempt.recorded])  # any cleanup is written after it
        if isinstance(err, NotLeadingError):
            return ExtenderBindingResult(str(err))
        if isinstance(err, NodeTurnTimeoutError):
            err = self._timed_out(node)
        self.metrics.decisions.labels(verb="bind", outcome="failed").inc()
        self.events.emit(pod, WARNING, "BindingFailed", str(err))
        await self._undo(claim, node, attempt)
        return ExtenderBindingResult(str(err))

    async def _undo(self, claim: Claim, node: str, attempt: _BindAttempt) -> None:
        """Undo a failed bind's own reservation, and only while the pod is unbound: a pod that
        is bound (kube-scheduler's cache lagged and the binding answered 409) keeps its charge
        and its annotations, since it is about to run with them."""
        if attempt.recorded is None:  # the pod and node are as they were: only the reservation goes
            if claim.allocation is not None and self.state.holds(claim.allocation):
                self.state.release(claim.key)
            return
        namespace, name = claim.namespace, claim.name
        if attempt.locked:
            await _quietly(self.locker.release(node, namespace, name), "lock release")
        try:
            current = await self.pods.read(namespace, name)
        except Exception as read_err:
            log.warning(
                "bind failed and the pod cannot be read; its reservation is kept",
                pod=f"{namespace}/{name}",
                error=str(read_err),
            )
            return
        if current.uid != claim.key:
            return  # another pod of that name now: nothing of ours to undo
        if current.node_name:
            self.state.mark_bound(claim.key, current.node_name)
            return
        if claim.allocation is None or not self.state.holds(claim.allocation):
            return
        self.state.release(claim.key)
        await _quietly(self.pods.unmark(namespace, name, self._owned), "annotation cleanup")


async def _quietly(call: Awaitable[Any], what: str) -> None:
    try:
        await call
    except Exception as err:
        log.warning("bind cleanup step failed", step=what, error=str(err))


class NotLeadingError(Exception):
    """This replica lost the lead while a bind was under way; the text says who leads."""


class FilterRefusedError(Exception):
    """/filter will not decide for the pod the body names; the text says why."""


class DecisionRecordError(Exception):
    """The patch recording a decision and its bind phase on the pod failed; the text says why."""


@dataclass(slots=True)
class _BindAttempt:
    """What one bind has written so far: the pod's patch (under way or done), the node lock."""

    recorded: asyncio.Future[None] | None = None
    locked: bool = False


def _unlocked_in(node: NodeView | None) -> bool:
    return node is not None and KEY_NODE_LOCK not in node.annotations
