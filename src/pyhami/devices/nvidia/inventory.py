"""A node's NVIDIA inventory from its annotations (HAMi `GetNodeDevices`, protocol.md §3.1)."""

import json
from collections.abc import Mapping

from pyhami.devices.inventory import NodeInventory
from pyhami.model import DeviceInfo, MigPlacement, MigProfile

REGISTER = "hami.io/node-nvidia-register"
PAIR_SCORES = "hami.io/node-nvidia-score"
DEVICE_CORDON = "hami.io/device-cordon"


class InventoryError(ValueError):
    """The node's registration cannot be used; the message is HAMi's where HAMi has one."""


def node_inventory(annotations: Mapping[str, str]) -> NodeInventory:
    """The cards a node registered, their pair scores and the cordoned UUIDs."""
    value = annotations.get(REGISTER)
    if value is None:
        raise InventoryError(f"annos not found {REGISTER}")
    try:
        devices = tuple(_device(item) for item in json.loads(value) or ())
        scores = {
            entry["uuid"]: dict(entry.get("score") or {})
            for entry in json.loads(annotations.get(PAIR_SCORES) or "[]")
        }
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise InventoryError(f"{REGISTER}: {err}") from err
    if not devices:
        raise InventoryError("no gpu found on node")
    cordon = annotations.get(DEVICE_CORDON, "")
    cordoned = frozenset(item.strip() for item in cordon.split(",") if item.strip())
    return NodeInventory(devices, scores, cordoned)


def _device(item: Mapping[str, object]) -> DeviceInfo:
    profiles = tuple(
        MigProfile(
            p["name"],
            p["memoryMB"],
            p["core"],
            p["sliceCount"],
            None if p.get("placements") is None else tuple(
                MigPlacement(x["start"], x["size"]) for x in p["placements"]
            ),
        )
        for p in item.get("migProfiles") or ()  # type: ignore[attr-defined]
    )
    return DeviceInfo(
        id=str(item["id"]),
        index=int(item.get("index", 0)),  # type: ignore[call-overload]
        count=int(item.get("count", 0)),  # type: ignore[call-overload]
        devmem=int(item.get("devmem", 0)),  # type: ignore[call-overload]
        devcore=int(item.get("devcore", 0)),  # type: ignore[call-overload]
        type=str(item.get("type", "")),
        numa=int(item.get("numa", 0)),  # type: ignore[call-overload]
        mode=str(item.get("mode", "")),
        mig_profiles=profiles,
        health=bool(item.get("health", False)),
    )
