"""Plain, immutable data shared by every layer: devices, usages, requests, allocations.

No I/O and no parsing here; `pyhami.protocol` turns these into annotation strings and back.
Field names follow HAMi's Go structs (snake_case) so the specs read across directly.
"""

from pyhami.model.allocation import (
    ContainerDevice,
    ContainerDevices,
    MigAllocation,
    PodDevices,
    PodSingleDevice,
)
from pyhami.model.device import DeviceInfo, DevicePairScore, MigPlacement, MigProfile
from pyhami.model.names import CardUUID, NodeName, PodUID, VendorKey
from pyhami.model.request import ContainerDeviceRequest, ContainerRequests, PodRequests
from pyhami.model.usage import DeviceUsage

__all__ = [
    "CardUUID",
    "ContainerDevice",
    "ContainerDeviceRequest",
    "ContainerDevices",
    "ContainerRequests",
    "DeviceInfo",
    "DevicePairScore",
    "DeviceUsage",
    "MigAllocation",
    "MigPlacement",
    "MigProfile",
    "NodeName",
    "PodDevices",
    "PodRequests",
    "PodSingleDevice",
    "PodUID",
    "VendorKey",
]
