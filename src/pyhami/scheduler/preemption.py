"""kube-scheduler's extender preemption verb (`/preempt`, `ProcessPreemption`).

kube-scheduler sends `ExtenderPreemptionArgs` — the pod, and per candidate node its own victims:
`NodeNameToMetaVictims` (pod UIDs, with `nodeCacheCapable: true`) or `NodeNameToVictims` (whole
pods) — and takes back `ExtenderPreemptionResult{NodeNameToMetaVictims}`: the nodes kept, each
with the victims to delete (at least one) and `NumPDBViolations`. The wire keys are the Go
field names (no JSON tags); like the other verbs, any case is accepted on the way in.

The answer is `pyhami.engine.preempt`'s, on the scheduler's ledger. Each kept node's claim (the
cards the pod gets there once the victims are gone) is offered to the cluster state, which
holds it for the pod while `status.nominatedNodeName` names that node, so that no other pod
takes the freed cards while the victims terminate.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from pyhami.engine.preempt import NodePreemption, PreemptionInput, preempt
from pyhami.kube.extender_wire import (
    MAX_EXTENDER_BODY,
    ExtenderDecodeError,
    PreemptionArgs,
    preemption_result,
)
from pyhami.model import NodeName
from pyhami.scheduler.explanations import ANSWERS_KEPT, PreemptionExplanation, keep_newest
from pyhami.scheduler.service import FilterBind, FilterRefusedError
from pyhami.serving import read_body

log = structlog.get_logger(__name__)


class Preemption:
    """The `/preempt` verb on the filter's state: the same ledger, pods and configuration."""

    def __init__(
        self, service: FilterBind, *, nominated: Callable[[str], bool] = lambda _key: False
    ) -> None:
        self.service = service
        # Whether the scheduler's own preemption already evicts for the pod (eviction.py).
        self._nominated = nominated
        # The latest answers per namespace/name, for logs and tests to inspect.
        self.last: OrderedDict[str, dict[NodeName, NodePreemption]] = OrderedDict()

    async def answer(self, args: PreemptionArgs) -> dict[NodeName, NodePreemption]:
        service = self.service
        ready, why = service.readiness()
        if not ready:
            log.info("preemption not answered", why=why)
            return {}
        try:
            # Only the pod's namespace, name and UID are taken from the body, as for /filter.
            pod = await service._trusted_pod(args.pod)
        except FilterRefusedError as err:
            log.warning("preemption refused", error=str(err))
            return {}
        if self._nominated(pod.key):
            log.info("preemption not answered", why="the pod's own victims are terminating")
            return {}
        state = service.state
        priorities: dict[str, int] = {}
        names: dict[str, str] = {}
        for node in args.proposals:
            for allocation in state.ledger.pods_on(node):
                held = state.pods.get((allocation.namespace, allocation.name))
                priorities[allocation.key] = 0 if held is None else held.priority
                names[allocation.key] = f"{allocation.namespace}/{allocation.name}"
        question = PreemptionInput(pod, pod.priority, priorities, names)
        answers = preempt(
            question,
            args.proposals,
            state.ledger,
            config=state.config,
            quotas=state.quotas,
        )
        kept = [answer for answer in answers.values() if answer.kept]
        claims = {a.node: a.allocation for a in kept if a.allocation is not None}
        state.offer_nomination(pod.key, claims)
        keep_newest(self.last, pod.ref, answers, ANSWERS_KEPT)
        metrics = service.metrics
        outcome = "kept" if kept else "no-node"
        metrics.preemption_attempts.labels(path="extender", outcome=outcome).inc()
        metrics.preemption_victims.labels(path="extender").inc(sum(len(a.victims) for a in kept))
        for node, answer in answers.items():
            log.info("preemption", pod=pod.ref, node=node, answer=answer.reason)
        return answers

    def explanation(self, pod: str) -> PreemptionExplanation | None:
        """The latest answer for `pod` (namespace/name) as /explain shows it (kube-scheduler
        picks the node among those kept and deletes that node's victims)."""
        answers = self.last.get(pod)
        if answers is None:
            return None
        kept = any(answer.kept for answer in answers.values())
        nodes = {node: answer.reason for node, answer in answers.items()}
        return PreemptionExplanation("extender", "kept" if kept else "no-node", nodes)


def preempt_route(
    preemption: Preemption, body_timeout_s: float
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def route(request: web.Request) -> web.Response:
        body = await read_body(request, MAX_EXTENDER_BODY, body_timeout_s)
        try:
            args = PreemptionArgs.from_json(body)
        except ExtenderDecodeError as err:
            # ExtenderPreemptionResult has no error field: refuse the request itself.
            return web.json_response({"error": str(err)}, status=400)
        answers = await preemption.answer(args)
        return web.Response(text=preemption_result(answers), content_type="application/json")

    return route
