"""Builders for pods and nodes in Kubernetes JSON, and card inventories."""

from typing import Any

from pyhami.devices.inventory import NodeInventory
from pyhami.model import DeviceInfo


def card(uuid: str, index: int = 0, mem: int = 8000, count: int = 10, numa: int = 0) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem=mem,
        devcore=100,
        type="NVIDIA-A100",
        numa=numa,
        mode="hami-core",
        health=True,
    )


def inventory(*cards: DeviceInfo) -> NodeInventory:
    return NodeInventory(devices=tuple(cards))


def node(name: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": dict(annotations), "resourceVersion": "1"}}


def gpu_pod(
    name: str,
    *,
    gpus: int = 1,
    mem: int | None = None,
    cores: int | None = None,
    uid: str | None = None,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }
