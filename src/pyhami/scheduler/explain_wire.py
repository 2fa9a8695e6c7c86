"""`/explain`'s JSON (pyhami's own API, not a Kubernetes object): encoded here only, and read
back (`ExplanationData`) only by the demo's report. `pyhami explain -o json|yaml` adds to it."""

from collections.abc import Mapping
from typing import Any, NotRequired

from typing_extensions import TypedDict  # pydantic reads this one on Python 3.11

from pyhami.engine import NodeVerdict
from pyhami.kube.extender_wire import compact_json
from pyhami.scheduler.explanations import Explanation, PreemptionExplanation


class CheckData(TypedDict):
    uuid: str
    index: int
    reason: str | None
    container: int


class NodeData(TypedDict):
    node: str
    fits: bool
    score: float | None
    reason: str
    reasons: dict[str, int]
    cards: int
    checks: list[CheckData]
    registrationError: NotRequired[str]
    # `pyhami explain` only: its cards as the pod saw them (DeviceUsage), why it has none
    cardStates: NotRequired[list[dict[str, Any]]]
    notRegistered: NotRequired[str]


class PreemptionData(TypedDict):
    path: str
    outcome: str
    node: NotRequired[str | None]
    victims: NotRequired[list[str]]
    nodes: dict[str, str]


class ExplanationData(TypedDict):
    pod: str
    outcome: str
    node: str | None
    score: float | None
    error: str | None
    annotations: dict[str, str]  # what the decision writes
    nodes: list[NodeData]


class PreemptedData(ExplanationData):
    preemption: PreemptionData


def _node_data(verdict: NodeVerdict, registration_errors: Mapping[str, str]) -> NodeData:
    data = NodeData(
        node=verdict.node,
        fits=verdict.fits,
        score=verdict.score,
        reason=verdict.reason,
        reasons={str(reason): count for reason, count in verdict.reasons.items()},
        cards=verdict.cards,
        checks=[
            CheckData(uuid=c.uuid, index=c.index, reason=c.reason, container=c.container)
            for c in verdict.checks
        ],
    )
    if verdict.node in registration_errors:
        data["registrationError"] = registration_errors[verdict.node]
    return data


def explanation_data(explanation: Explanation) -> ExplanationData:
    """The decision, the annotations it writes, every node's verdict and card checks."""
    decision, errors = explanation.decision, explanation.registration_errors
    return ExplanationData(
        pod=f"{decision.namespace}/{decision.name}",
        outcome=decision.outcome.value,
        node=decision.node,
        score=decision.score,
        error=decision.error,
        annotations=dict(explanation.annotations),
        nodes=[_node_data(verdict, errors) for verdict in decision.verdicts.values()],
    )


def encode_explanation(
    explanation: Explanation, preemption: PreemptionExplanation | None = None
) -> bytes:
    """`/explain`'s answer: the decision, every node's verdict, and its preemption if any."""
    data = explanation_data(explanation)
    if preemption is None:
        return compact_json(data)
    return compact_json(PreemptedData(**data, preemption=_preemption_data(preemption)))


def _preemption_data(preemption: PreemptionExplanation) -> PreemptionData:
    path, outcome = preemption.path, preemption.outcome
    nodes = {str(node): answer for node, answer in preemption.nodes.items()}
    if preemption.victims is None:  # kube-scheduler chooses the node and victims
        return PreemptionData(path=path, outcome=outcome, nodes=nodes)
    victims = list(preemption.victims)
    return PreemptionData(
        path=path, outcome=outcome, node=preemption.node, victims=victims, nodes=nodes
    )
