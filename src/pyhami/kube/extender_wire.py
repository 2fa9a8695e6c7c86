"""The kube-scheduler extender wire types (`k8s.io/kube-scheduler/extender/v1`), decoded once.

The Go types carry no JSON tags, so the wire keys are the Go field names, and Go's decoder
matches them case-insensitively. We accept any case and answer in PascalCase with every field
present, exactly as a Go-marshalled answer looks. The embedded Pod becomes a PodView; the Nodes
of a simulation request become NodeViews, their objects kept only to be sent back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyhami.engine.preempt import NodePreemption, Proposal
from pyhami.kube.client import JsonObject, json_object
from pyhami.kube.views import _text, pod_identity, read_node, read_pod
from pyhami.model import NodeName, NodeView, PodSpecError, PodView

# The extender body limit HAMi applies to /filter, /bind and /preempt.
MAX_EXTENDER_BODY = 1 << 20
T = TypeVar("T")


class ExtenderDecodeError(ValueError):
    """A request body that is not a valid extender message; the text goes into `Error`."""


def compact_json(value: object) -> bytes:
    """JSON as Go's encoder writes it: no spaces."""
    return json.dumps(value, separators=(",", ":")).encode()


def _loads_object(body: bytes, what: str) -> JsonObject:
    if len(body) > MAX_EXTENDER_BODY:
        raise ExtenderDecodeError(f"{what}: request body exceeds {MAX_EXTENDER_BODY} bytes")
    if not body.strip():
        raise ExtenderDecodeError(f"{what}: empty request body")
    try:
        return json_object(body)
    except ValueError as err:
        raise ExtenderDecodeError(f"{what}: {err}") from err


def go_field(obj: Mapping[str, Any], name: str) -> Any:
    """Go's rule: an exact key wins, otherwise the first key equal ignoring case."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if key.lower() == lowered:
            return value
    return None


def _typed(obj: Mapping[str, Any], name: str, what: str, kind: type[T], described: str) -> T | None:
    """Field `name` (None when absent); ExtenderDecodeError naming it when not of `kind`."""
    value = go_field(obj, name)
    if value is None or isinstance(value, kind):
        return value
    raise ExtenderDecodeError(
        f"{what}: field {name} must be {described}, got {type(value).__name__}"
    )


@dataclass(frozen=True, slots=True)
class ClaimedPod:
    """The pod a request names, as far as it is trusted: the scheduler decides on the pod the
    API server has, so only the identity is read (and the scheduler, for the DRA split)."""

    namespace: str
    name: str
    uid: str
    scheduler_name: str = ""


def _claimed(pod: JsonObject, what: str) -> ClaimedPod:
    try:
        _, namespace, name = pod_identity(pod)
    except PodSpecError as err:
        raise ExtenderDecodeError(f"{what}.Pod: {err}") from err
    spec = pod.get("spec")
    scheduler = spec.get("schedulerName") if isinstance(spec, dict) else None
    return ClaimedPod(namespace, name, _text(pod["metadata"].get("uid")), _text(scheduler))


@dataclass(frozen=True, slots=True)
class GivenNode:
    """One Node of a simulation request: its name, its view (None: unreadable) and the object,
    which only goes back to kube-scheduler."""

    name: str
    view: NodeView | None
    _object: JsonObject


@dataclass(frozen=True, slots=True)
class GivenNodes:
    """A simulation request: the pod as sent, read whole, and the `Nodes` NodeList to decide
    it on."""

    pod: PodView
    nodes: tuple[GivenNode, ...]
    _list: JsonObject

    @classmethod
    def decode(cls, pod: JsonObject, nodes: JsonObject, what: str) -> GivenNodes:
        items = nodes.get("items")
        if items is not None and (
            not isinstance(items, list) or not all(isinstance(i, dict) for i in items)
        ):
            raise ExtenderDecodeError(f"{what}: Nodes.items must be a list of Node objects")
        given = []
        for item in items or ():
            try:
                view: NodeView | None = read_node(item)
            except ValueError:  # NodeSpecError included: such a node counts as unregistered
                view = None
            given.append(GivenNode(str((item.get("metadata") or {}).get("name") or ""), view, item))
        try:
            return cls(read_pod(pod), tuple(given), nodes)
        except PodSpecError as err:
            raise ExtenderDecodeError(f"{what}.Pod: {err}") from err

    def only(self, node: GivenNode) -> GivenNodes:
        """A NodeList holding `node` alone (the filter's choice)."""
        node_list = {"apiVersion": "v1", "kind": "NodeList", "items": [node._object]}
        return GivenNodes(self.pod, (node,), node_list)


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """`ExtenderArgs`: the pod and either candidate names (live path) or full nodes (simulation)."""

    pod: ClaimedPod
    nodes: GivenNodes | None = None
    node_names: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, body: bytes) -> ExtenderArgs:
        what = "ExtenderArgs"
        obj = _loads_object(body, what)
        nodes = _typed(obj, "Nodes", what, dict, "an object")
        pod = _typed(obj, "Pod", what, dict, "an object")
        node_names = _typed(obj, "NodeNames", what, list, "a list of strings")
        if not all(isinstance(name, str) for name in node_names or ()):
            raise ExtenderDecodeError(f"{what}: field NodeNames must be a list of strings")
        if pod is None:
            raise ExtenderDecodeError("extender args missing pod")
        given = None if nodes is None else GivenNodes.decode(pod, nodes, what)
        names = None if node_names is None else tuple(node_names)
        return cls(pod=_claimed(pod, what), nodes=given, node_names=names)


@dataclass(frozen=True, slots=True)
class ExtenderFilterResult:
    """`ExtenderFilterResult`, always marshalled with all five fields."""

    node_names: Sequence[str] | None = None
    nodes: GivenNodes | None = None
    failed_nodes: Mapping[str, str] | None = None
    error: str = ""
    failed_and_unresolvable: Mapping[str, str] | None = None

    def encode(self) -> bytes:
        unresolvable = self.failed_and_unresolvable
        return compact_json(
            {
                "Nodes": None if self.nodes is None else self.nodes._list,
                "NodeNames": None if self.node_names is None else list(self.node_names),
                "FailedNodes": None if self.failed_nodes is None else dict(self.failed_nodes),
                "FailedAndUnresolvableNodes": None if unresolvable is None else dict(unresolvable),
                "Error": self.error,
            }
        )


@dataclass(frozen=True, slots=True)
class ExtenderBindingArgs:
    """`ExtenderBindingArgs`: which pod to bind to which node."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @classmethod
    def from_json(cls, body: bytes) -> ExtenderBindingArgs:
        what = "ExtenderBindingArgs"
        obj = _loads_object(body, what)
        fields = ("PodName", "PodNamespace", "PodUID", "Node")
        found = {name: _typed(obj, name, what, str, "a string") or "" for name in fields}
        missing = [name for name in ("PodName", "Node") if not found[name]]
        if missing:
            raise ExtenderDecodeError(f"{what}: missing {', '.join(missing)}")
        return cls(*(found[name] for name in fields))


@dataclass(frozen=True, slots=True)
class ExtenderBindingResult:
    """`ExtenderBindingResult`: an empty `Error` means bound."""

    error: str = ""

    def encode(self) -> bytes:
        return compact_json({"Error": self.error})


PREEMPTION_ARGS = "ExtenderPreemptionArgs"


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """`ExtenderPreemptionArgs`: the pod and kube-scheduler's proposal per node, from
    `NodeNameToMetaVictims` (pod UIDs) or `NodeNameToVictims` (whole pods)."""

    pod: ClaimedPod
    proposals: Mapping[NodeName, Proposal]

    @classmethod
    def from_json(cls, body: bytes) -> PreemptionArgs:
        obj = _loads_object(body, PREEMPTION_ARGS)
        pod = go_field(obj, "Pod")
        if not isinstance(pod, dict):
            raise ExtenderDecodeError(f"{PREEMPTION_ARGS}: field Pod must be a Pod object")
        proposals: dict[NodeName, Proposal] = {}
        for field in ("NodeNameToVictims", "NodeNameToMetaVictims"):
            victims = _typed(obj, field, PREEMPTION_ARGS, dict, "an object") or {}
            for node, entry in victims.items():
                proposals[NodeName(node)] = _proposal(entry, f"{field}[{node}]")
        return cls(_claimed(pod, PREEMPTION_ARGS), proposals)


def _proposal(entry: object, where: str) -> Proposal:
    if entry is None:
        return Proposal(frozenset())
    if not isinstance(entry, dict):
        raise ExtenderDecodeError(f"{PREEMPTION_ARGS}: {where} must be an object")
    pods = go_field(entry, "Pods") or []
    violations = go_field(entry, "NumPDBViolations") or 0
    if not isinstance(pods, list) or not isinstance(violations, int):
        raise ExtenderDecodeError(
            f"{PREEMPTION_ARGS}: {where} needs Pods (a list) and NumPDBViolations (an integer)"
        )
    uids = set()
    for pod in pods:
        uid = _pod_uid(pod)
        if not uid:
            raise ExtenderDecodeError(f"{PREEMPTION_ARGS}: {where}.Pods has an entry without a UID")
        uids.add(uid)
    return Proposal(frozenset(uids), violations)


def _pod_uid(pod: object) -> str:
    """A MetaPod's `UID`, or a whole Pod's `metadata.uid`."""
    if not isinstance(pod, dict):
        return ""
    uid = go_field(pod, "UID")
    if uid is None:
        metadata = pod.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
    return _text(uid)


def preemption_result(answers: Mapping[NodeName, NodePreemption]) -> str:
    """`ExtenderPreemptionResult`: the kept nodes only, each with at least one victim (spaced
    as aiohttp's `json_response` wrote it)."""
    return json.dumps(
        {
            "NodeNameToMetaVictims": {
                node: {
                    "Pods": [{"UID": uid} for uid in answer.victims],
                    "NumPDBViolations": answer.pdb_violations,
                }
                for node, answer in answers.items()
                if answer.kept
            }
        }
    )


@dataclass(frozen=True, slots=True)
class SentPod:
    """A pod as kube-scheduler asks an extender about it (the client side of `ExtenderArgs`):
    its view, and the object, which `ExtenderArgs` carries verbatim."""

    view: PodView
    _object: JsonObject

    @classmethod
    def read(cls, pod: JsonObject) -> SentPod:
        return cls(read_pod(pod), pod)

    def filter_args(
        self, node_names: Sequence[str] | None, nodes: Sequence[JsonObject] = ()
    ) -> JsonObject:
        """`ExtenderArgs` naming the candidates (a node-cache-capable extender), or else, with
        `node_names` None, carrying their Node objects."""
        if node_names is not None:
            return {"Pod": self._object, "Nodes": None, "NodeNames": list(node_names)}
        node_list = {"metadata": {}, "items": list(nodes)}
        return {"Pod": self._object, "Nodes": node_list, "NodeNames": None}
