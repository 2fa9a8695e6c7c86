"""Submit pods to a running demo cluster one by one and collect what became of each.

A pod is created through the API (so the webhook sees it), then followed until kubelet started
it (Running), refused it, or kube-scheduler's first attempt found no node (its PodScheduled=False
condition, written by Kubernetes' kube-scheduler and by the harness alike); for those the
scheduler's `/explain` endpoint is asked why, over HTTPS as any client would.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from pyhami.devices.nvidia.dra_claims import (
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    DRIVER,
    MIB,
    consumed_capacity,
)
from pyhami.devices.quantity import QuantityError
from pyhami.kube import RESOURCE_CLAIMS, JsonObject, KubeError
from pyhami.kube.dra_views import read_claim
from pyhami.kube.errors import AlreadyExists
from pyhami.kube.resources import NAMESPACES
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, ProtocolError, decode_pod_single_device
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.pods import is_namespace
from pyhami.sim.demo.results import CardInfo, CardShare, NodeWhy, PodResult

SETTLE_TIMEOUT_S = 20.0
SLOW_S = 2.0  # a pod that takes longer gets a progress line


def card_directory(cluster: DemoCluster) -> dict[str, CardInfo]:
    """Every card's uuid → node, model and NVML index (device-plugin and DRA nodes)."""
    nodes = [(node.name, node.nvml) for node in cluster.nodes]
    nodes += [(node.name, node.nvml) for node in cluster.dra_nodes]
    return {
        gpu.uuid: CardInfo(name, gpu.name, index)
        for name, nvml in nodes
        for index, gpu in enumerate(nvml.gpus)
    }


def dra_device_directory(cluster: DemoCluster) -> dict[tuple[str, str], str]:
    """(node, DRA device name) → the card's uuid: the driver names a node's cards gpu-<index>."""
    return {
        (node.name, f"gpu-{index}"): gpu.uuid
        for node in cluster.dra_nodes
        for index, gpu in enumerate(node.nvml.gpus)
    }


async def create_namespace(cluster: DemoCluster, namespace: JsonObject) -> None:
    """Create a Namespace unless it exists (a file may name one the cluster already has)."""
    with contextlib.suppress(AlreadyExists):
        await cluster.client.create(NAMESPACES, namespace)


async def submit_all(
    cluster: DemoCluster,
    objects: Sequence[JsonObject],
    on_result: Callable[[PodResult], None] = lambda _r: None,
    on_progress: Callable[[str], None] = lambda _line: None,
) -> list[PodResult]:
    """Submit the pods of `objects` in order, each once the previous one settled (binpack
    depends on order); Namespace objects, and the namespace of each pod, are created first."""
    context = cluster.client_certificate.load_into(
        ssl.create_default_context(cadata=cluster.ca_pem.decode())
    )
    results = []
    known: set[str] = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
        for obj in objects:
            name = str(obj["metadata"].get("namespace") or obj["metadata"]["name"])
            if name not in known:
                known.add(name)
                body = obj if is_namespace(obj) else {"metadata": {"name": name}}
                await create_namespace(cluster, {"apiVersion": "v1", "kind": "Namespace", **body})
            if is_namespace(obj):
                continue
            result = await submit_one(cluster, obj, http, on_progress)
            on_result(result)
            results.append(result)
    return results


async def submit_one(
    cluster: DemoCluster,
    pod: JsonObject,
    http: aiohttp.ClientSession,
    on_progress: Callable[[str], None] = lambda _line: None,
) -> PodResult:
    namespace = str(pod["metadata"]["namespace"])
    name = str(pod["metadata"]["name"])
    started = time.monotonic()
    try:
        await cluster.client.create_pod(namespace, pod)
    except KubeError as err:
        return PodResult(namespace, name, "Refused", message=f"API server: {err}")
    result = await _settle(cluster, namespace, name, http, on_progress)
    return replace(result, seconds=time.monotonic() - started)


async def _settle(
    cluster: DemoCluster,
    namespace: str,
    name: str,
    http: aiohttp.ClientSession,
    on_progress: Callable[[str], None],
) -> PodResult:
    started = time.monotonic()
    until = started + SETTLE_TIMEOUT_S
    said = False
    while time.monotonic() < until:
        if not said and time.monotonic() - started > SLOW_S:
            said = True  # say once that the demo is waiting, and for what
            on_progress(f"  ..   {name:<22} still waiting for kube-scheduler and kubelet")
        pod = await cluster.client.get_pod(namespace, name)
        status = pod.get("status") or {}
        phase = str(status.get("phase", "Pending"))
        if phase in ("Running", "Failed", "Succeeded"):
            cards = allocated_cards(pod, card_directory(cluster))
            if not cards:
                cards = await claimed_cards(cluster, pod)
            message = str(status.get("message", ""))
            node = str((pod.get("spec") or {}).get("nodeName", ""))
            return PodResult(namespace, name, phase, node, cards, message)
        unscheduled = _unscheduled(status)
        if unscheduled is not None and not (pod.get("spec") or {}).get("nodeName"):
            why = await explain(cluster, http, namespace, name)
            message = f"kube-scheduler: {unscheduled}"
            return PodResult(namespace, name, "Pending", message=message, why=why)
        await asyncio.sleep(0.02)
    return PodResult(namespace, name, "Pending", message="not settled within the demo's timeout")


def _unscheduled(status: Mapping[str, Any]) -> str | None:
    """kube-scheduler's message when its last attempt found no node (the PodScheduled=False
    condition it writes), else None."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return None


def allocated_cards(pod: JsonObject, cards: Mapping[str, CardInfo]) -> tuple[CardShare, ...]:
    """The scheduler's record of the pod's devices (init containers first), with card names."""
    metadata = pod.get("metadata") or {}
    value = (metadata.get("annotations") or {}).get(KEY_NVIDIA_ALLOCATED)
    if not value:
        return ()
    try:
        per_container = decode_pod_single_device(value)
    except ProtocolError:
        return ()
    spec = pod.get("spec") or {}
    names = [str(c.get("name", "")) for c in [*spec.get("initContainers", ()), *spec["containers"]]]
    shares = []
    for container, devices in zip(names, per_container, strict=False):
        for device in devices:
            info = cards.get(device.uuid, CardInfo("?", device.type, -1))
            shares.append(
                CardShare(
                    container,
                    info.node,
                    device.uuid,
                    info.model,
                    info.index,
                    device.usedmem,
                    device.usedcores,
                )
            )
    return tuple(shares)


async def claimed_cards(cluster: DemoCluster, pod: JsonObject) -> tuple[CardShare, ...]:
    """A pod placed by kube-scheduler through ResourceClaims (a DRA node): each container's
    cards as the claims' allocations record them, with the memory and cores they consumed."""
    spec = pod.get("spec") or {}
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))
    claim_of = {  # the pod's name for a claim → the ResourceClaim's own name
        str(entry.get("name", "")): str(entry.get("resourceClaimName") or "")
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    cards, devices = card_directory(cluster), dra_device_directory(cluster)
    shares: list[CardShare] = []
    for container in [*spec.get("initContainers", ()), *spec.get("containers", ())]:
        for ref in (container.get("resources") or {}).get("claims") or ():
            claim_name = claim_of.get(str(ref.get("name", "")))
            if not claim_name:
                continue
            try:
                claim = await cluster.client.get(RESOURCE_CLAIMS, claim_name, namespace)
            except KubeError:
                continue  # the report shows the pod without that claim's cards
            shares.extend(_claim_shares(str(container.get("name", "")), claim, ref, cards, devices))
    return tuple(shares)


def _claim_shares(
    container: str,
    claim: Mapping[str, Any],
    ref: Mapping[str, Any],
    cards: Mapping[str, CardInfo],
    devices: Mapping[tuple[str, str], str],
) -> list[CardShare]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    try:
        consumed = consumed_capacity(read_claim(claim))  # in the order of the results
    except QuantityError:
        consumed = [{} for _ in results]  # kube-apiserver validated it; nothing better to show
    wanted = ref.get("request")  # a container may name one request of the claim, else all
    shares = []
    for result, amounts in zip(results, consumed, strict=True):
        request = str(result.get("request", ""))
        if result.get("driver") != DRIVER or (wanted and request.partition("/")[0] != wanted):
            continue
        node = str(result.get("pool", ""))
        uuid = devices.get((node, str(result.get("device", ""))), "")
        info = cards.get(uuid, CardInfo(node, "?", -1))
        memory, cores = amounts.get(CAPACITY_MEMORY, 0) // MIB, amounts.get(CAPACITY_CORES, 0)
        shares.append(CardShare(container, node, uuid, info.model, info.index, memory, cores))
    return shares


async def explain(
    cluster: DemoCluster, http: aiohttp.ClientSession, namespace: str, name: str
) -> tuple[NodeWhy, ...]:
    url = f"{cluster.scheduler_url}/explain"
    async with http.get(url, params={"pod": f"{namespace}/{name}"}) as response:
        if response.status != 200:
            return ()
        body: dict[str, Any] = await response.json()
    return tuple(
        NodeWhy(
            node=str(entry.get("node", "")),
            reason=str(entry.get("reason", "")),
            counts={str(k): int(v) for k, v in (entry.get("reasons") or {}).items()},
            cards=int(entry.get("cards") or 0),
        )
        for entry in body.get("nodes") or ()
        if not entry.get("fits")
    )
