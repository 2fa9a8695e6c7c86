"""The scheduler's own preemption, for GPU pods short only of GPU capacity.

pyhami's resources are ignored by kube-scheduler's own filters, so a high-priority pod that
lacks only GPU memory, cores or slots fits every node in kube-scheduler's preemption dry run
with no victim at all; it drops those candidates and never asks `/preempt`. So when `/filter`
refuses a GPU pod on every node it was given, this module asks the same engine
(`engine.preempt`, on the ledger) with every lower-priority pod holding cards on those nodes as
a possible victim, picks the node as kube-scheduler would (`best_node`), and:

* evicts the victims through the Eviction API (policy/v1), so that the API server enforces
  PodDisruptionBudgets too. A set of victims that a budget forbids is never chosen: the node
  is kept only where the unprotected pods make room, and otherwise nothing is evicted. Victims
  a budget covers go first, so that a refusal (429) most likely comes before any eviction;
  after a refusal nothing more is evicted and nothing stays reserved, and the pod's next
  scheduling attempt asks again;
* holds the pod's claim on the freed cards in the ledger (the same nomination `/preempt`
  offers), sets its `status.nominatedNodeName` as kube-scheduler does for its own victims'
  preemptor (then kube-scheduler tries that node first, and does not preempt again while the
  victims terminate), and evicts nothing more for the pod while the nomination is alive: until
  the pod is placed or deleted, or for the victims' longest grace period and a margin;
* writes `Preempted` events on the victims and `Preempting` (or why not) on the pod.

A pod with `preemptionPolicy: Never` never preempts.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog

from pyhami.engine import Decision, PodKey
from pyhami.engine.preempt import (
    NodePreemption,
    PreemptionInput,
    Proposal,
    best_node,
    preempt,
)
from pyhami.kube import (
    POD_DISRUPTION_BUDGETS,
    Clock,
    KubeError,
    NotFound,
    ObjectList,
    Resource,
    cancel_and_wait,
)
from pyhami.kube.views import read_budget
from pyhami.model import NodeName, PodView
from pyhami.model.views import Budget, BudgetError
from pyhami.scheduler.budgets import counted, protected, violations
from pyhami.scheduler.events import NORMAL, WARNING, EventRecorder
from pyhami.scheduler.explanations import ANSWERS_KEPT, PreemptionExplanation, keep_newest
from pyhami.scheduler.metrics import SchedulerMetrics
from pyhami.scheduler.state import ClusterState

log = structlog.get_logger(__name__)

PATH = "scheduler"  # the `path` label of the preemption metrics
DEFAULT_GRACE_S = 30  # a pod's terminationGracePeriodSeconds when its spec does not say
# How long a nomination outlives its victims' longest grace period: time for the kubelet to
# report them gone and for kube-scheduler to try the pod again.
NOMINATION_MARGIN = timedelta(seconds=60)
# Nodes searched for victims per attempt, as kube-scheduler's preemption bounds its candidates
# (minCandidateNodesAbsolute): the search runs inside /filter.
MAX_CANDIDATE_NODES = 100
# How long the lowest priority among all pods is reused: most pods that fit nowhere are not above
# any pod, and this spares them a pass over every pod each time (a pod that arrived since then is
# seen by the next attempt).
LOWEST_PRIORITY_TTL = timedelta(seconds=1)


class EvictionKube(Protocol):
    """The API calls this module makes."""

    async def list(self, resource: Resource, namespace: str | None = None) -> ObjectList: ...

    async def evict_pod(self, namespace: str, name: str, *, uid: str) -> None: ...

    async def patch_pod_status(self, namespace: str, name: str, body: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Nomination:
    """What one preemption did for a pod: its node, its victims, and when it lapses."""

    node: NodeName
    victims: tuple[str, ...]  # namespace/name
    expires: datetime


class EvictingPreemption:
    """Preemption for pods `/filter` refused on every node (`on_unschedulable`)."""

    def __init__(
        self,
        state: ClusterState,
        kube: EvictionKube,
        events: EventRecorder,
        metrics: SchedulerMetrics,
        *,
        clock: Clock,
    ) -> None:
        self.state = state
        self.kube = kube
        self.events = events
        self.metrics = metrics
        self._clock = clock
        self.nominations: dict[PodKey, Nomination] = {}
        # The latest answers per namespace/name (every node asked, kept or dropped, and why),
        # and what /explain shows of them.
        self.last: OrderedDict[str, dict[NodeName, NodePreemption]] = OrderedDict()
        self._explained: OrderedDict[str, PreemptionExplanation] = OrderedDict()
        self._lapses: set[asyncio.Task[None]] = set()
        self._lowest: tuple[datetime, int] | None = None  # when seen, the lowest pod priority

    async def on_unschedulable(self, pod: PodView, decision: Decision) -> None:
        """Preempt for `pod`, which `decision` found room for on none of its nodes. Nothing
        that goes wrong here changes /filter's answer: it is logged and counted."""
        try:
            await self._preempt(pod, decision)
        except Exception:
            self._outcome("error")
            log.exception("own preemption failed")

    def nominated(self, key: PodKey) -> bool:
        """Whether this path's nomination of the pod is alive (its victims may still go)."""
        nomination = self.nominations.get(key)
        return nomination is not None and self._clock.now() < nomination.expires

    async def _preempt(self, pod: PodView, decision: Decision) -> None:
        key = pod.key
        nomination = self.nominations.get(key)
        if nomination is not None:
            if self.nominated(key) and self.state.hold_nomination(key, nomination.node):
                log.info(
                    "preemption waits for its victims",
                    pod=pod.ref,
                    node=nomination.node,
                    victims=nomination.victims,
                )
                return
            await self.expire(key)
        if pod.preemption_policy == "Never" or self._victims_terminating(pod):
            return
        if not self._above_some_pod(pod.priority) or not self._question(pod, decision)[1]:
            return  # no lower-priority pod holds a card where the pod was refused
        try:
            listed = await self.kube.list(POD_DISRUPTION_BUDGETS)
            budgets = tuple(read_budget(pdb) for pdb in listed.items)
        except (KubeError, BudgetError) as err:
            self._outcome("budgets-unreadable")
            message = f"PodDisruptionBudgets cannot be read, nothing evicted: {err}"
            self.events.emit(pod, WARNING, "PreemptionFailed", message)
            return
        # Asked again: pods came and went while the budgets were read.
        question, proposals = self._question(pod, decision)
        victim_pods = self._victim_pods(question.priorities)
        # A pod that terminates already is deleted again without asking its budgets.
        judged = {k: v for k, v in victim_pods.items() if not v.deleting}
        question = replace(question, protected=protected(judged.items(), budgets))
        answers = preempt(
            question,
            proposals,
            self.state.ledger,
            config=self.state.config,
            quotas=self.state.quotas,
        )
        answers = {node: counted(answer, judged, budgets) for node, answer in answers.items()}
        best = best_node(answers, question.priorities)
        chosen = () if best is None else tuple(sorted(question.names[v] for v in best.victims))
        self._remember(pod.ref, answers, best, chosen)
        if best is None or best.allocation is None:
            reasons = "; ".join(f"{node}: {a.reason}" for node, a in sorted(answers.items()))
            why = f"no eviction of lower-priority pods makes room: {reasons}"
            self._gave_up(pod, "no-node", "PreemptionNotHelpful", why)
            return
        if best.pdb_violations:
            broken = violations([judged[v] for v in best.victims if v in judged], budgets)
            self._gave_up(
                pod,
                "blocked",
                "PreemptionBlocked",
                f"on node {best.node} the pod fits only by evicting pods a PodDisruptionBudget "
                f"protects ({'; '.join(broken)}); nothing evicted, asked again on the pod's "
                "next scheduling attempt",
            )
            return
        await self._evict(pod, best, [victim_pods[v] for v in best.victims], budgets)

    def _victims_terminating(self, pod: PodView) -> bool:
        """kube-scheduler's rule for either path: a pod nominated to a node where a pod of
        lower priority is terminating waits for it, and keeps its claim there meanwhile."""
        node = NodeName(pod.nominated_node_name)
        pods = self.state.pods
        held = (pods.get((a.namespace, a.name)) for a in self.state.ledger.pods_on(node))
        if not node or not any(p and p.deleting and p.priority < pod.priority for p in held):
            return False
        self.state.hold_nomination(pod.key, node)
        return True

    def _above_some_pod(self, priority: int) -> bool:
        now = self._clock.now()
        if self._lowest is None or now - self._lowest[0] >= LOWEST_PRIORITY_TTL:
            pods = self.state.pods.values()
            self._lowest = (now, min((p.priority for p in pods), default=priority))
        return priority > self._lowest[1]

    def _question(
        self, pod: PodView, decision: Decision
    ) -> tuple[PreemptionInput, dict[NodeName, Proposal]]:
        """The engine's question, and the refused nodes where a lower-priority pod holds cards
        (no eviction helps the others), each proposing its lower-priority pods that terminate
        already (the victims that cost nothing more). One pass over the pods finds those
        nodes: most refusals have none, and that pass is all they cost."""
        priority = pod.priority
        refused = decision.failed_nodes
        found: set[NodeName] = set()
        # The cheap test first: most pods are not below the preemptor.
        below = [held for held in self.state.pods.values() if held.priority < priority]
        for other in below:
            node = NodeName(other.node_name)
            if node in found or node not in refused:
                continue
            allocation = self.state.ledger.pod(other.uid)
            if allocation is not None and allocation.node == node and any(allocation.containers):
                found.add(node)
        proposals: dict[NodeName, Proposal] = {}
        priorities: dict[PodKey, int] = {}
        names: dict[PodKey, str] = {}
        for node in sorted(found)[:MAX_CANDIDATE_NODES]:
            going = set()
            for allocation in self.state.ledger.pods_on(node):
                held = self.state.pods.get((allocation.namespace, allocation.name))
                # Only pods bound to the node are victims: a claim or reservation of a pod not
                # bound yet counts as the preemptor's equal.
                bound = held is not None and bool(held.node_name)
                priorities[allocation.key] = held.priority if held and bound else priority
                names[allocation.key] = f"{allocation.namespace}/{allocation.name}"
                if held and bound and held.deleting and priorities[allocation.key] < priority:
                    going.add(allocation.key)
            proposals[node] = Proposal(frozenset(going))
        return PreemptionInput(pod, priority, priorities, names), proposals

    def _victim_pods(self, priorities: Mapping[PodKey, int]) -> dict[PodKey, PodView]:
        allocations = filter(None, map(self.state.ledger.pod, priorities))
        pods = self.state.pods
        return {a.key: pod for a in allocations if (pod := pods.get((a.namespace, a.name)))}

    async def _evict(
        self,
        pod: PodView,
        chosen: NodePreemption,
        victims: Sequence[PodView],
        budgets: Sequence[Budget],
    ) -> None:
        key = pod.key
        assert chosen.allocation is not None  # best_node keeps only answers with a claim
        self.state.offer_nomination(key, {chosen.node: chosen.allocation})
        self.state.hold_nomination(key, chosen.node)
        # Victims a budget covers first: a refusal then most likely comes before any eviction.
        ordered = sorted(victims, key=lambda v: not any(b.covers(v) for b in budgets))
        evicted: list[str] = []
        for victim in ordered:
            try:
                await self.kube.evict_pod(victim.namespace, victim.name, uid=victim.uid)
            except NotFound:
                pass  # gone already: what the eviction was for
            except KubeError as err:
                self._refused(pod, chosen, evicted, victim.ref, err)
                return
            evicted.append(victim.ref)
            message = f"Preempted by {pod.ref} on node {chosen.node}: {chosen.reason}"
            self.events.emit(victim, NORMAL, "Preempted", message)
        self.metrics.preemption_victims.labels(path=PATH).inc(len(evicted))
        self._outcome("evicted", pod.ref)
        grace = max((_grace_s(v) for v in victims), default=DEFAULT_GRACE_S)
        self.nominations[key] = Nomination(
            chosen.node,
            tuple(evicted),
            self._clock.now() + timedelta(seconds=grace) + NOMINATION_MARGIN,
        )
        lapse = asyncio.create_task(self._lapse(key, self.nominations[key]))
        self._lapses.add(lapse)
        lapse.add_done_callback(self._lapses.discard)
        self.events.emit(pod, NORMAL, "Preempting", f"on node {chosen.node}: {chosen.reason}")
        await self._nominate(pod.namespace, pod.name, chosen.node)

    def _refused(
        self,
        pod: PodView,
        chosen: NodePreemption,
        evicted: Sequence[str],
        victim: str,
        err: KubeError,
    ) -> None:
        """An eviction failed: stop, hold nothing (the cards cannot all be freed), say so."""
        self.state.drop_nomination(pod.key)
        self.metrics.preemption_evictions_failed.labels(code=str(err.code)).inc()
        self.metrics.preemption_victims.labels(path=PATH).inc(len(evicted))
        done = f"; already evicted: {', '.join(evicted)}" if evicted else "; nothing evicted"
        self._gave_up(
            pod,
            "eviction-refused",
            "PreemptionFailed",
            f"on node {chosen.node} the eviction of {victim} was refused ({err}){done}; "
            "nothing is held for the pod, asked again on its next scheduling attempt",
        )

    async def _nominate(self, namespace: str, name: str, node: NodeName | None) -> None:
        """Set (or clear, with None) the pod's status.nominatedNodeName; best effort: the
        ledger's claim does not depend on it."""
        try:
            await self.kube.patch_pod_status(
                namespace, name, {"status": {"nominatedNodeName": node}}
            )
        except KubeError as err:
            log.warning("nominatedNodeName not written", pod=f"{namespace}/{name}", error=str(err))

    async def _lapse(self, key: PodKey, nomination: Nomination) -> None:
        await asyncio.sleep((nomination.expires - self._clock.now()).total_seconds())
        if self.nominations.get(key) is nomination:
            await self.expire(key)

    async def close(self) -> None:
        """Stop waiting for nominations to lapse (shutdown: the ledger goes too)."""
        await cancel_and_wait(*self._lapses)

    async def expire(self, key: PodKey) -> None:
        """The nomination lapses: the claim leaves the ledger, and a pod still pending there
        is nominated nowhere."""
        nomination = self.nominations.pop(key, None)
        self.state.drop_nomination(key)
        if nomination is None:
            return
        for pod in list(self.state.pods.values()):
            if pod.uid == key and not pod.node_name and pod.nominated_node_name == nomination.node:
                await self._nominate(pod.namespace, pod.name, None)

    def explanation(self, pod: str) -> PreemptionExplanation | None:
        """The latest preemption for `pod` (namespace/name) as /explain shows it: the node
        chosen, its victims and every node's answer with its reason."""
        return self._explained.get(pod)

    def _gave_up(self, pod: PodView, outcome: str, reason: str, message: str) -> None:
        """An attempt that ends without evicting (more): counted, told on the pod."""
        self._outcome(outcome, pod.ref)
        self.events.emit(pod, WARNING, reason, message)

    def _outcome(self, outcome: str, pod: str = "") -> None:
        if pod in self._explained:
            self._explained[pod] = replace(self._explained[pod], outcome=outcome)
        self.metrics.preemption_attempts.labels(path=PATH, outcome=outcome).inc()

    def _remember(
        self,
        pod: str,
        answers: dict[NodeName, NodePreemption],
        best: NodePreemption | None,
        victims: tuple[str, ...],
    ) -> None:
        keep_newest(self.last, pod, answers, ANSWERS_KEPT)
        nodes = {node: answer.reason for node, answer in answers.items()}
        chosen = None if best is None else best.node
        explained = PreemptionExplanation(PATH, "", nodes, chosen, victims)
        keep_newest(self._explained, pod, explained, ANSWERS_KEPT)  # the same keys as `last`
        for node, answer in answers.items():
            log.info("own preemption", pod=pod, node=node, answer=answer.reason)


def _grace_s(pod: PodView) -> int:
    return DEFAULT_GRACE_S if pod.termination_grace_s is None else pod.termination_grace_s
