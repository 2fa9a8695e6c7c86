"""A node's NVIDIA inventory from its annotations (HAMi `GetNodeDevices`).

The registration (either form), the pair scores and the cordon list, decoded by
`pyhami.protocol`. Unlike HAMi, which reads the cordon list from a cached Node object that
is rarely refreshed, the caller passes the node's current annotations.
"""

from collections.abc import Mapping

from pyhami.devices.inventory import NodeInventory
from pyhami.protocol import (
    KEY_DEVICE_CORDON,
    KEY_NODE_NVIDIA_REGISTER,
    KEY_NODE_NVIDIA_SCORE,
    ProtocolError,
    decode_node_devices,
    decode_pair_scores,
    parse_device_cordon,
)


class InventoryError(ValueError):
    """The node's registration cannot be used; the message is HAMi's where HAMi has one."""


class NoGpusRegisteredError(InventoryError):
    """The registration is there and reads, but lists no card (the plugin found none)."""


def node_inventory(annotations: Mapping[str, str]) -> NodeInventory:
    """The cards a node registered, their pair scores and the cordoned UUIDs."""
    value = annotations.get(KEY_NODE_NVIDIA_REGISTER)
    if value is None:
        raise InventoryError(f"annos not found {KEY_NODE_NVIDIA_REGISTER}")
    try:
        devices = decode_node_devices(value)
        rows = decode_pair_scores(annotations.get(KEY_NODE_NVIDIA_SCORE) or "[]")
    except ProtocolError as err:
        raise InventoryError(str(err)) from err
    if not devices:
        raise NoGpusRegisteredError("no gpu found on node")
    scores: dict[str, Mapping[str, int]] = {}
    for row in rows:
        scores.setdefault(row.uuid, row.scores)  # HAMi takes the first entry per uuid
    cordoned = parse_device_cordon(annotations.get(KEY_DEVICE_CORDON))
    return NodeInventory(devices, scores, cordoned)
