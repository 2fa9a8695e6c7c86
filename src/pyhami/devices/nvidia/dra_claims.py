"""What pyhami asks of Kubernetes' Dynamic Resource Allocation: the DeviceClass of its GPUs and
the claims that ask for a share of one (resource.k8s.io/v1).

The DRA driver `gpu.pyhami.io` publishes each GPU as a device with two consumable capacities,
`memory` (bytes) and `cores` (percent of the SMs), and `allowMultipleAllocations: true`, so
kube-scheduler itself keeps the account of how much of a card each claim took (the claim's
`status.allocation.devices.results[].consumedCapacity`). Each capacity's request policy
defaults to the whole capacity: a request that names no capacity, as the claim kube-scheduler
makes for a plain `nvidia.com/gpu: 1` through the class's `extendedResourceName`, takes the
whole card.

Pure functions of their arguments: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyhami.devices.quantity import parse_quantity, value_ceil

JsonObject = dict[str, Any]

DRIVER = "gpu.pyhami.io"
DEVICE_CLASS = "gpu.pyhami.io"
RESOURCE_API_VERSION = "resource.k8s.io/v1"
CAPACITY_MEMORY = "memory"
CAPACITY_CORES = "cores"
# The node label that says a node's GPUs are served by the DRA driver, not the device plugin.
NODE_MODE_LABEL = "gpu.pyhami.io/mode"
NODE_MODE_DRA = "dra"
# Device attributes a multi-GPU claim can keep equal across its devices (`matchAttribute`).
ATTRIBUTE_NUMA_NODE = f"{DRIVER}/numaNode"
ATTRIBUTE_NVLINK_DOMAIN = f"{DRIVER}/nvlinkDomain"
TOPOLOGY_ATTRIBUTES = {"numa": ATTRIBUTE_NUMA_NODE, "nvlink": ATTRIBUTE_NVLINK_DOMAIN}
TEMPLATE_PREFIX = "pyhami-gpu-"
MIB = 1024 * 1024


def device_class(extended_resource_name: str | None = "nvidia.com/gpu") -> JsonObject:
    """DeviceClass `gpu.pyhami.io`: every device of the driver; with an extended resource
    name, pods asking for that resource (and not on a device-plugin node) get whole GPUs."""
    spec: JsonObject = {
        "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
    }
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": spec,
    }


@dataclass(frozen=True, slots=True)
class GpuShare:
    """What one container asks of GPUs: how many cards, and of each how much (None: all)."""

    count: int = 1
    memory_bytes: int | None = None
    cores_percent: int | None = None
    # "numa" or "nvlink": all `count` cards share that attribute's value
    same: str | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a GPU share needs at least 1 card, got {self.count}")
        if self.memory_bytes is not None and self.memory_bytes < 1:
            raise ValueError(f"GPU memory must be positive, got {self.memory_bytes} bytes")
        # 0 cores: no SM limit on a shared card, as HAMi's gpucores=0
        if self.cores_percent is not None and not 0 <= self.cores_percent <= 100:
            raise ValueError(f"GPU cores are 0..100 percent, got {self.cores_percent}")
        if self.same is not None and self.same not in TOPOLOGY_ATTRIBUTES:
            raise ValueError(
                f"unknown topology {self.same!r}; known: {', '.join(TOPOLOGY_ATTRIBUTES)}"
            )


def device_request(name: str, share: GpuShare) -> JsonObject:
    """One `spec.devices.requests[]` entry: `count` devices of the class, each with the
    capacity `share` asks for (a capacity not named is the policy's default: the whole)."""
    exactly: JsonObject = {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": share.count,
    }
    requests: JsonObject = {}
    if share.memory_bytes is not None:
        requests[CAPACITY_MEMORY] = str(share.memory_bytes)
    if share.cores_percent is not None:
        requests[CAPACITY_CORES] = str(share.cores_percent)
    if requests:
        exactly["capacity"] = {"requests": requests}
    return {"name": name, "exactly": exactly}


def claim_spec(requests: Mapping[str, GpuShare]) -> JsonObject:
    """A ResourceClaim's spec: one request per entry, with a `matchAttribute` constraint for
    each multi-card request that keeps its cards on one NUMA node or NVLink domain."""
    devices: JsonObject = {
        "requests": [device_request(name, share) for name, share in requests.items()]
    }
    constraints = [
        {"requests": [name], "matchAttribute": TOPOLOGY_ATTRIBUTES[share.same]}
        for name, share in requests.items()
        if share.same is not None and share.count > 1
    ]
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def claim_template(namespace: str, requests: Mapping[str, GpuShare]) -> JsonObject:
    """A ResourceClaimTemplate for `requests`, named by its content: pods that ask for the
    same shares use one template, and creating it again changes nothing."""
    spec = {"spec": claim_spec(requests)}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{TEMPLATE_PREFIX}{digest}", "namespace": namespace},
        "spec": spec,
    }


def consumed_capacity(claim: Mapping[str, Any]) -> list[dict[str, int]]:
    """Each allocated device's consumed capacity (bytes, percent), from a claim's status."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results: Sequence[Mapping[str, Any]] = (allocation.get("devices") or {}).get("results") or ()
    return [
        {name: value_ceil(parse_quantity(value)) for name, value in consumed.items()}
        for consumed in (result.get("consumedCapacity") or {} for result in results)
    ]
