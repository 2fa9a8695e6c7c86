"""What the store keeps: each document beside what the store, watches and selectors decide on
(its metadata and field-selector values, as the registry's GetAttrs), decoded once per write.
The document is kept as written, so answers stay byte for byte the same; the store reads it
only to apply a patch and to answer (tests may read it too)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.kube import JsonObject
from pyhami.testing.fake_apiserver.resources import ResourceType
from pyhami.testing.fake_apiserver.status import bad_request, invalid


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """The metadata the store works on."""

    namespace: str  # "" for a cluster-scoped object
    name: str
    uid: str
    resource_version: str
    generation: int
    labels: Mapping[str, str]
    deletion_timestamp: str  # "" while the object is not being deleted
    deletion_grace_s: int
    finalizers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One stored object; `body` is its document without kind and apiVersion, never changed
    (a writer changes a copy)."""

    resource: ResourceType
    meta: ObjectMeta
    fields: Mapping[str, str]  # field label -> the value a field selector compares
    body: JsonObject

    @classmethod
    def decode(cls, resource: ResourceType, body: JsonObject) -> StoredObject:
        """The object a write leaves (validated already: names and labels are strings)."""
        metadata = body["metadata"]
        meta = ObjectMeta(
            namespace=metadata.get("namespace") or "",
            name=metadata["name"],
            uid=metadata.get("uid", ""),
            resource_version=metadata.get("resourceVersion", ""),
            generation=int(metadata.get("generation", 0)),
            labels=metadata.get("labels") or {},
            deletion_timestamp=metadata.get("deletionTimestamp") or "",
            deletion_grace_s=int(metadata.get("deletionGracePeriodSeconds", 0)),
            finalizers=tuple(metadata.get("finalizers") or ()),
        )
        return cls(resource, meta, resource.field_values(body), body)

    def encode(self) -> JsonObject:
        """The object on the wire (get, watch): kind and apiVersion first. It shares the body,
        which no one changes, so every watcher of a change sends the same one."""
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **self.body}

    @property
    def sort_key(self) -> str:
        """The order etcd lists objects in, as continue tokens name it."""
        return f"{self.meta.namespace}/{self.meta.name}"


@dataclass(frozen=True, slots=True)
class Binding:
    """A `pods/binding` request: the node, the pod's preconditions, annotations to add."""

    pod: str
    node: str
    uid: str | None
    resource_version: str | None
    annotations: Mapping[str, str]

    @classmethod
    def decode(cls, pod: str | None, body: object) -> Binding:
        """The Binding in a request body for `pod` (None: posted to the bindings collection,
        the Binding names the pod); 400 without an object or a name, 422 without a node."""
        meta = body.get("metadata") if isinstance(body, dict) else None
        pod = pod or (meta.get("name") if isinstance(meta, dict) else None)
        if not isinstance(pod, str) or not pod:
            raise bad_request("a Binding posted to the bindings collection needs metadata.name")
        if not isinstance(body, dict):
            raise bad_request("a Binding must be a JSON object")
        target = body.get("target")
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise invalid(_BINDINGS, pod, [("target.name", "FieldValueRequired", "Required value")])
        meta = meta or {}
        annotations = meta.get("annotations") or {}
        return cls(pod, node, meta.get("uid"), meta.get("resourceVersion"), annotations)


_BINDINGS = ResourceType("", "v1", "bindings", "Binding", True)
