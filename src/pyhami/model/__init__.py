"""Plain, immutable data shared by every layer: devices, usages, requests, allocations, and
the views of pods and nodes (read from the API by `pyhami.kube.views`).

No I/O and no parsing here; `pyhami.protocol` turns these into annotation strings and back.
Field names follow HAMi's Go structs (snake_case) so the specs read across directly.
"""

from pyhami.model.allocation import (
    ContainerDevice,
    ContainerDevices,
    MigAllocation,
    PodSingleDevice,
)
from pyhami.model.device import DeviceInfo, DevicePairScore, MigPlacement, MigProfile
from pyhami.model.names import NodeName, PodUID
from pyhami.model.request import ContainerDeviceRequest
from pyhami.model.usage import DeviceUsage
from pyhami.model.views import (
    ContainerView,
    InitStatusView,
    NodeSpecError,
    NodeView,
    PodSpecError,
    PodView,
)

__all__ = [
    "ContainerDevice",
    "ContainerDeviceRequest",
    "ContainerDevices",
    "ContainerView",
    "DeviceInfo",
    "DevicePairScore",
    "DeviceUsage",
    "InitStatusView",
    "MigAllocation",
    "MigPlacement",
    "MigProfile",
    "NodeName",
    "NodeSpecError",
    "NodeView",
    "PodSingleDevice",
    "PodSpecError",
    "PodUID",
    "PodView",
]
