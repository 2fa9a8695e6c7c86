"""JSON merge-patch bodies (`application/merge-patch+json`) HAMi sends.

Builders return plain dicts for the Kubernetes client; `encode_patch` renders one exactly
as HAMi's Go code sends it (compact, keys sorted at every level, Go string escaping). A
`None` annotation value deletes the key (JSON `null`).
"""

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from pyhami.model import MigAllocation, PodSingleDevice
from pyhami.protocol.gojson import dumps
from pyhami.protocol.keys import (
    KEY_MIG_ALLOCATIONS,
    KEY_NODE_LOCK,
    KEY_VGPU_NODE,
    KEY_VGPU_TIME,
    LABEL_VGPU_NODE,
)
from pyhami.protocol.mig import encode_mig_allocations
from pyhami.protocol.pod_devices import encode_pod_single_device
from pyhami.protocol.times import format_unix_seconds
from pyhami.protocol.vendors import VendorKeys

MERGE_PATCH = "application/merge-patch+json"
JsonObject = dict[str, object]


def pod_annotations_patch(annotations: Mapping[str, str | None]) -> JsonObject:
    """HAMi `PatchPodAnnotations`: the annotations, plus the `hami.io/vgpu-node` label when
    the annotations set a non-empty node name."""
    metadata: JsonObject = {"annotations": dict(sorted(annotations.items()))}
    node = annotations.get(KEY_VGPU_NODE)
    if node:
        metadata["labels"] = {LABEL_VGPU_NODE: node}
    return {"metadata": metadata}


def filter_annotations(
    node: str,
    containers: PodSingleDevice,
    mig_allocations: Sequence[MigAllocation],
    keys: VendorKeys,
    now: datetime | int,
) -> dict[str, str]:
    """What HAMi's Filter writes on a pod it placed: the node, the time (`now`, a datetime
    or unix seconds), the vendor's devices to allocate and allocated, and MIG allocations."""
    moment = datetime.fromtimestamp(now, UTC) if isinstance(now, int) else now
    encoded = encode_pod_single_device(containers)
    annotations = {
        KEY_VGPU_NODE: node,
        KEY_VGPU_TIME: format_unix_seconds(moment),
        keys.to_allocate: encoded,
        keys.allocated: encoded,
    }
    if mig_allocations:
        annotations[KEY_MIG_ALLOCATIONS] = encode_mig_allocations(mig_allocations)
    return annotations


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


def node_lock_set_patch(value: str, resource_version: str) -> JsonObject:
    """Take the node lock, only if the node is still at `resource_version`."""
    return _guarded({KEY_NODE_LOCK: value}, resource_version)


def node_lock_release_patch(resource_version: str) -> JsonObject:
    """Remove the node lock, only if the node is still at `resource_version`."""
    return _guarded({KEY_NODE_LOCK: None}, resource_version)


def mig_allocations_patch(value: str, resource_version: str) -> JsonObject:
    """The device plugin's MIG runtime-identity update of `hami.io/vgpu-mig-allocations`."""
    return _guarded({KEY_MIG_ALLOCATIONS: value}, resource_version)


def _sorted(value: object) -> object:
    if isinstance(value, Mapping):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted(item) for item in value]
    return value


def encode_patch(body: Mapping[str, object]) -> str:
    """The exact bytes HAMi sends for `body` (Go `json.Marshal` of nested maps)."""
    return dumps(_sorted(body))
