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

import aiohttp
from pydantic import TypeAdapter

from pyhami.devices.nvidia.dra_claims import (
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    DRIVER,
    MIB,
    consumed_capacity,
)
from pyhami.devices.quantity import QuantityError
from pyhami.kube import RESOURCE_CLAIMS, KubeError
from pyhami.kube.dra_views import read_claim
from pyhami.kube.errors import AlreadyExists
from pyhami.kube.manifests import NamespaceManifest, PodManifest, PodState, read_pod_state
from pyhami.kube.resources import NAMESPACES
from pyhami.model import PodView
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, ProtocolError, decode_pod_single_device
from pyhami.scheduler.explain_wire import ExplanationData
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.pods import DemoObject
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


async def submit_all(
    cluster: DemoCluster,
    objects: Sequence[DemoObject],
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
            name = obj.namespace if isinstance(obj, PodManifest) else obj.name
            if name not in known:
                known.add(name)
                namespace = obj if isinstance(obj, NamespaceManifest) else NamespaceManifest(name)
                with contextlib.suppress(AlreadyExists):  # a file may name one the cluster has
                    await cluster.client.create(NAMESPACES, namespace.encode())
            if isinstance(obj, PodManifest):
                result = await submit_one(cluster, obj, http, on_progress)
                on_result(result)
                results.append(result)
    return results


async def submit_one(
    cluster: DemoCluster,
    pod: PodManifest,
    http: aiohttp.ClientSession,
    on_progress: Callable[[str], None] = lambda _line: None,
) -> PodResult:
    namespace, name = pod.namespace, pod.name
    started = time.monotonic()
    try:
        await cluster.client.create_pod(namespace, pod.document)
    except KubeError as err:
        return PodResult(namespace, name, "Refused", message=f"API server: {err}")
    result = PodResult(namespace, name, "Pending", message="not settled within the demo's timeout")
    said = False
    while time.monotonic() < started + SETTLE_TIMEOUT_S:
        if not said and time.monotonic() - started > SLOW_S:
            said = True  # say once that the demo is waiting, and for what
            on_progress(f"  ..   {name:<22} still waiting for kube-scheduler and kubelet")
        state = read_pod_state(await cluster.client.get_pod(namespace, name))
        view, phase = state.pod, state.pod.phase or "Pending"
        if phase in ("Running", "Failed", "Succeeded"):
            cards = allocated_cards(view, card_directory(cluster))
            if not cards:
                cards = await claimed_cards(cluster, state)
            result = PodResult(namespace, name, phase, view.node_name, cards, state.message)
            break
        if state.unscheduled is not None and not view.node_name:
            why = await explain(cluster, http, namespace, name)
            message = f"kube-scheduler: {state.unscheduled}"
            result = PodResult(namespace, name, "Pending", message=message, why=why)
            break
        await asyncio.sleep(0.02)
    return replace(result, seconds=time.monotonic() - started)


def allocated_cards(pod: PodView, cards: Mapping[str, CardInfo]) -> tuple[CardShare, ...]:
    """The scheduler's record of the pod's devices (init containers first), with card names."""
    value = pod.annotations.get(KEY_NVIDIA_ALLOCATED)
    if not value:
        return ()
    try:
        per_container = decode_pod_single_device(value)
    except ProtocolError:
        return ()
    names = [container.name for container in pod.all_containers]
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


async def claimed_cards(cluster: DemoCluster, state: PodState) -> tuple[CardShare, ...]:
    """A pod placed by kube-scheduler through ResourceClaims (a DRA node): each container's
    cards as the claims' allocations record them, with the memory and cores they consumed."""
    cards, devices = card_directory(cluster), dra_device_directory(cluster)
    shares: list[CardShare] = []
    for use in state.claims:
        try:
            claim = await cluster.client.get(RESOURCE_CLAIMS, use.claim, state.pod.namespace)
        except KubeError:
            continue  # the report shows the pod without that claim's cards
        view = read_claim(claim)
        try:
            consumed = consumed_capacity(view)  # in the order of the results
        except QuantityError:  # kube-apiserver validated them: the cards show without their use
            consumed = [{} for _ in view.results]
        for device, amounts in zip(view.results, consumed, strict=True):
            request = device.request.partition("/")[0]  # a container may name one, else all
            if device.driver != DRIVER or (use.request and request != use.request):
                continue
            uuid = devices.get((device.pool, device.device), "")
            info = cards.get(uuid, CardInfo(device.pool, "?", -1))
            memory = amounts.get(CAPACITY_MEMORY, 0) // MIB
            cores = amounts.get(CAPACITY_CORES, 0)
            shares.append(
                CardShare(use.container, device.pool, uuid, info.model, info.index, memory, cores)
            )
    return tuple(shares)


EXPLANATION = TypeAdapter(ExplanationData)  # the scheduler's /explain answer


async def explain(
    cluster: DemoCluster, http: aiohttp.ClientSession, namespace: str, name: str
) -> tuple[NodeWhy, ...]:
    url = f"{cluster.scheduler_url}/explain"
    async with http.get(url, params={"pod": f"{namespace}/{name}"}) as response:
        if response.status != 200:
            return ()
        answer = EXPLANATION.validate_json(await response.read())
    return tuple(
        NodeWhy(node["node"], node["reason"], node["reasons"], node["cards"])
        for node in answer["nodes"]
        if not node["fits"]
    )
