"""Submit pods to a running demo cluster one by one and collect what became of each.

A pod is created through the API (so the webhook sees it), then followed until kubelet started
it (Running), refused it, or kube-scheduler's first attempt found no node (its PodScheduled=False
condition, written by Kubernetes' kube-scheduler and by the harness alike); for those the
scheduler's `/explain` endpoint is asked why, over HTTPS as any client would.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from pyhami.kube import JsonObject, KubeError
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, ProtocolError, decode_pod_single_device
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.results import CardInfo, CardShare, NodeWhy, PodResult

SETTLE_TIMEOUT_S = 20.0


def card_directory(cluster: DemoCluster) -> dict[str, CardInfo]:
    """Every card's uuid → node, model and NVML index."""
    return {
        gpu.uuid: CardInfo(node.name, gpu.name, index)
        for node in cluster.nodes
        for index, gpu in enumerate(node.nvml.gpus)
    }


async def submit_all(
    cluster: DemoCluster,
    pods: Sequence[JsonObject],
    on_result: Callable[[PodResult], None] = lambda _r: None,
) -> list[PodResult]:
    """Submit `pods` in order, each once the previous one settled (binpack depends on order)."""
    context = ssl.create_default_context(cadata=cluster.ca_pem.decode())
    results = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
        for pod in pods:
            result = await submit_one(cluster, pod, http)
            on_result(result)
            results.append(result)
    return results


async def submit_one(
    cluster: DemoCluster, pod: JsonObject, http: aiohttp.ClientSession
) -> PodResult:
    namespace = str(pod["metadata"]["namespace"])
    name = str(pod["metadata"]["name"])
    started = time.monotonic()
    try:
        await cluster.client.create_pod(namespace, pod)
    except KubeError as err:
        return PodResult(namespace, name, "Refused", message=f"API server: {err}")
    result = await _settle(cluster, namespace, name, http)
    return replace(result, seconds=time.monotonic() - started)


async def _settle(
    cluster: DemoCluster, namespace: str, name: str, http: aiohttp.ClientSession
) -> PodResult:
    until = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < until:
        pod = await cluster.client.get_pod(namespace, name)
        status = pod.get("status") or {}
        phase = str(status.get("phase", "Pending"))
        if phase in ("Running", "Failed", "Succeeded"):
            cards = allocated_cards(pod, card_directory(cluster))
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
