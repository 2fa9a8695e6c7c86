"""The cluster the scheduler benchmarks build: Nodes of 8 A100 80 GB cards split 10 ways, as
the device plugin registers them, and single-GPU pods."""

from __future__ import annotations

from typing import Any

from pyhami.model import DeviceInfo
from pyhami.protocol import KEY_NODE_NVIDIA_REGISTER, encode_node_devices

GPUS_PER_NODE = 8
CARD_MIB = 81920
SPLIT = 10
TOLERATE_ALL = [{"operator": "Exists"}]  # registered-only nodes never report Ready
# What each benchmark pod asks for: 1 GPU, 3,000 MiB, 10 % of its cores.
POD_GPU_MIB = 3000
POD_GPU_CORES = 10
GPU_POD_LIMITS = {
    "nvidia.com/gpu": "1",
    "nvidia.com/gpumem": str(POD_GPU_MIB),
    "nvidia.com/gpucores": str(POD_GPU_CORES),
}


def card_id(node_index: int, card: int) -> str:
    return f"GPU-{node_index:05d}-{card}"


def node_object(name: str, index: int) -> dict[str, Any]:
    """A Node as the device plugin leaves it: the register annotation and GPU capacity."""
    cards = [
        DeviceInfo(
            id=card_id(index, c),
            index=c,
            count=SPLIT,
            devmem=CARD_MIB,
            devcore=100,
            type="NVIDIA-A100-SXM4-80GB",
            numa=0,
            mode="hami-core",
            health=True,
        )
        for c in range(GPUS_PER_NODE)
    ]
    capacity = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "250",
        "nvidia.com/gpu": str(GPUS_PER_NODE * SPLIT),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"gpu": "on", "kubernetes.io/hostname": name},
            "annotations": {KEY_NODE_NVIDIA_REGISTER: encode_node_devices(cards)},
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }
