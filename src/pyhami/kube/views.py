"""The one reader of pod and node JSON: each object is checked and turned into its view once.

Every field pyhami decides on is read here, container resources included, so the webhook,
the engine and the device plugin agree on what a pod asks for. A value that
cannot be read is a `PodSpecError` (`NodeSpecError`) naming the object and the field.
"""

import functools
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import structlog

from pyhami.kube.client import JsonObject
from pyhami.kube.informer import EventHandlers
from pyhami.model import (
    ContainerView,
    InitStatusView,
    NodeSpecError,
    NodeView,
    PodSpecError,
    PodView,
)
from pyhami.model.views import (
    Budget,
    BudgetError,
    ExtendedClaimView,
    SelectorRequirement,
    TaintView,
    TolerationView,
)

# One shared empty mapping: most pods have no requests, many no labels, and an empty copy per
# view costs ~110 bytes (the scheduler keeps a view of every pod).
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy (the caller may change its JSON later: the webhook mutates the pod)."""
    return MappingProxyType(dict(values)) if values else _EMPTY


def _object(value: object, where: str, error: type[ValueError] = PodSpecError) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{where} must be an object, got {type(value).__name__}")
    return value


def _strings(
    value: object, where: str, entry: str, error: type[ValueError] = PodSpecError
) -> Mapping[str, str]:
    """Labels or annotations: an object whose values are all strings."""
    found = _object(value, where, error)
    for key, text in found.items():
        if not isinstance(text, str):
            raise error(f"{entry} {key!r} must be a string, got {text!r}")
    return _frozen(found)


def _text(value: object) -> str:
    """An optional string field; anything else counts as absent."""
    return value if isinstance(value, str) else ""


def read_container(value: Mapping[str, Any], *, init: bool) -> ContainerView:
    """One container's view (`init`: it is an init container, so it may be a sidecar);
    PodSpecError naming the container when its name or resources are unreadable."""
    name = value.get("name", "")
    if not isinstance(name, str):
        raise PodSpecError(f"container name must be a string, got {name!r}")
    label = ContainerView(name=name).label
    resources = value.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise PodSpecError(f"container {label}: resources must be a mapping")
    sections = []
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise PodSpecError(f"container {label}: resources.{section} must be a mapping")
        sections.append(_frozen(values))
    env = value.get("env") or []
    if not isinstance(env, list):
        raise PodSpecError(f"container {label}: env must be a list")
    return ContainerView(
        name=name,
        limits=sections[0],
        requests=sections[1],
        env=tuple(
            (item["name"], item.get("value") if "valueFrom" not in item else None)
            for item in env
            if isinstance(item, Mapping) and isinstance(item.get("name"), str)
        ),
        sidecar=init and value.get("restartPolicy") == "Always",
        image=sys.intern(_text(value.get("image"))),  # one string per image, not per pod
        command=tuple(str(word) for key in ("command", "args") for word in _list(value.get(key))),
        claims=tuple(
            (_text(entry.get("name")), _text(entry.get("request")))
            for entry in _entries(resources.get("claims"))
        ),
    )


def _containers(spec: Mapping[str, Any], field: str, pod: str) -> tuple[ContainerView, ...]:
    containers = spec.get(field)
    if containers is None:
        return ()
    if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
        raise PodSpecError(f"pod {pod}: spec.{field} must be a list of containers")
    try:
        return tuple(read_container(c, init=field == "initContainers") for c in containers)
    except PodSpecError as err:
        raise PodSpecError(f"pod {pod}: {err}") from err


def _init_statuses(status: Mapping[str, Any], pod: str) -> tuple[InitStatusView, ...]:
    entries = status.get("initContainerStatuses") or []
    if not isinstance(entries, list):
        return ()  # unreadable: the init containers count as not finished
    found = []
    for value in entries:
        entry = _object(value, f"pod {pod}: status.initContainerStatuses[]")
        state = _object(entry.get("state"), f"pod {pod}: status.initContainerStatuses[].state")
        terminated = state.get("terminated")
        succeeded = isinstance(terminated, Mapping) and terminated.get("exitCode") == 0
        found.append(InitStatusView(name=_text(entry.get("name")), succeeded=succeeded))
    return tuple(found)


def _integer(value: object) -> int | None:
    """An optional integer field; anything else (a bool too) counts as absent."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _grace(value: object) -> int | None:
    """A grace period in seconds; None when absent or unusable."""
    seconds = _integer(value)
    return seconds if seconds is not None and seconds >= 0 else None


def pod_identity(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """(key, namespace, name): the key is the UID, or namespace/name when there is none
    (offline input). PodSpecError when the pod has no name or a namespace that is no string."""
    metadata = _object(pod.get("metadata"), "pod metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise PodSpecError("pod has no metadata.name")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise PodSpecError(f"pod {name}: metadata.namespace must be a string")
    return _text(metadata.get("uid")) or f"{namespace}/{name}", namespace, name


def read_pod(pod: Mapping[str, Any]) -> PodView:
    """The pod's view; PodSpecError naming the pod and the field when a field is unreadable."""
    key, namespace, name = pod_identity(pod)
    metadata = _object(pod.get("metadata"), "pod metadata")
    ref = f"{namespace}/{name}"
    spec = _object(pod.get("spec"), f"pod {ref}: spec")
    status = _object(pod.get("status"), f"pod {ref}: status")
    return PodView(
        key=key,
        namespace=namespace,
        name=name,
        uid=_text(metadata.get("uid")),
        labels=_strings(metadata.get("labels"), "pod metadata.labels", "pod label"),
        annotations=_strings(
            metadata.get("annotations"), "pod metadata.annotations", "pod annotation"
        ),
        scheduler_name=_text(spec.get("schedulerName")),
        node_name=_text(spec.get("nodeName")),
        phase=_text(status.get("phase")),
        deleting=metadata.get("deletionTimestamp") is not None,
        priority=_integer(spec.get("priority")) or 0,
        preemption_policy=_text(spec.get("preemptionPolicy")),
        termination_grace_s=_grace(spec.get("terminationGracePeriodSeconds")),
        nominated_node_name=_text(status.get("nominatedNodeName")),
        init_containers=_containers(spec, "initContainers", ref),
        containers=_containers(spec, "containers", ref),
        init_statuses=_init_statuses(status, ref),
        resource_version=_text(metadata.get("resourceVersion")),
        resource_claims=_claim_names(spec, status),
        extended_claim=_extended_claim(status),
        tolerations=_tolerations(
            tuple(
                _texts(t, "key", "operator", "value", "effect")
                for t in _entries(spec.get("tolerations"))
            )
        ),
        node_selector=_strings(
            spec.get("nodeSelector"), f"pod {ref}: spec.nodeSelector", "node selector"
        ),
    )


def read_node(node: Mapping[str, Any]) -> NodeView:
    """The node's view; NodeSpecError naming the node and the field when one is unreadable."""
    metadata = _object(node.get("metadata"), "node metadata", NodeSpecError)
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise NodeSpecError("node has no metadata.name")
    status = _object(node.get("status"), f"node {name}: status", NodeSpecError)
    spec = _object(node.get("spec"), f"node {name}: spec", NodeSpecError)
    return NodeView(
        name=name,
        labels=_strings(
            metadata.get("labels"), f"node {name}: metadata.labels", "node label", NodeSpecError
        ),
        annotations=_strings(
            metadata.get("annotations"),
            f"node {name}: metadata.annotations",
            "node annotation",
            NodeSpecError,
        ),
        allocatable=_frozen(
            _object(status.get("allocatable"), f"node {name}: status.allocatable", NodeSpecError)
        ),
        resource_version=_text(metadata.get("resourceVersion")),
        uid=_text(metadata.get("uid")),
        ready=all(
            c.get("status") == "True"
            for c in _entries(status.get("conditions"))
            if c.get("type") == "Ready"
        ),
        unschedulable=spec.get("unschedulable") is True,
        taints=tuple(
            TaintView(*_texts(t, "key", "value", "effect")) for t in _entries(spec.get("taints"))
        ),
    )


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _entries(value: object) -> list[Mapping[str, Any]]:
    """The objects of an optional list; anything else in it is left out."""
    return [entry for entry in _list(value) if isinstance(entry, Mapping)]


def _texts(entry: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    return tuple(_text(entry.get(key)) for key in keys)


def _claim_names(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Mapping[str, str]:
    """Pod claim name -> ResourceClaim name, for the claims that have one yet."""
    names = {
        _text(entry.get("name")): _text(entry.get("resourceClaimName"))
        for entry in _entries(spec.get("resourceClaims"))
        + _entries(status.get("resourceClaimStatuses"))
        if _text(entry.get("resourceClaimName"))
    }
    return _frozen(names)


def _extended_claim(status: Mapping[str, Any]) -> ExtendedClaimView | None:
    extended = status.get("extendedResourceClaimStatus")
    if not isinstance(extended, Mapping):
        return None
    return ExtendedClaimView(
        claim_name=_text(extended.get("resourceClaimName")),
        mappings=tuple(
            _texts(mapping, "containerName", "resourceName", "requestName")
            for mapping in _entries(extended.get("requestMappings"))
        ),
    )


def pod_handlers(
    keep: Callable[[PodView], None], forget: Callable[[str], None]
) -> EventHandlers[JsonObject]:
    """Informer handlers that read each pod once per event: `keep` gets the view of a pod added
    or changed, `forget` the namespace/name of one deleted or no longer readable (logged)."""

    def changed(obj: JsonObject) -> None:
        try:
            keep(read_pod(obj))
        except PodSpecError as err:
            structlog.get_logger(__name__).warning("pod left out", error=str(err))
            gone(obj)

    def gone(obj: JsonObject) -> None:
        _, namespace, name = pod_identity(obj)
        forget(f"{namespace}/{name}")

    return EventHandlers(on_add=changed, on_update=lambda _, new: changed(new), on_delete=gone)


def read_budget(pdb: Mapping[str, Any]) -> Budget:
    """A PodDisruptionBudget's view: it allows no disruption while the disruption controller
    has not seen its latest spec. BudgetError naming it when its selector cannot be read."""
    meta = pdb.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    name = f"{namespace}/{meta.get('name') or ''}"
    status = pdb.get("status") or {}
    allowed = status.get("disruptionsAllowed")
    generation = meta.get("generation") or 0
    if not isinstance(allowed, int) or (status.get("observedGeneration") or 0) < generation:
        allowed = 0
    selector = (pdb.get("spec") or {}).get("selector")
    try:
        requirements = None if selector is None else label_selector_requirements(selector)
    except ValueError as err:
        raise BudgetError(f"PodDisruptionBudget {name}: spec.selector: {err}") from err
    disrupted = frozenset(status.get("disruptedPods") or {})
    return Budget(name, namespace, requirements, allowed, disrupted)


def label_selector_requirements(selector: object) -> tuple[SelectorRequirement, ...]:
    """A metav1.LabelSelector's requirements, ANDed; a ValueError names what is unreadable."""
    if not isinstance(selector, Mapping):
        raise ValueError("label selector is not an object")
    found = [
        SelectorRequirement(str(key), "In", frozenset({str(value)}))
        for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        operator = expression.get("operator") if isinstance(expression, Mapping) else None
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown label selector operator {operator!r}")
        values = frozenset(str(value) for value in expression.get("values") or ())
        found.append(SelectorRequirement(str(expression.get("key") or ""), operator, values))
    return tuple(found)


@functools.lru_cache(maxsize=1024)
def _tolerations(entries: tuple[tuple[str, ...], ...]) -> tuple[TolerationView, ...]:
    """The views of a pod's tolerations, shared by the pods that have the same ones (most pods
    of a cluster have one of a few sets: the scheduler keeps 10,000 views)."""
    return tuple(TolerationView(*entry) for entry in entries)
