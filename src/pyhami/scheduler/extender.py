"""The kube-scheduler extender wire types (`k8s.io/kube-scheduler/extender/v1`).

The Go types carry no JSON tags, so the wire keys are the Go field names, and Go's decoder
matches them case-insensitively. We accept any case and answer in
PascalCase with every field present, exactly as a Go-marshalled answer looks. The embedded
Pod and NodeList stay ordinary Kubernetes JSON and are passed through as dicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyhami.kube import JsonObject

# The extender body limit HAMi applies to /filter and /bind.
MAX_EXTENDER_BODY = 1 << 20


class ExtenderDecodeError(ValueError):
    """A request body that is not a valid extender message; the text goes into `Error`."""


def _loads_object(body: bytes, what: str) -> Mapping[str, Any]:
    if len(body) > MAX_EXTENDER_BODY:
        raise ExtenderDecodeError(f"{what}: request body exceeds {MAX_EXTENDER_BODY} bytes")
    if not body.strip():
        raise ExtenderDecodeError(f"{what}: empty request body")
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ExtenderDecodeError(f"{what}: invalid JSON: {err}") from err
    except RecursionError as err:
        raise ExtenderDecodeError(f"{what}: invalid JSON: nested too deeply") from err
    if not isinstance(value, dict):
        raise ExtenderDecodeError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """Go's rule: an exact key wins, otherwise the first key equal ignoring case."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if key.lower() == lowered:
            return value
    return None


def _optional_object(obj: Mapping[str, Any], name: str, what: str) -> JsonObject | None:
    value = _field(obj, name)
    if value is None or isinstance(value, dict):
        return value
    raise ExtenderDecodeError(f"{what}: field {name} must be an object, got {type(value).__name__}")


def _optional_strings(obj: Mapping[str, Any], name: str, what: str) -> tuple[str, ...] | None:
    value = _field(obj, name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ExtenderDecodeError(f"{what}: field {name} must be a list of strings")
    return tuple(value)


def _string(obj: Mapping[str, Any], name: str, what: str) -> str:
    value = _field(obj, name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ExtenderDecodeError(f"{what}: field {name} must be a string, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """`ExtenderArgs`: the pod and either candidate names (live path) or full nodes (simulation)."""

    pod: JsonObject | None
    nodes: JsonObject | None = None
    node_names: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, body: bytes) -> ExtenderArgs:
        what = "ExtenderArgs"
        obj = _loads_object(body, what)
        nodes = _optional_object(obj, "Nodes", what)
        if nodes is not None:
            items = nodes.get("items")
            if items is not None and (
                not isinstance(items, list) or not all(isinstance(i, dict) for i in items)
            ):
                raise ExtenderDecodeError(f"{what}: Nodes.items must be a list of Node objects")
        return cls(
            pod=_optional_object(obj, "Pod", what),
            nodes=nodes,
            node_names=_optional_strings(obj, "NodeNames", what),
        )

    @property
    def node_items(self) -> tuple[JsonObject, ...]:
        """The Node objects of a simulation request (empty for the live path)."""
        if self.nodes is None:
            return ()
        return tuple(self.nodes.get("items") or ())


@dataclass(frozen=True, slots=True)
class ExtenderFilterResult:
    """`ExtenderFilterResult`, always marshalled with all five fields."""

    node_names: Sequence[str] | None = None
    nodes: JsonObject | None = None
    failed_nodes: Mapping[str, str] | None = None
    error: str = ""
    failed_and_unresolvable: Mapping[str, str] | None = None

    def to_json(self) -> JsonObject:
        return {
            "Nodes": self.nodes,
            "NodeNames": None if self.node_names is None else list(self.node_names),
            "FailedNodes": None if self.failed_nodes is None else dict(self.failed_nodes),
            "FailedAndUnresolvableNodes": (
                None if self.failed_and_unresolvable is None else dict(self.failed_and_unresolvable)
            ),
            "Error": self.error,
        }

    @classmethod
    def failure(cls, error: str) -> ExtenderFilterResult:
        return cls(error=error)


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
        args = cls(
            pod_name=_string(obj, "PodName", what),
            pod_namespace=_string(obj, "PodNamespace", what),
            pod_uid=_string(obj, "PodUID", what),
            node=_string(obj, "Node", what),
        )
        required = (("PodName", args.pod_name), ("Node", args.node))
        missing = [name for name, value in required if not value]
        if missing:
            raise ExtenderDecodeError(f"{what}: missing {', '.join(missing)}")
        return args


@dataclass(frozen=True, slots=True)
class ExtenderBindingResult:
    """`ExtenderBindingResult`: an empty `Error` means bound."""

    error: str = ""

    def to_json(self) -> JsonObject:
        return {"Error": self.error}


@dataclass(frozen=True, slots=True)
class PodRef:
    """namespace/name of a pod, parsed from `ns/name` (the `/explain?pod=` form)."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str) -> PodRef:
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"pod reference {text!r} must look like namespace/name")
        return cls(namespace=namespace, name=name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
