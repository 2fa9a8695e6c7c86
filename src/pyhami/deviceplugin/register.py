"""Publishing the node's GPUs in `hami.io/node-nvidia-register`.

Every 30 s (5 s after an error), and right away when a card's health changes: read NVML, build
the annotation(s), and merge-patch the node only if what is on the node differs. Because the
comparison is with the node itself, a failed patch is simply retried with the newest value
(HAMi caches the value before patching and never retries), and an annotation deleted by
someone else is put back. GPUs are listed in index order (HAMi's order is random). An NVML
failure on one card publishes it unhealthy instead of crashing the plugin.
Each is a fix listed in docs/hami-compatibility.md.
"""

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field

from pyhami.deviceplugin.config import OperatingMode, VgpuConfig
from pyhami.deviceplugin.health import HealthBoard
from pyhami.deviceplugin.inventory import Gpu
from pyhami.deviceplugin.mig import MigManager
from pyhami.deviceplugin.topology import PairScores, read_pair_scores
from pyhami.kube import Clock, KubeClient, KubeError, SystemClock
from pyhami.kube.patches import node_annotations_patch
from pyhami.kube.views import read_node
from pyhami.model import DeviceInfo, MigProfile
from pyhami.nvml import Nvml, NvmlError, NvmlNotSupportedError
from pyhami.protocol import (
    KEY_NODE_NVIDIA_REGISTER,
    KEY_NODE_NVIDIA_SCORE,
    encode_node_devices,
    encode_pair_scores,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024
EVENT_DEDUP_SECONDS = 3600.0


def device_info(
    gpu: Gpu,
    memory_mib: int,
    config: VgpuConfig,
    healthy: bool,
    *,
    mig_profiles: tuple[MigProfile, ...] = (),
    mig_count: int = 0,
) -> DeviceInfo:
    """One annotation entry: scaled memory and cores, split count, mode, health.

    Dynamic MIG: unscaled memory, devcore 100, count = most instances of any profile.
    """
    mig = config.operating_mode == OperatingMode.MIG
    return DeviceInfo(
        id=gpu.uuid,
        index=gpu.index,
        count=mig_count if mig else config.device_split_count,
        devmem=memory_mib if mig else int(memory_mib * config.device_memory_scaling),
        devcore=100 if mig else int(config.device_core_scaling * 100),
        # HAMi's `type`: the NVML name, prefixed `NVIDIA-` unless it already starts with NVIDIA.
        type=gpu.name if gpu.name.startswith("NVIDIA") else f"NVIDIA-{gpu.name}",
        numa=gpu.numa or 0,  # unknown NUMA is published as 0, as HAMi does
        mode=config.operating_mode,
        mig_profiles=mig_profiles,
        health=healthy,
    )


@dataclass(eq=False)
class Scanner:
    """Reads NVML into the annotation values; remembers each card's last good memory size."""

    nvml: Nvml
    gpus: Sequence[Gpu]
    config: VgpuConfig
    board: HealthBoard
    _: KW_ONLY
    topology_score: bool
    mig: MigManager | None = None
    _memory: dict[str, int] = field(default_factory=dict, init=False)

    def _memory_mib(self, gpu: Gpu) -> tuple[int | None, bool]:
        """(MiB to publish or None to leave the card out, whether NVML answered)."""
        try:
            total = self.nvml.device_memory(gpu.index).total // MIB
        except NvmlNotSupportedError:
            configured = self.config.preconfigured_device_memory
            if configured <= 0:
                log.warning(
                    "GPU %s: NVML cannot report its memory and preConfiguredDeviceMemory is 0; "
                    "not registering it",
                    gpu.uuid,
                )
                return None, True
            return configured, True
        except NvmlError as error:
            log.error("GPU %s: memory query failed, publishing it unhealthy: %s", gpu.uuid, error)
            return self._memory.get(gpu.uuid, 0), False
        self._memory[gpu.uuid] = total
        return total, True

    def devices(self) -> list[DeviceInfo]:
        infos = []
        for gpu in self.gpus:
            memory, answered = self._memory_mib(gpu)
            if memory is None:
                continue
            healthy = answered and self.board.healthy(gpu.uuid)
            profiles: tuple[MigProfile, ...] = ()
            if self.mig is not None:
                profiles = self.mig.publish(gpu)
                if not profiles:  # HAMi skips a MIG-mode GPU without profiles too
                    continue
            count = self.kubelet_counts().get(gpu.uuid, 0)
            infos.append(
                device_info(
                    gpu, memory, self.config, healthy, mig_profiles=profiles, mig_count=count
                )
            )
        return infos

    def kubelet_counts(self) -> dict[str, int]:
        """Devices per card that kubelet is told of, where a scan can change them: a MIG
        card's published instance count (empty outside MIG mode, where it is the split)."""
        return {} if self.mig is None else dict(self.mig.capacities)

    def scores(self, devices: Sequence[DeviceInfo]) -> PairScores | None:
        if not self.topology_score:
            return None
        registered = {device.id for device in devices}
        return read_pair_scores(self.nvml, [g for g in self.gpus if g.uuid in registered])


@dataclass(eq=False)
class NodeRegistrar:
    """Keeps the node's register (and score) annotations equal to what NVML says."""

    kube: KubeClient
    node_name: str
    scanner: Scanner
    board: HealthBoard
    _: KW_ONLY
    interval: float = 30.0
    retry_interval: float = 5.0
    clock: Clock = field(default_factory=SystemClock)
    _warned: dict[tuple[str, str], float] = field(default_factory=dict, init=False)
    _kubelet_counts: dict[str, int] = field(default_factory=dict, init=False)
    patches: int = field(default=0, init=False)  # node patches written, for tests

    async def desired(self) -> dict[str, str]:
        devices = await asyncio.to_thread(self.scanner.devices)
        counts = self.scanner.kubelet_counts()
        if counts != self._kubelet_counts:
            # A MIG card whose profiles could not be read at start (count 0) has them now:
            # kubelet must be told, or the scheduler places pods kubelet cannot admit.
            self._kubelet_counts = counts
            self.board.listing_changed()
        wanted = {KEY_NODE_NVIDIA_REGISTER: encode_node_devices(devices)}
        scores = await asyncio.to_thread(self.scanner.scores, devices)
        if scores is not None:
            wanted[KEY_NODE_NVIDIA_SCORE] = encode_pair_scores(scores.scores)
            await self._warn_asymmetric(scores)
        return wanted

    async def sync_once(self) -> bool:
        """One scan; patch the node if it differs. Returns whether it patched. Raises on error."""
        wanted = await self.desired()
        current = read_node(await self.kube.get_node(self.node_name)).annotations
        if all(current.get(key) == value for key, value in wanted.items()):
            return False
        await self.kube.patch_node(self.node_name, node_annotations_patch(wanted))
        self.patches += 1
        log.info("registered %s on node %s", KEY_NODE_NVIDIA_REGISTER, self.node_name)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        # What ListAndWatch was first given (the plugin publishes MIG cards before serving).
        self._kubelet_counts = self.scanner.kubelet_counts()
        while not stop.is_set():
            seen = self.board.version
            try:
                await self.sync_once()
                pause = self.interval
            except Exception as error:
                log.error(
                    "node registration failed, retrying in %gs: %s", self.retry_interval, error
                )
                pause = self.retry_interval
            await self.board.until_change(seen, stop, pause)

    async def _warn_asymmetric(self, scores: PairScores) -> None:
        now = self.clock.monotonic()
        for pair in scores.asymmetric:
            last = self._warned.get(pair)
            if last is not None and now - last < EVENT_DEDUP_SECONDS:
                continue
            self._warned[pair] = now
            message = f"GPU P2P links between {pair[0]} and {pair[1]} are asymmetric; pair scored 0"
            log.warning("%s on node %s", message, self.node_name)
            try:
                await self.kube.create_event("default", self._event(message))
            except KubeError as error:
                log.error("cannot record AsymmetricGPUP2PLink event: %s", error)

    def _event(self, message: str) -> dict[str, object]:
        return {
            "metadata": {"generateName": f"{self.node_name}."},
            "involvedObject": {"kind": "Node", "name": self.node_name, "apiVersion": "v1"},
            "reason": "AsymmetricGPUP2PLink",
            "message": message,
            "type": "Warning",
            "source": {"component": "hami-device-plugin", "host": self.node_name},
        }
