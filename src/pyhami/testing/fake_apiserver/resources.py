"""The resource types the fake API server serves, with what kube-apiserver knows about each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyhami.kube.resources import Resource

_NAMESPACED_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_CLUSTER_FIELDS = frozenset({"metadata.name"})

# Field labels kube-apiserver accepts in a fieldSelector, per resource (pkg/registry/*/strategy.go).
_POD_FIELDS = _NAMESPACED_FIELDS | {
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
}
_NODE_FIELDS = _CLUSTER_FIELDS | {"spec.unschedulable"}
_NAMESPACE_FIELDS = _CLUSTER_FIELDS | {"status.phase"}
_CORE_EVENT_FIELDS = _NAMESPACED_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}
_EVENTS_V1_FIELDS = _NAMESPACED_FIELDS | {
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "reason",
    "reportingController",
    "type",
}


@dataclass(frozen=True, slots=True)
class ResourceType(Resource):
    """One REST resource: where it lives, what it is called (`Resource`), what it supports."""

    field_labels: frozenset[str] = field(default=_NAMESPACED_FIELDS)
    has_status: bool = False
    # Whether the generation counter tracks changes outside metadata and status.
    tracks_generation: bool = True

    @property
    def qualified(self) -> str:
        """The name kube-apiserver uses in messages: `pods`, `leases.coordination.k8s.io`."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    def field_values(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """Each field label's string, as kube-apiserver compares a field selector (missing: "")."""
        return {label: _field_value(obj, label) for label in self.field_labels}


def _field_value(obj: object, label: str) -> str:
    for part in label.split("."):
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    if label == "source" and isinstance(obj, Mapping):
        obj = obj.get("component")
    if isinstance(obj, bool):
        return "true" if obj else "false"
    return "" if obj is None else str(obj)


PODS = ResourceType("", "v1", "pods", "Pod", True, _POD_FIELDS, has_status=True)
NODES = ResourceType("", "v1", "nodes", "Node", False, _NODE_FIELDS, has_status=True)
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, _NAMESPACE_FIELDS, True)
EVENTS = ResourceType(
    "", "v1", "events", "Event", True, _CORE_EVENT_FIELDS, tracks_generation=False
)
EVENTS_V1 = ResourceType(
    "events.k8s.io", "v1", "events", "Event", True, _EVENTS_V1_FIELDS, tracks_generation=False
)
RESOURCE_QUOTAS = ResourceType("", "v1", "resourcequotas", "ResourceQuota", True, has_status=True)
CONFIG_MAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, tracks_generation=False)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True, tracks_generation=False)
SERVICE_ACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
# Dynamic Resource Allocation (resource.k8s.io/v1)
RESOURCE_SLICES = ResourceType(
    "resource.k8s.io",
    "v1",
    "resourceslices",
    "ResourceSlice",
    False,
    _CLUSTER_FIELDS | {"spec.nodeName", "spec.driver", "spec.pool.name"},
)
RESOURCE_CLAIMS = ResourceType(
    "resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, has_status=True
)
MUTATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
    _CLUSTER_FIELDS,
)

ALL_RESOURCES: tuple[ResourceType, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    EVENTS,
    EVENTS_V1,
    RESOURCE_QUOTAS,
    CONFIG_MAPS,
    SECRETS,
    SERVICE_ACCOUNTS,
    LEASES,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    MUTATING_WEBHOOKS,
)

_BY_PATH = {(r.group, r.version, r.plural): r for r in ALL_RESOURCES}


def find_resource(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def resource_named(name: str) -> ResourceType:
    """`pods`, `leases`, `events.k8s.io/events`...: the in-process API's way to name a resource."""
    group, _, plural = name.rpartition("/")
    for resource in ALL_RESOURCES:
        if resource.plural == plural and resource.group == group:
            return resource
    if not group:
        matches = [r for r in ALL_RESOURCES if r.plural == plural]
        if len(matches) == 1:
            return matches[0]
    known = ", ".join(sorted({r.qualified for r in ALL_RESOURCES}))
    raise KeyError(f"the fake API server does not serve {name!r}; it serves {known}")
