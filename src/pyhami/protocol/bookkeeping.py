"""Pod bookkeeping values: bind phase, the vgpu/bind unix times, and what Filter writes."""

from collections.abc import Sequence
from datetime import UTC, datetime

from pyhami.model import MigAllocation, PodSingleDevice
from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.goparse import go_quote
from pyhami.protocol.keys import (
    KEY_BIND_PHASE,
    KEY_MIG_ALLOCATIONS,
    KEY_VGPU_NODE,
    KEY_VGPU_TIME,
    BindPhase,
)
from pyhami.protocol.mig import encode_mig_allocations
from pyhami.protocol.pod_devices import encode_pod_single_device
from pyhami.protocol.times import format_unix_seconds
from pyhami.protocol.vendors import VendorKeys


def parse_bind_phase(value: str) -> BindPhase:
    """`hami.io/bind-phase`: exactly `allocating`, `success` or `failed`."""
    try:
        return BindPhase(value)
    except ValueError:
        allowed = ", ".join(phase.value for phase in BindPhase)
        raise ProtocolError(
            KEY_BIND_PHASE,
            value,
            f"unknown bind phase {go_quote(value)} (expected one of {allowed})",
        ) from None


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
