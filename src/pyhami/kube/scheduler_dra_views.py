"""The scheduler's reading of a ResourceSlice of the DRA driver (`gpu.pyhami.io`): the memory
of each GPU, which its device publishes as the capacity `memory` in bytes."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from pyhami.devices.nvidia.dra_claims import CAPACITY_MEMORY, DRIVER
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil
from pyhami.kube.client import resource_version

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SliceCardMemories:
    """One ResourceSlice: its name and the distinct memory sizes (bytes) of its GPUs."""

    name: str
    sizes: frozenset[int]
    resource_version: str = ""


def read_slice_card_memories(resource_slice: Mapping[str, Any]) -> SliceCardMemories:
    """The slice's GPU memory sizes (none for another driver's slice). A device whose memory
    cannot be read is left out (and logged): the others still count."""
    name = str((resource_slice.get("metadata") or {}).get("name") or "")
    spec = resource_slice.get("spec") or {}
    sizes = set()
    for device in spec.get("devices") or () if spec.get("driver") == DRIVER else ():
        memory = ((device.get("capacity") or {}).get(CAPACITY_MEMORY) or {}).get("value")
        if memory is None:
            continue
        try:
            sizes.add(value_ceil(parse_quantity(memory)))
        except QuantityError as err:
            log.warning("unreadable GPU memory", slice=name, device=device.get("name"), error=err)
    return SliceCardMemories(name, frozenset(sizes), resource_version(resource_slice))
