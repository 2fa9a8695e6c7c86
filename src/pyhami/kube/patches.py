"""JSON merge-patch bodies (`application/merge-patch+json`) HAMi sends: Kubernetes wire encoders.

Builders return plain dicts for the Kubernetes client. A `None` annotation value deletes the
key (JSON `null`).
"""

from collections.abc import Iterable, Mapping

from pyhami.kube.client import JsonObject
from pyhami.protocol.keys import KEY_MIG_ALLOCATIONS, KEY_NODE_LOCK, KEY_VGPU_NODE, LABEL_VGPU_NODE


def pod_annotations_patch(annotations: Mapping[str, str | None]) -> JsonObject:
    """HAMi `PatchPodAnnotations`: the annotations, plus the `hami.io/vgpu-node` label when
    the annotations set a non-empty node name."""
    metadata: JsonObject = {"annotations": dict(sorted(annotations.items()))}
    node = annotations.get(KEY_VGPU_NODE)
    if node:
        metadata["labels"] = {LABEL_VGPU_NODE: node}
    return {"metadata": metadata}


def node_annotations_patch(annotations: Mapping[str, str | None]) -> JsonObject:
    """HAMi `PatchNodeAnnotations`."""
    return {"metadata": {"annotations": dict(sorted(annotations.items()))}}


def remove_annotations_patch(keys: Iterable[str]) -> JsonObject:
    """HAMi `MarkAnnotationsToDelete`: every key set to null."""
    return {"metadata": {"annotations": dict.fromkeys(sorted(keys))}}


def pod_labels_patch(labels: Mapping[str, str | None]) -> JsonObject:
    """HAMi `PatchPodLabels` (e.g. `hami.io/scheduler-role`)."""
    return {"metadata": {"labels": dict(sorted(labels.items()))}}


def _guarded(annotations: Mapping[str, str | None], resource_version: str) -> JsonObject:
    # resourceVersion in a merge patch makes the API server refuse a stale write (409).
    return {"metadata": {"annotations": dict(annotations), "resourceVersion": resource_version}}


def node_lock_patch(value: str | None, resource_version: str) -> JsonObject:
    """Take the node lock (None: remove it), only if the node is still at `resource_version`."""
    return _guarded({KEY_NODE_LOCK: value}, resource_version)


def mig_allocations_patch(value: str, resource_version: str) -> JsonObject:
    """The device plugin's MIG runtime-identity update of `hami.io/vgpu-mig-allocations`."""
    return _guarded({KEY_MIG_ALLOCATIONS: value}, resource_version)
