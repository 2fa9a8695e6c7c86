"""What the demo cluster is made of: how many nodes, which cards, how fast the loops turn."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyhami.testing.fake_nvml import FakeGpu, a100_80g, t4, v100_32g

# The cards of node i (from 1) are of model MODELS[(i - 1) % len(MODELS)].
MODELS: tuple[Callable[..., FakeGpu], ...] = (a100_80g, v100_32g, t4)


def card_uuid(node: int, index: int) -> str:
    """Stable, unique per node and card (FakeNVML's default repeats on every node)."""
    return f"GPU-{node:08x}-0000-4000-8000-{index:012x}"


def node_name(node: int) -> str:
    return f"gpu-node-{node}"


@dataclass(frozen=True, slots=True)
class DemoSettings:
    nodes: int = 3
    gpus: int = 4  # per node
    monitor_tick_s: float = 1.0  # HAMi's is 5 s; shorter so usage shows within the demo
    harness_backoff_s: tuple[float, float] = (1.0, 10.0)  # kube-scheduler's defaults
    # Cards per node, overriding MODELS and `gpus` (the system tests pin the stub's card).
    cards: Sequence[Sequence[FakeGpu]] | None = None
    # A built libvgpu.so to install on every node, as the device plugin's DaemonSet does.
    libvgpu: Path | None = None
    # Nodes running the DRA driver instead of the device plugin (Kubernetes' own control plane
    # only), numbered after the device-plugin nodes for their card models and uuids; the webhook
    # translates pods headed there (--dra-mode selected). With `nodes` 0 every GPU node is a
    # DRA node.
    dra_nodes: int = 0
    # Cards per DRA node (one entry per node of `dra_nodes`), overriding MODELS and `gpus`.
    dra_cards: Sequence[Sequence[FakeGpu]] | None = None

    def __post_init__(self) -> None:
        if self.dra_cards is not None and len(self.dra_cards) != self.dra_nodes:
            raise ValueError(
                f"dra_cards names {len(self.dra_cards)} nodes' cards for {self.dra_nodes} DRA nodes"
            )
        if self.cards is None and not (0 if self.dra_nodes else 1) <= self.nodes <= 64:
            raise ValueError(f"--nodes must be 1..64, got {self.nodes}")
        if not 0 <= self.dra_nodes <= 64:
            raise ValueError(f"--dra-nodes must be 0..64, got {self.dra_nodes}")
        if self.cards is None and not 1 <= self.gpus <= 16:
            raise ValueError(f"--gpus must be 1..16 (NVML indexes per node), got {self.gpus}")
        if self.libvgpu is not None and not self.libvgpu.is_file():
            raise ValueError(f"libvgpu {self.libvgpu} is not a file (make -C native/libvgpu)")

    def dra_node_cards(self) -> list[list[FakeGpu]]:
        if self.dra_cards is not None:
            return [list(cards) for cards in self.dra_cards]
        first = len(self.node_cards()) + 1
        return self._cards_of(range(first, first + self.dra_nodes))

    def node_cards(self) -> list[list[FakeGpu]]:
        if self.cards is not None:
            return [list(cards) for cards in self.cards]
        return self._cards_of(range(1, self.nodes + 1))

    def _cards_of(self, numbers: range) -> list[list[FakeGpu]]:
        return [
            [
                MODELS[(n - 1) % len(MODELS)](numa=i * 2 // self.gpus, uuid=card_uuid(n, i))
                for i in range(self.gpus)
            ]
            for n in numbers
        ]
