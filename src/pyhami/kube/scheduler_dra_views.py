"""The scheduler's reading of the DRA driver's ResourceSlices: the memory size of each GPU.

Each device of a slice of driver `gpu.pyhami.io` publishes its memory as the capacity
`memory` in bytes; a slice of another driver has none that count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from pyhami.devices.nvidia.dra_claims import CAPACITY_MEMORY, DRIVER
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil
from pyhami.kube.views import resource_version

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
    version = resource_version(resource_slice)
    spec = resource_slice.get("spec") or {}
    if spec.get("driver") != DRIVER:
        return SliceCardMemories(name, frozenset(), version)
    sizes = set()
    for device in spec.get("devices") or ():
        memory = ((device.get("capacity") or {}).get(CAPACITY_MEMORY) or {}).get("value")
        if memory is None:
            continue
        try:
            sizes.add(value_ceil(parse_quantity(memory)))
        except QuantityError as err:
            log.warning("unreadable GPU memory", slice=name, device=device.get("name"), error=err)
    return SliceCardMemories(name, frozenset(sizes), version)
