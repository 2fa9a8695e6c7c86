"""Kubernetes manifests as pyhami's tools read and write them, typed on the caller's side.

Reading: the objects of a file (one object, a stream, or a `List`/`NodeList`/`PodList` whose
items may omit `kind`) or of the API's lists become views, each read once. Writing: the typed
intents the demo describes become the JSON the API server takes.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyhami.kube.client import JsonObject
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


@dataclass(frozen=True, slots=True)
class Unread:
    """An object of a kind read elsewhere (PodDisruptionBudgets: `scheduler.budgets`) or not at
    all; `document` goes on to its reader untouched."""

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
    """One object by its `kind` (or `kind`, for the items of the API's lists)."""
    kind = kind or obj.get("kind")
    if kind == "Pod":
        return read_pod(obj)
    if kind == "Node":
        return read_node(obj)
    if kind == "ResourceQuota":
        return _quota(obj)
    if not isinstance(kind, str):
        raise ManifestError("an object without a kind")
    return Unread(kind, dict(obj))


def _quota(obj: Mapping[str, Any]) -> QuotaView:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    spec = obj.get("spec")
    hard = (spec if isinstance(spec, Mapping) else {}).get("hard") or {}
    name = metadata.get("name")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(name, str) or not isinstance(hard, Mapping):
        raise ManifestError("a ResourceQuota needs metadata.name and a spec.hard mapping")
    return QuotaView(f"{namespace}/{name}", str(namespace), hard)
