"""The memory sizes of the DRA driver's GPUs, for the webhook's gpumem-percentage translation.

Fed by a ResourceSlice informer (driver `gpu.pyhami.io` only): each slice's devices publish
their memory as the capacity `memory` in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from pyhami.devices.nvidia.dra_claims import CAPACITY_MEMORY, DRIVER
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil

log = structlog.get_logger(__name__)


def slice_card_memories(resource_slice: Mapping[str, Any]) -> frozenset[int]:
    """The memory sizes (bytes) of a slice's GPUs; none for another driver's slice. A device
    whose memory cannot be read is left out (and logged): the others still count."""
    spec = resource_slice.get("spec") or {}
    if spec.get("driver") != DRIVER:
        return frozenset()
    sizes = set()
    for device in spec.get("devices") or ():
        memory = ((device.get("capacity") or {}).get(CAPACITY_MEMORY) or {}).get("value")
        if memory is None:
            continue
        try:
            sizes.add(value_ceil(parse_quantity(memory)))
        except QuantityError as err:
            name = (resource_slice.get("metadata") or {}).get("name")
            log.warning("unreadable GPU memory", slice=name, device=device.get("name"), error=err)
    return frozenset(sizes)


class DraCardMemories:
    """The distinct memory sizes of every GPU the DRA driver publishes, kept by slice."""

    def __init__(self) -> None:
        self._by_slice: dict[str, frozenset[int]] = {}

    @staticmethod
    def _name(resource_slice: Mapping[str, Any]) -> str:
        return str((resource_slice.get("metadata") or {}).get("name") or "")

    def on_slice(self, resource_slice: Mapping[str, Any]) -> None:
        sizes = slice_card_memories(resource_slice)
        if sizes:
            self._by_slice[self._name(resource_slice)] = sizes
        else:
            self._by_slice.pop(self._name(resource_slice), None)

    def on_slice_deleted(self, resource_slice: Mapping[str, Any]) -> None:
        self._by_slice.pop(self._name(resource_slice), None)

    def sizes(self) -> frozenset[int]:
        return frozenset().union(*self._by_slice.values())
