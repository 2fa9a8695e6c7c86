"""What pyhami asks of Kubernetes' Dynamic Resource Allocation: the DeviceClass of its GPUs and
the claims that ask for a share of one (resource.k8s.io/v1).

The DRA driver `gpu.pyhami.io` publishes each GPU as a device with two consumable capacities,
`memory` (bytes) and `cores` (percent of the SMs), and `allowMultipleAllocations: true`, so
kube-scheduler itself keeps the account of how much of a card each claim took (the claim's
`status.allocation.devices.results[].consumedCapacity`). Each capacity's request policy
defaults to the whole capacity: a request that names no capacity, as the claim kube-scheduler
makes for a plain `nvidia.com/gpu: 1` through the class's `extendedResourceName`, takes the
whole card.

A share can be limited to some cards with CEL selectors on the device's attributes (HAMi's
card-type and UUID annotations), and a share of each card's memory in percent becomes
`firstAvailable` alternatives, one per card memory size.

Pure functions of their arguments: no I/O. `pyhami.kube.dra_manifests` encodes the objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyhami.devices.quantity import parse_quantity, value_ceil
from pyhami.devices.selectors import CardSelectors
from pyhami.model.dra import ClaimView
from pyhami.protocol.selectors import TypeSelector, UuidSelector

DRIVER = "gpu.pyhami.io"
DEVICE_CLASS = "gpu.pyhami.io"
RESOURCE_API_VERSION = "resource.k8s.io/v1"
CAPACITY_MEMORY = "memory"
CAPACITY_CORES = "cores"
CORES = 100  # a card's `cores` capacity: percent of its SMs
# The NoSchedule taint of a device the health board marks unhealthy
UNHEALTHY_TAINT = f"{DRIVER}/unhealthy"
# The node label that says a node's GPUs are served by the DRA driver, not the device plugin.
NODE_MODE_LABEL = "gpu.pyhami.io/mode"
NODE_MODE_DRA = "dra"
# Device attributes a multi-GPU claim can keep equal across its devices (`matchAttribute`).
ATTRIBUTE_NUMA_NODE = f"{DRIVER}/numaNode"
ATTRIBUTE_NVLINK_DOMAIN = f"{DRIVER}/nvlinkDomain"
TOPOLOGY_ATTRIBUTES = {"numa": ATTRIBUTE_NUMA_NODE, "nvlink": ATTRIBUTE_NVLINK_DOMAIN}
TEMPLATE_PREFIX = "pyhami-gpu-"
MIB = 1024 * 1024
# kube-apiserver's limits on a request's alternatives and on one CEL selector
MAX_ALTERNATIVES = 8
MAX_SELECTOR_LENGTH = 10 * 1024
_ATTRIBUTES = f'device.attributes["{DRIVER}"]'
# HAMi's card type (the device plugin's registered type): the NVML name, `NVIDIA-` prefixed
# unless it starts with NVIDIA; compared upper-cased, as HAMi's `CheckType`.
_CARD_TYPE = (
    f'({_ATTRIBUTES}.productName.startsWith("NVIDIA") ? {_ATTRIBUTES}.productName'
    f' : "NVIDIA-" + {_ATTRIBUTES}.productName).upperAscii()'
)


def cel_string(text: str) -> str:
    """`text` as a CEL string literal. Backslashes, quotes and every character that is not
    printable are escaped, so no value can end the literal and add to the expression."""
    parts = ['"']
    for char in text:
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"{text!r} is not valid Unicode text (a lone surrogate)")
        if char in '\\"':
            parts.append("\\" + char)
        elif char.isprintable():
            parts.append(char)
        elif code <= 0xFFFF:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    parts.append('"')
    return "".join(parts)


def _cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(cel_string(item) for item in items) + "]"


def _type_selectors(types: TypeSelector) -> list[str]:
    """HAMi's `CheckType`: some `use` item and no `nouse` item is a substring of the card type
    (items are upper-cased already; a `use` rule whose items are all empty admits no card)."""
    found = []
    if types.use is not None:
        found.append(f"{_cel_list(sorted(set(types.use)))}.exists(t, {_CARD_TYPE}.contains(t))")
    if types.nouse is not None and types.nouse:
        found.append(f"!{_cel_list(sorted(set(types.nouse)))}.exists(t, {_CARD_TYPE}.contains(t))")
    return found


def _uuid_selectors(uuids: UuidSelector) -> list[str]:
    """HAMi's `CheckUUID`: the card's uuid is (not) one of the listed, exactly."""
    found = []
    if uuids.use is not None:
        found.append(f"{_ATTRIBUTES}.uuid in {_cel_list(sorted(uuids.use))}")
    if uuids.nouse is not None:
        found.append(f"!({_ATTRIBUTES}.uuid in {_cel_list(sorted(uuids.nouse))})")
    return found


def card_selectors(selectors: CardSelectors) -> tuple[str, ...]:
    """CEL selectors every card of a share must pass: HAMi's card-type and UUID rules."""
    found = (*_type_selectors(selectors.types), *_uuid_selectors(selectors.uuids))
    for expression in found:
        if len(expression) > MAX_SELECTOR_LENGTH:
            raise ValueError(
                f"a card-type or UUID annotation makes a CEL selector of {len(expression)} "
                f"characters; Kubernetes takes at most {MAX_SELECTOR_LENGTH}"
            )
    return found


@dataclass(frozen=True, slots=True)
class GpuShare:
    """What one container asks of GPUs: how many cards, and of each how much (None: all)."""

    count: int = 1
    memory_bytes: int | None = None
    cores_percent: int | None = None
    # "numa", "nvlink": all `count` cards share each named attribute's value
    same: frozenset[str] = frozenset()
    # CEL expressions each card must satisfy
    selectors: tuple[str, ...] = ()
    # A share of each card's memory: (card memory, bytes to take of it) per card size, tried
    # in this order; instead of `memory_bytes`.
    memory_by_card: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a GPU share needs at least 1 card, got {self.count}")
        if self.memory_bytes is not None and self.memory_bytes < 1:
            raise ValueError(f"GPU memory must be positive, got {self.memory_bytes} bytes")
        # 0 cores: no SM limit on a shared card, as HAMi's gpucores=0
        if self.cores_percent is not None and not 0 <= self.cores_percent <= 100:
            raise ValueError(f"GPU cores are 0..100 percent, got {self.cores_percent}")
        unknown = sorted(self.same - TOPOLOGY_ATTRIBUTES.keys())
        if unknown:
            raise ValueError(f"unknown topology {unknown}; known: {', '.join(TOPOLOGY_ATTRIBUTES)}")
        if self.memory_by_card and self.memory_bytes is not None:
            raise ValueError("a GPU share names its memory in bytes or per card size, not both")
        if len(self.memory_by_card) > MAX_ALTERNATIVES:
            raise ValueError(
                f"{len(self.memory_by_card)} card memory sizes: a claim request takes at most "
                f"{MAX_ALTERNATIVES} alternatives"
            )
        if any(not 0 < taken <= card for card, taken in self.memory_by_card):
            raise ValueError(f"memory per card size out of range: {self.memory_by_card}")


def consumed_capacity(claim: ClaimView) -> list[dict[str, int]]:
    """Each allocated device's consumed capacity (bytes, percent), from a claim's status."""
    return [
        {name: value_ceil(parse_quantity(value)) for name, value in result.consumed.items()}
        for result in claim.results
    ]
