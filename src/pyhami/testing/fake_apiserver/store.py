"""The object store behind the fake API server: what etcd plus the registry do for us.

One global, monotonic resourceVersion shared by every resource (as etcd's revision is); each
write that changes an object bumps it, a write that changes nothing does not (and sends no
watch event). A bounded history of changes serves watches from a resourceVersion; older
versions are answered with 410 Expired. The store is synchronous: every method runs to the
end without awaiting, so list-then-watch is atomic on the event loop.
"""

from __future__ import annotations

import asyncio
import copy
import random
import uuid
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

from pyhami.kube import JsonObject
from pyhami.kube.clock import Clock, SystemClock
from pyhami.kube.errors import StatusDetails
from pyhami.kube.views import read_pod
from pyhami.testing.fake_apiserver import patches, validation
from pyhami.testing.fake_apiserver.objects import Binding, StoredObject
from pyhami.testing.fake_apiserver.resources import (
    ALL_RESOURCES,
    NAMESPACES,
    PODS,
    ResourceType,
    resource_named,
)
from pyhami.testing.fake_apiserver.selectors import Selector
from pyhami.testing.fake_apiserver.status import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    gone,
    invalid,
    not_found,
    stale,
)
from pyhami.testing.fake_apiserver.watch import Change, Watcher

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAME_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectStore:
    """All objects of the fake cluster; the in-process API tests may use directly.

    Writes take documents (as a request body carries them) and return the `StoredObject` they
    leave, decoded once per write; reads return `StoredObject`s."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        history_limit: int = 10_000,
        pod_grace_cap_s: float = 0.2,
        seed: int | None = None,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
    ):
        if history_limit < 1:
            raise ValueError(f"history_limit must be at least 1, got {history_limit}")
        self._clock: Clock = clock or SystemClock()
        self._rng = random.Random(seed)
        self._objects: dict[ResourceType, dict[tuple[str, str], StoredObject]] = {
            r: {} for r in ALL_RESOURCES
        }
        self._history: deque[Change] = deque(maxlen=history_limit)
        self.compacted_version = 0  # every later change is in the history; older watches: 410
        self._watchers: set[Watcher] = set()
        self._pod_grace_cap_s = pod_grace_cap_s
        self.resource_version = 0
        for namespace in namespaces:
            self.create(NAMESPACES, None, {"metadata": {"name": namespace}})

    # --- reading --------------------------------------------------------------------------

    @staticmethod
    def resource(resource: ResourceType | str) -> ResourceType:
        """A resource type by value or by name (`pods`, `leases`, `events.k8s.io/events`)."""
        return resource if isinstance(resource, ResourceType) else resource_named(resource)

    @staticmethod
    def _key(resource: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        if resource.namespaced and not namespace:
            raise bad_request(f"{resource.qualified} are namespaced: a namespace is required")
        return (namespace or "") if resource.namespaced else "", name

    def get(self, resource: ResourceType | str, namespace: str | None, name: str) -> StoredObject:
        """The stored object (404 ApiError when absent)."""
        resource = self.resource(resource)
        found = self._objects[resource].get(self._key(resource, namespace, name))
        if found is None:
            raise not_found(resource, name)
        return found

    def matching(
        self,
        resource: ResourceType | str,
        namespace: str | None = None,
        selector: Selector | None = None,
    ) -> list[StoredObject]:
        """The matching objects, ordered by namespace then name, as etcd lists them."""
        stored = self._objects[self.resource(resource)]
        found = (stored[key] for key in sorted(stored))
        return [
            obj
            for obj in found
            if (namespace is None or not obj.resource.namespaced or obj.meta.namespace == namespace)
            and (selector is None or selector.matches(obj))
        ]

    # --- writing --------------------------------------------------------------------------

    def _commit(
        self, kind: str, resource: ResourceType, draft: JsonObject, old: StoredObject | None
    ) -> StoredObject:
        """Write `draft` (it becomes the stored document) at the next resourceVersion."""
        self.resource_version += 1
        draft["metadata"]["resourceVersion"] = str(self.resource_version)
        obj = StoredObject.decode(resource, draft)
        key = self._key(resource, obj.meta.namespace, obj.meta.name)
        if kind == "DELETED":
            del self._objects[resource][key]
        else:
            self._objects[resource][key] = obj
        if len(self._history) == self._history.maxlen:
            self.compacted_version = self._history[0].resource_version
        change = Change(self.resource_version, resource, kind, obj, old)
        self._history.append(change)
        for watcher in self._watchers:
            watcher.offer(change)
        return obj

    def _generate_name(self, prefix: str) -> str:
        return prefix + "".join(self._rng.choice(_NAME_SUFFIX_CHARS) for _ in range(5))

    def new_uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def prepare_create(
        self, resource: ResourceType | str, namespace: str | None, body: JsonObject
    ) -> JsonObject:
        """The object as admission sees it: checked, defaulted, namespace set (no name yet)."""
        resource = self.resource(resource)
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise bad_request(f"a {resource.kind} must be a JSON object with object metadata")
        validation.check_kind(resource, body.get("kind"), body.get("apiVersion"))
        obj = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("apiVersion", "kind")}
        metadata = obj.setdefault("metadata", {})
        if resource.namespaced:
            given = metadata.get("namespace")
            if given and namespace and given != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            metadata["namespace"] = namespace or given
            if not metadata["namespace"]:
                raise bad_request(f"{resource.qualified} are namespaced: a namespace is required")
        else:
            metadata.pop("namespace", None)
        validation.apply_defaults(resource, obj)
        return obj

    def create(
        self,
        resource: ResourceType | str,
        namespace: str | None,
        body: JsonObject,
        *,
        keep_pod_status: bool = True,
    ) -> StoredObject:
        """Create as kube-apiserver would after admission; returns the stored object.

        Over HTTP a new pod's status is reset to Pending, as kube-apiserver does; the
        in-process default keeps it, so tests and the demo can seed running pods."""
        resource = self.resource(resource)
        obj = self.prepare_create(resource, namespace, body)
        if resource is PODS and not keep_pod_status:
            obj["status"] = {"phase": "Pending"}
        metadata = obj["metadata"]
        if metadata.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = self._generate_name(metadata["generateName"])
        validation.apply_defaults(resource, obj)  # again: a webhook may have removed some
        validation.validate(resource, obj)
        if resource.namespaced and ("", metadata["namespace"]) not in self._objects[NAMESPACES]:
            raise not_found(NAMESPACES, metadata["namespace"])
        key = self._key(resource, metadata.get("namespace"), metadata["name"])
        if key in self._objects[resource]:
            raise already_exists(resource, metadata["name"])
        metadata["uid"] = self.new_uid()
        metadata["creationTimestamp"] = rfc3339(self._clock.now())
        if resource.tracks_generation:
            metadata["generation"] = 1
        for transient in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            metadata.pop(transient, None)
        return self._commit("ADDED", resource, obj, None)

    def _write(self, old: StoredObject, new: JsonObject, subresource: str) -> StoredObject:
        """Finish an update or patch: preconditions, immutable fields, no-op detection."""
        resource, name = old.resource, old.meta.name
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise invalid(resource, name, [("metadata", "FieldValueRequired", "Required value")])
        validation.check_kind(resource, new.get("kind"), new.get("apiVersion"))
        metadata = new["metadata"]
        if metadata.get("name", name) != name:
            raise bad_request(
                f"the name of the object ({metadata.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
        given_version = metadata.get("resourceVersion")
        if given_version and given_version != old.meta.resource_version:
            raise stale(resource, name)
        given_uid = metadata.get("uid")
        if given_uid and given_uid != old.meta.uid:
            validation.check_precondition(old, given_uid, None)
        if subresource == "status":
            document = copy.deepcopy(old.body)
            new = {**document, "status": new.get("status", document.get("status"))}
            metadata = new["metadata"]
        else:
            if resource.has_status:
                if "status" in old.body:
                    new["status"] = copy.deepcopy(old.body["status"])
                else:
                    new.pop("status", None)
            for immutable in (
                "uid",
                "creationTimestamp",
                "namespace",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if immutable in old.body["metadata"]:
                    metadata[immutable] = old.body["metadata"][immutable]
                else:
                    metadata.pop(immutable, None)
            metadata["name"] = name
            validation.validate(resource, new, old)
        validation.decode_quantities(resource, new)
        new.pop("apiVersion", None)
        new.pop("kind", None)
        metadata["resourceVersion"] = old.meta.resource_version
        if new == old.body:
            return old
        # metadata.generation counts changes to everything but metadata and status.
        outside = [
            {k: v for k, v in o.items() if k not in ("metadata", "status")} for o in (new, old.body)
        ]
        if resource.tracks_generation and outside[0] != outside[1]:
            metadata["generation"] = old.meta.generation + 1
        if (
            metadata.get("deletionTimestamp")
            and old.meta.finalizers
            and not metadata.get("finalizers")
        ):
            # The last finalizer is gone from an object already being deleted: it goes now.
            return self._commit("DELETED", resource, new, old)
        return self._commit("MODIFIED", resource, new, old)

    def update(
        self,
        resource: ResourceType | str,
        namespace: str | None,
        name: str,
        body: JsonObject,
        *,
        subresource: str = "",
    ) -> StoredObject:
        """PUT: replace the object; an empty resourceVersion means unconditional."""
        old = self.get(resource, namespace, name)
        return self._write(old, copy.deepcopy(body), subresource)

    def patch(
        self,
        resource: ResourceType | str,
        namespace: str | None,
        name: str,
        patch_type: str,
        body: Any,
        *,
        subresource: str = "",
    ) -> StoredObject:
        """PATCH with one of `PATCH_TYPES`; a resourceVersion in the patch is a precondition."""
        old, patched = self.patched(resource, namespace, name, patch_type, body)
        return self._write(old, patched, subresource)

    def patched(
        self,
        resource: ResourceType | str,
        namespace: str | None,
        name: str,
        patch_type: str,
        body: Any,
    ) -> tuple[StoredObject, JsonObject]:
        """The stored object and the patched copy of its document; nothing is written."""
        old = self.get(resource, namespace, name)
        resource = old.resource
        current = copy.deepcopy(old.encode())
        try:
            if patch_type == MERGE_PATCH:
                if not isinstance(body, dict):
                    raise patches.PatchFormatError("a merge patch must be a JSON object")
                patched = patches.merge_patch(current, body)
            elif patch_type == JSON_PATCH:
                patched = patches.json_patch(current, body)
            elif patch_type == STRATEGIC_MERGE_PATCH:
                patched = patches.strategic_merge_patch(current, body)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {patch_type}")
        except patches.PatchFormatError as err:
            raise bad_request(str(err)) from err
        except patches.PatchApplyError as err:
            raise invalid(resource, name, [("patch", "FieldValueInvalid", str(err))]) from err
        return old, patched

    def delete(
        self,
        resource: ResourceType | str,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> StoredObject:
        """Delete; bound, running pods and objects with finalizers go in two steps."""
        old = self.get(resource, namespace, name)
        resource = old.resource
        validation.check_precondition(old, uid, resource_version)
        grace = self._grace_period(old, grace_period_seconds)
        if grace == 0 and not old.meta.finalizers:
            return self._commit("DELETED", resource, copy.deepcopy(old.body), old)
        if old.meta.deletion_timestamp and (grace is None or grace >= old.meta.deletion_grace_s):
            return old
        new = copy.deepcopy(old.body)
        seconds = grace or 0
        deleted_at = self._clock.now() + timedelta(seconds=seconds)
        new["metadata"]["deletionTimestamp"] = rfc3339(deleted_at)
        new["metadata"]["deletionGracePeriodSeconds"] = seconds
        new["metadata"].pop("generation", None)
        if resource.tracks_generation:
            new["metadata"]["generation"] = old.meta.generation + 1
        committed = self._commit("MODIFIED", resource, new, old)
        if resource is PODS and not old.meta.finalizers:
            self._finish_later(committed, seconds)
        return committed

    def _grace_period(self, obj: StoredObject, requested: int | None) -> int | None:
        if requested is not None and requested < 0:
            raise invalid(
                obj.resource,
                obj.meta.name,
                [("gracePeriodSeconds", "FieldValueInvalid", "Invalid value: must be >= 0")],
            )
        if obj.resource is not PODS:
            return 0 if requested is None else requested
        pod = read_pod(obj.body)
        # An unscheduled or finished pod has no kubelet to wait for: it goes at once.
        if not pod.node_name or pod.finished:
            return 0
        if requested is not None:
            return requested
        return 30 if pod.termination_grace_s is None else pod.termination_grace_s

    def _finish_later(self, pod: StoredObject, seconds: int) -> None:
        """Stand in for the kubelet confirming the pod stopped (capped, so tests stay quick)."""
        key = self._key(PODS, pod.meta.namespace, pod.meta.name)

        def finish() -> None:
            current = self._objects[PODS].get(key)
            if current is not None and current.meta.uid == pod.meta.uid:
                self._commit("DELETED", PODS, copy.deepcopy(current.body), current)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # used in-process outside an event loop: nobody to wait for
            finish()
            return
        loop.call_later(min(float(seconds), self._pod_grace_cap_s), finish)

    def bind(self, namespace: str, name: str | None, body: object) -> None:
        """`pods/binding` of pod `name` (None: the one the Binding names): set spec.nodeName
        once; a bound pod answers 409."""
        binding = Binding.decode(name, body)
        name = binding.pod
        old = self.get(PODS, namespace, name)
        validation.check_precondition(old, binding.uid, binding.resource_version)
        if old.meta.deletion_timestamp:
            raise conflict(
                PODS, name, f"pod {name} is being deleted, cannot be assigned to a host", "binding"
            )
        bound = old.fields["spec.nodeName"]
        if bound:
            raise conflict(
                PODS, name, f'pod {name} is already assigned to node "{bound}"', "binding"
            )
        new = copy.deepcopy(old.body)
        new["spec"]["nodeName"] = binding.node
        if binding.annotations:
            new["metadata"].setdefault("annotations", {}).update(binding.annotations)
        conditions = new.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(self._clock.now()),
            }
        )
        self._commit("MODIFIED", PODS, new, old)

    # --- watching -------------------------------------------------------------------------

    def list_version(self) -> str:
        return str(self.resource_version)

    def watch(
        self,
        resource: ResourceType | str,
        namespace: str | None,
        selector: Selector,
        resource_version: str | None,
    ) -> Watcher:
        """Open a watch; an unset or "0" version starts with ADDED for what exists now."""
        resource = self.resource(resource)
        watcher = Watcher(resource, namespace, selector)
        if not resource_version or resource_version == "0":
            for obj in self.matching(resource, namespace, selector):
                watcher.send("ADDED", obj)
        else:
            since = _parse_version(resource_version)
            if since < self.compacted_version:
                raise gone(f"too old resource version: {since} ({self.compacted_version})")
            for change in self._history:
                if change.resource_version > since:
                    watcher.offer(change)
        self._watchers.add(watcher)
        return watcher

    def open_watchers(self, resource: ResourceType | str | None = None) -> list[Watcher]:
        wanted = None if resource is None else self.resource(resource)
        return [w for w in self._watchers if wanted is None or w.resource is wanted]

    def stop_watch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def drop_watches(self, resource: ResourceType | str | None = None) -> int:
        """End every open watch (of one resource); returns how many were dropped."""
        dropped = self.open_watchers(resource)
        for watcher in dropped:
            watcher.close()
            self._watchers.discard(watcher)
        return len(dropped)

    def compact(self) -> None:
        """Forget the watch history, as an etcd compaction does: older versions now get 410."""
        self._history.clear()
        self.compacted_version = self.resource_version

    def check_list_version(self, resource_version: str | None, match: str | None) -> None:
        """List semantics: we always serve the newest state, which satisfies NotOlderThan."""
        if not resource_version or resource_version == "0":
            if match == "Exact":
                raise bad_request("resourceVersionMatch=Exact requires a non-zero resourceVersion")
            return
        wanted = _parse_version(resource_version)
        if wanted > self.resource_version:
            raise ApiError(
                504,
                "Timeout",
                f"Too large resource version: {wanted}, current: {self.resource_version}",
                StatusDetails(
                    causes=(("", "ResourceVersionTooLarge", "Too large resource version"),),
                    retry_after_s=1,
                ),
            )
        if match == "Exact" and wanted != self.resource_version:
            raise gone(f"too old resource version: {wanted} ({self.resource_version})")


def _parse_version(text: str) -> int:
    if not text.isdigit():
        raise bad_request(f"invalid resource version {text!r}: must be a decimal integer")
    return int(text)
