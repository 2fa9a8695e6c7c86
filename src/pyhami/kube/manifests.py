"""Kubernetes manifests as pyhami's tools read and write them, typed on the caller's side.

Reading: the objects of a file (one object, a stream, or a `List`/`NodeList`/`PodList` whose
items may omit `kind`) or of the API's lists become views, each read once. Writing: the typed
intents the demo describes become the JSON the API server takes.
"""

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyhami.kube.client import JsonObject, resource_version
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeView, PodView

# A typed list's items may omit `kind` (the API server leaves it out): they are of this kind.
_LIST_KINDS: dict[str, str | None] = {"List": None, "NodeList": "Node", "PodList": "Pod"}


class ManifestError(ValueError):
    """An object that cannot be read; the message names the object and what is wrong."""


@dataclass(frozen=True, slots=True)
class QuotaView:
    """A ResourceQuota: its namespace/name, namespace and `spec.hard`."""

    key: str
    namespace: str
    hard: Mapping[str, object]
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class Unread:
    """An object of a kind read elsewhere (PodDisruptionBudgets: `kube.views.read_budget`) or
    not at all; `document` goes on to its reader untouched."""

    kind: str
    document: JsonObject


ObjectView = PodView | NodeView | QuotaView | Unread


def read_manifests(document: object) -> Iterator[ObjectView]:
    """Each object of a YAML/JSON document (None: none), lists flattened; ManifestError,
    PodSpecError or NodeSpecError naming the first one that cannot be read."""
    if document is None:
        return
    if not isinstance(document, Mapping):
        raise ManifestError(f"expected Kubernetes objects, got {type(document).__name__}")
    list_kind = document.get("kind")
    if list_kind not in _LIST_KINDS:
        yield read_object(document)
        return
    items = document.get("items") or []
    if not isinstance(items, list):
        raise ManifestError(f"{list_kind}.items must be a list")
    item_kind = _LIST_KINDS[str(list_kind)]
    for item in items:
        kindless = item_kind is not None and isinstance(item, Mapping) and "kind" not in item
        yield from read_manifests({**item, "kind": item_kind} if kindless else item)


def read_object(obj: Mapping[str, Any], kind: str | None = None) -> ObjectView:
    """One object, read by its own `kind`, or by `kind` (the API's list items carry none)."""
    kind = kind or obj.get("kind")
    if kind == "Pod":
        return read_pod(obj)
    if kind == "Node":
        return read_node(obj)
    if kind == "ResourceQuota":
        return read_quota(obj)
    if not isinstance(kind, str):
        raise ManifestError("an object without a kind")
    return Unread(kind, dict(obj))


def read_quota(obj: Mapping[str, Any]) -> QuotaView:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    spec = obj.get("spec")
    hard = (spec if isinstance(spec, Mapping) else {}).get("hard") or {}
    name = metadata.get("name")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(name, str) or not isinstance(hard, Mapping):
        raise ManifestError("a ResourceQuota needs metadata.name and a spec.hard mapping")
    return QuotaView(f"{namespace}/{name}", str(namespace), hard, resource_version(obj))


@dataclass(frozen=True, slots=True)
class NamespaceManifest:
    """A Namespace to create: its name, and the labels and annotations a pod file gave it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> JsonObject:
        extra = {"labels": self.labels, "annotations": self.annotations}
        metadata = {"name": self.name, **{key: dict(v) for key, v in extra.items() if v}}
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


@dataclass(frozen=True, slots=True)
class PodManifest:
    """A user's pod as the API server is to get it: checked, its namespace set and its
    quantities strings. The pod file may use any field of a Pod, so `document` keeps them all;
    only the API server reads it."""

    namespace: str
    name: str
    document: JsonObject


def read_pod_file_object(document: object, namespace: str) -> list[PodManifest | NamespaceManifest]:
    """The Pod or Namespace of one document of a pod file, or each one of a `List`'s items
    (pods in `namespace` when they name none); ManifestError naming the item and the field."""
    items = document.get("items") if isinstance(document, dict) else None
    if not isinstance(document, dict) or document.get("kind") != "List":
        return [_pod_file_object(document, namespace)]
    if not isinstance(items, list):
        raise ManifestError("a List needs items: [...]")
    found = []
    for number, item in enumerate(items, start=1):
        try:
            found.append(_pod_file_object(item, namespace))
        except ManifestError as err:
            raise ManifestError(f"item {number}: {err}") from err
    return found


def _pod_file_object(document: object, namespace: str) -> PodManifest | NamespaceManifest:
    if not isinstance(document, dict):
        raise ManifestError(f"expected a Pod mapping, got {type(document).__name__}")
    kind = document.get("kind", "Pod")
    metadata = document.get("metadata")
    if kind not in ("Pod", "Namespace"):
        raise ManifestError(f"kind {kind!r} is neither a Pod nor a Namespace")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise ManifestError(f"{'' if kind == 'Pod' else 'Namespace '}metadata.name is missing")
    if kind == "Namespace":
        found = [metadata.get(key) or {} for key in ("labels", "annotations")]
        if not all(isinstance(values, dict) for values in found):
            raise ManifestError("Namespace metadata.labels and annotations must be mappings")
        strings = [{str(k): str(v) for k, v in values.items()} for values in found]
        return NamespaceManifest(metadata["name"], *strings)
    spec = document.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        raise ManifestError(f"pod {metadata['name']!r} has no spec.containers list")
    pod = dict(document)
    pod["apiVersion"] = pod.get("apiVersion", "v1")
    pod["kind"] = "Pod"
    pod["metadata"] = {**metadata, "namespace": str(metadata.get("namespace") or namespace)}
    pod["spec"] = {**spec, "containers": [_container(c) for c in spec["containers"]]}
    if spec.get("initContainers"):
        pod["spec"]["initContainers"] = [_container(c) for c in spec["initContainers"]]
    return PodManifest(pod["metadata"]["namespace"], metadata["name"], pod)


def _container(container: object) -> JsonObject:
    """Quantities as the API server stores them: YAML's `nvidia.com/gpu: 1` becomes "1"."""
    if not isinstance(container, dict) or not isinstance(container.get("name"), str):
        raise ManifestError("every container needs a name")
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise ManifestError(f"container {container['name']!r}: resources is not a mapping")
    quantities: JsonObject = {}
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, dict) or not all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in values.values()
        ):
            raise ManifestError(
                f"container {container['name']!r}: resources.{section} must map names to quantities"
            )
        if values:
            quantities[section] = {str(k): str(v) for k, v in values.items()}
    return {**container, "resources": quantities}


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """A container's use of a ResourceClaim the pod's spec names (or, from a template, status)."""

    container: str
    claim: str  # the ResourceClaim's own name
    request: str = ""  # the one request of the claim the container names; "": all of them


@dataclass(frozen=True, slots=True)
class PodState:
    """A pod as the API returns it: its view, and what its status says beyond it."""

    pod: PodView
    message: str = ""  # status.message
    unscheduled: str | None = None  # kube-scheduler's message when it found no node

    @property
    def claims(self) -> tuple[ClaimUse, ...]:
        """Each container's use of a claim whose ResourceClaim is known (by name or status)."""
        pod = self.pod
        return tuple(
            ClaimUse(container.name, pod.resource_claims[name], request)
            for container in pod.all_containers
            for name, request in container.claims
            if name in pod.resource_claims
        )


def read_pod_state(pod: Mapping[str, Any]) -> PodState:
    """The pod's view and status; PodSpecError as `read_pod` raises it."""
    view = read_pod(pod)
    status = pod.get("status") or {}
    unscheduled = next(
        (
            str(condition.get("message", ""))
            for condition in status.get("conditions") or ()
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False"
        ),
        None,
    )
    return PodState(view, str(status.get("message", "")), unscheduled)


@dataclass(frozen=True, slots=True)
class MatchCondition:
    """A webhook's matchCondition: the webhook is called only where `expression` (CEL) holds."""

    name: str
    expression: str

    def encode(self) -> JsonObject:
        return {"name": self.name, "expression": self.expression}


@dataclass(frozen=True, slots=True)
class PodWebhook:
    """A mutating webhook on pods, as a MutatingWebhookConfiguration holds it."""

    name: str
    path: str
    operations: tuple[str, ...]
    skip_label: tuple[str, str] | None = None  # (key, value): a pod labelled so is not sent
    conditions: tuple[MatchCondition, ...] = ()

    def encode(self, base_url: str, ca_pem: bytes) -> JsonObject:
        """The configuration's entry, as the chart writes it; the server at `base_url`."""
        pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}
        entry: JsonObject = {
            "name": self.name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "timeoutSeconds": 10,
            "clientConfig": {
                "url": f"{base_url}{self.path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            },
            "rules": [{"operations": list(self.operations), **pods}],
        }
        if self.skip_label is not None:
            key, value = self.skip_label
            expression = {"key": key, "operator": "NotIn", "values": [value]}
            entry["objectSelector"] = {"matchExpressions": [expression]}
        if self.conditions:
            entry["matchConditions"] = [condition.encode() for condition in self.conditions]
        return entry


def webhook_configuration(
    name: str, webhooks: Iterable[PodWebhook], base_url: str, ca_pem: bytes
) -> JsonObject:
    """A MutatingWebhookConfiguration of `webhooks`, served at `base_url` (CA `ca_pem`)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [hook.encode(base_url, ca_pem) for hook in webhooks],
    }
