"""Which annotations the scheduler owns, and how a Node object becomes a card inventory.

`OWNED_ANNOTATIONS` are the pod annotations only the scheduler (and, for bind-phase and
to-allocate, the device plugin) may write: they are the allocation record the ledger and the
device plugin trust. The webhook strips them from new pods and guards them on updates; the
filter patch clears stale ones; a failed bind removes them.
"""

from __future__ import annotations

from pyhami.devices.inventory import NodeInventory
from pyhami.devices.nvidia.inventory import InventoryError, NoGpusRegisteredError, node_inventory
from pyhami.model import NodeView
from pyhami.protocol import (
    KEY_BIND_PHASE,
    KEY_BIND_TIME,
    KEY_MIG_ALLOCATIONS,
    KEY_NODE_NVIDIA_REGISTER,
    KEY_VGPU_NODE,
    KEY_VGPU_TIME,
    VENDORS,
)

# The bookkeeping keys plus every fixed vendor's to-allocate and allocated keys: a HAMi
# device plugin of any vendor trusts them, so no user may write them.
OWNED_ANNOTATIONS = frozenset(
    {KEY_VGPU_NODE, KEY_VGPU_TIME, KEY_BIND_TIME, KEY_BIND_PHASE, KEY_MIG_ALLOCATIONS}
    | {key for vendor in VENDORS.values() for key in (vendor.to_allocate, vendor.allocated) if key}
)


def registered_inventory(node: NodeView) -> NodeInventory | None:
    """The node's NVIDIA registration; None when it registers no card (no annotation, or
    one that lists none), ValueError when it cannot be read."""
    annotations = node.annotations
    if KEY_NODE_NVIDIA_REGISTER not in annotations:
        return None
    try:
        return node_inventory(annotations)
    except NoGpusRegisteredError:
        return None  # the plugin looked and found no card: a GPU-less node, not bad input
    except InventoryError as err:
        raise ValueError(f"node {node.name}: {err}") from err
