"""The DRA objects pyhami writes (resource.k8s.io/v1), encoded from typed values: the DeviceClass
of its GPUs, the ResourceClaimTemplates of GPU shares (`pyhami.devices.nvidia.dra_claims`) and
each node's ResourceSlice."""

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyhami.devices.nvidia.dra_claims import (
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    CORES,
    DEVICE_CLASS,
    DRIVER,
    MIB,
    RESOURCE_API_VERSION,
    TEMPLATE_PREFIX,
    TOPOLOGY_ATTRIBUTES,
    UNHEALTHY_TAINT,
    GpuShare,
)
from pyhami.kube.client import JsonObject

_CARD_MEMORY = f'device.capacity["{DRIVER}"].memory'


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


def _exactly(share: GpuShare, memory_bytes: int | None, selectors: Sequence[str]) -> JsonObject:
    """`count` devices of the class passing `selectors`, each with the capacity asked for (a
    capacity not named is the policy's default: the whole)."""
    exactly: JsonObject = {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": share.count,
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    requests: JsonObject = {}
    if memory_bytes is not None:
        requests[CAPACITY_MEMORY] = str(memory_bytes)
    if share.cores_percent is not None:
        requests[CAPACITY_CORES] = str(share.cores_percent)
    if requests:
        exactly["capacity"] = {"requests": requests}
    return exactly


def device_request(name: str, share: GpuShare) -> JsonObject:
    """One `spec.devices.requests[]` entry. A share of each card's memory becomes one
    alternative per card size (`firstAvailable`, subrequests `card-<MiB>mib`), each for cards
    of that memory only; kube-scheduler takes, on each node, the first that fits there."""
    if not share.memory_by_card:
        return {"name": name, "exactly": _exactly(share, share.memory_bytes, share.selectors)}
    alternatives = []
    for card, taken in share.memory_by_card:
        only_this_size = f'{_CARD_MEMORY}.compareTo(quantity("{card}")) == 0'
        exactly = _exactly(share, taken, (*share.selectors, only_this_size))
        alternatives.append({"name": f"card-{card // MIB}mib", **exactly})
    return {"name": name, "firstAvailable": alternatives}


def claim_spec(requests: Mapping[str, GpuShare]) -> JsonObject:
    """A ResourceClaim's spec: one request per entry, with a `matchAttribute` constraint for
    each multi-card request that keeps its cards on one NUMA node or NVLink domain."""
    devices: JsonObject = {
        "requests": [device_request(name, share) for name, share in requests.items()]
    }
    constraints = [
        {"requests": [name], "matchAttribute": TOPOLOGY_ATTRIBUTES[same]}
        for name, share in requests.items()
        if share.count > 1
        for same in sorted(share.same)
    ]
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate for `requests`, named by its content: pods that ask for the
    same shares use one template, and creating it again changes nothing."""

    namespace: str
    requests: Mapping[str, GpuShare]

    @property
    def name(self) -> str:
        return str(self.manifest()["metadata"]["name"])

    def manifest(self) -> JsonObject:
        spec = {"spec": claim_spec(self.requests)}
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
        return {
            "apiVersion": RESOURCE_API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"{TEMPLATE_PREFIX}{digest}", "namespace": self.namespace},
            "spec": spec,
        }


@dataclass(frozen=True, slots=True)
class Version:
    """A device attribute that is a semantic version."""

    text: str


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One GPU as its node's ResourceSlice publishes it: shared by `memory` (bytes, granted in
    MiB steps) and `cores` (0..100, 0 meaning no SM limit); a request naming neither takes all."""

    name: str
    attributes: Mapping[str, str | int | bool | Version]
    memory_bytes: int
    # The value of its UNHEALTHY_TAINT ("" for none); None while it is healthy.
    unhealthy: str | None = None


def _attribute(value: str | int | bool | Version) -> JsonObject:
    if isinstance(value, Version):
        return {"version": value.text}
    if isinstance(value, bool):
        return {"bool": value}
    return {"int": value} if isinstance(value, int) else {"string": value}


def _capacity(total: str, minimum: str, step: str) -> JsonObject:
    policy = {"default": total, "validRange": {"min": minimum, "max": total, "step": step}}
    return {"value": total, "requestPolicy": policy}


def _slice_device(device: SliceDevice) -> JsonObject:
    memory = str(device.memory_bytes)
    entry: JsonObject = {
        "name": device.name,
        "attributes": {name: _attribute(value) for name, value in device.attributes.items()},
        "capacity": {
            CAPACITY_MEMORY: _capacity(memory, str(MIB), str(MIB)),
            CAPACITY_CORES: _capacity(str(CORES), "0", "1"),
        },
        "allowMultipleAllocations": True,
    }
    if device.unhealthy is not None:
        taint = {"key": UNHEALTHY_TAINT, "effect": "NoSchedule"}
        if device.unhealthy:
            taint["value"] = device.unhealthy
        entry["taints"] = [taint]
    return entry


def resource_slice(
    name: str,
    node: str,
    devices: Sequence[SliceDevice],
    generation: int,
    *,
    node_uid: str = "",
    resource_version: str = "",
) -> JsonObject:
    """The node's ResourceSlice: one pool named after the node; owned by the Node when its uid
    is known (deleted with it, as the kubelet-plugin helper library does)."""
    metadata: JsonObject = {"name": name}
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
        ]
    if resource_version:
        metadata["resourceVersion"] = resource_version
    spec = {
        "driver": DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": [_slice_device(device) for device in devices],
    }
    return {"metadata": metadata, "spec": spec}
