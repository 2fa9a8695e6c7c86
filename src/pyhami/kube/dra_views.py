"""The one reader of ResourceClaim and ResourceSlice JSON: each object is checked and turned into
its view (`pyhami.model.dra`) once."""

from collections.abc import Mapping
from typing import Any

import structlog

from pyhami.devices.nvidia.dra_claims import CAPACITY_MEMORY, DRIVER
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil
from pyhami.kube.views import _integer, _object, _text
from pyhami.model import PodSpecError
from pyhami.model.dra import (
    ClaimSpecError,
    ClaimView,
    DeviceResultView,
    SliceView,
)

log = structlog.get_logger(__name__)


def _entries(
    value: object, where: str, error: type[ValueError] = PodSpecError
) -> list[Mapping[str, Any]]:
    """A list of objects (absent: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(f"{where} must be a list, got {type(value).__name__}")
    return [_object(entry, f"{where}[]", error) for entry in value]


def _result(value: Mapping[str, Any], where: str) -> DeviceResultView:
    consumed = _object(value.get("consumedCapacity"), f"{where}.consumedCapacity", ClaimSpecError)
    share = value.get("shareID")
    return DeviceResultView(
        request=_text(value.get("request")),
        driver=_text(value.get("driver")),
        pool=_text(value.get("pool")),
        device=_text(value.get("device")),
        admin_access=bool(value.get("adminAccess")),
        share_id=None if share is None else str(share),
        consumed={str(name): str(amount) for name, amount in consumed.items()},
    )


def read_claim(claim: Mapping[str, Any]) -> ClaimView:
    """The claim's view; ClaimSpecError naming the claim and the field when one is unreadable."""
    metadata = _object(claim.get("metadata"), "claim metadata", ClaimSpecError)
    ref = f"claim {_text(metadata.get('namespace'))}/{_text(metadata.get('name'))}"
    status = _object(claim.get("status"), f"{ref}: status", ClaimSpecError)
    allocation = _object(status.get("allocation"), f"{ref}: status.allocation", ClaimSpecError)
    devices = _object(allocation.get("devices"), f"{ref}: allocation.devices", ClaimSpecError)
    where = f"{ref}: allocation.devices.results"
    reserved = _entries(status.get("reservedFor"), f"{ref}: status.reservedFor", ClaimSpecError)
    return ClaimView(
        namespace=_text(metadata.get("namespace")),
        name=_text(metadata.get("name")),
        uid=_text(metadata.get("uid")),
        allocated=bool(allocation),
        results=tuple(
            _result(r, where) for r in _entries(devices.get("results"), where, ClaimSpecError)
        ),
        reserved_for=tuple(
            (_text(r.get("name")), _text(r.get("uid")))
            for r in reserved
            if r.get("resource") == "pods" and not r.get("apiGroup")
        ),
    )


def read_slice(obj: Mapping[str, Any]) -> SliceView:
    """The slice's view: pool generation 0 when it has none, no GPU memory sizes for another
    driver's slice. A device whose memory cannot be read is left out (and logged): the others
    still count."""
    metadata = _object(obj.get("metadata"), "slice metadata", ValueError)
    spec = _object(obj.get("spec"), "slice spec", ValueError)
    name = _text(metadata.get("name"))
    sizes = set()
    for device in spec.get("devices") or () if spec.get("driver") == DRIVER else ():
        memory = ((device.get("capacity") or {}).get(CAPACITY_MEMORY) or {}).get("value")
        if memory is None:
            continue
        try:
            sizes.add(value_ceil(parse_quantity(memory)))
        except QuantityError as err:
            log.warning("unreadable GPU memory", slice=name, device=device.get("name"), error=err)
    return SliceView(
        name=name,
        resource_version=_text(metadata.get("resourceVersion")),
        generation=_integer(_object(spec.get("pool"), "pool", ValueError).get("generation")) or 0,
        sizes=frozenset(sizes),
    )
