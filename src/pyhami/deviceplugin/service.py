"""The device plugin process: start, register with kubelet, serve, and restart with kubelet.

`DevicePlugin.run(stop)` loops over plugin instances. An instance reads the configuration,
discovers GPUs, serves the DevicePlugin API on `<plugin dir>/nvidia-<name>.sock`, registers with
kubelet, and runs its node-registration and health tasks. When kubelet restarts (its socket is
re-created, or ours was removed) the instance is stopped, its tasks with it (HAMi leaks them), and a
new one starts. Card health is kept across instances.
"""

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.allocator import Allocator
from pyhami.deviceplugin.api import DEVICE_PLUGIN_PATH, KUBELET_SOCKET
from pyhami.deviceplugin.binding import PodBinding
from pyhami.deviceplugin.config import ConfigError, OperatingMode, VgpuConfig
from pyhami.deviceplugin.health import HealthBoard, HealthSettings, HealthWatcher, sleep_unless
from pyhami.deviceplugin.inventory import Gpu, InventoryError, discover
from pyhami.deviceplugin.mig import MigManager
from pyhami.deviceplugin.migpods import MigPods
from pyhami.deviceplugin.register import NodeRegistrar, Scanner
from pyhami.deviceplugin.server import (
    DevicePluginServicer,
    PluginServer,
    register_with_kubelet,
)
from pyhami.kube import KubeClient, cancel_and_wait, guarded_task
from pyhami.nvml import Nvml
from pyhami.protocol.host_files import MIG_APPLY_LOCK

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PluginOptions:
    node_name: str
    plugin_dir: Path = DEVICE_PLUGIN_PATH
    # None: serve but never register (HAMi's empty --kubelet-socket).
    kubelet_socket: Path | None = KUBELET_SOCKET
    settings: AllocationSettings = field(default_factory=AllocationSettings)
    topology_score: bool = False
    health: HealthSettings = field(default_factory=HealthSettings)
    register_interval: float = 30.0
    retry_interval: float = 5.0
    restart_delay: float = 30.0  # after a failed start, as HAMi
    kubelet_poll: float = 1.0
    mig_reconcile_interval: float = 5.0
    # Removed at each start if stale (None: left alone); the monitor pauses while it exists.
    mig_apply_lock: Path | None = Path(MIG_APPLY_LOCK)


def _remove_stale_mig_apply_lock(lock: Path) -> None:
    """As HAMi's plugin at start: its directory exists and no lock is left (an error fails
    the start, which is retried)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    if lock.exists():
        lock.unlink()
        log.warning("removed a stale %s (the vGPU monitor pauses while it exists)", lock)


class _Instance:
    """One start of the plugin: socket, registration, tasks. `stop()` undoes all of it."""

    def __init__(self, plugin: "DevicePlugin", config: VgpuConfig, gpus: tuple[Gpu, ...]) -> None:
        options = plugin.options
        self.config = config
        self.gpus = gpus
        self.stopping = asyncio.Event()
        # `nvidia.com/gpu` -> `nvidia-gpu.sock`, in kubelet's device-plugin folder
        self.socket = options.plugin_dir / f"nvidia-{config.resource_name.rsplit('/', 1)[-1]}.sock"
        self.binding = PodBinding(plugin.kube, options.node_name)
        manager: MigManager | None = None
        self.mig: MigPods | None = None
        if config.operating_mode == OperatingMode.MIG:
            manager = MigManager(plugin.nvml, gpus, config.mig_profile_allowlist)
            self.mig = MigPods(
                plugin.kube, options.node_name, manager, interval=options.mig_reconcile_interval
            )
        allocator = Allocator(
            plugin.kube,
            self.binding,
            replace(
                options.settings,
                oversubscribe=config.device_memory_scaling > 1,
                lib_cuda_log_level=config.lib_cuda_log_level,
                disable_core_limit=config.disable_core_limit,
                priority_resource=config.priority_resource,
                core_policy=config.core_policy,
            ),
            resource_name=config.resource_name,
            follow_kubelet_choice=config.enable_preferred_allocation,
            mig=self.mig,
        )
        self.servicer = DevicePluginServicer(
            gpus,
            split=config.device_split_count if manager is None else manager.capacities,
            numa_topology=config.enable_numa_topology,
            board=plugin.board,
            allocations=allocator,
            stopping=self.stopping,
        )
        self.server = PluginServer(self.servicer, self.socket, self.stopping)
        scanner = Scanner(
            plugin.nvml,
            gpus,
            config,
            plugin.board,
            topology_score=options.topology_score,
            mig=manager,
        )
        self.registrar = NodeRegistrar(
            plugin.kube,
            options.node_name,
            scanner,
            plugin.board,
            interval=options.register_interval,
            retry_interval=options.retry_interval,
        )
        self.health = HealthWatcher(plugin.nvml, gpus, plugin.board, options.health)
        self.tasks: list[asyncio.Task[None]] = []

    async def stop(self) -> None:
        await cancel_and_wait(*self.tasks)
        await self.binding.close()
        self.stopping.set()
        await self.server.stop()


class DevicePlugin:
    """The whole device plugin for one node."""

    def __init__(
        self,
        kube: KubeClient,
        nvml: Nvml,
        options: PluginOptions,
        load_config: Callable[[], VgpuConfig],
    ) -> None:
        self.kube = kube
        self.nvml = nvml
        self.options = options
        self._load_config = load_config
        self.board = HealthBoard()
        self.current: _Instance | None = None
        self.starts = 0
        self.restart_requested = asyncio.Event()
        self._config: VgpuConfig | None = None

    def request_restart(self) -> None:
        """SIGHUP: stop and start again, re-reading the configuration."""
        self.restart_requested.set()

    def config(self) -> VgpuConfig:
        """Fresh config; on a restart a broken file keeps the previous one (logged)."""
        try:
            self._config = self._load_config()
        except ConfigError:
            if self._config is None:
                raise
            log.exception("configuration unreadable; keeping the previous one")
        return self._config

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set; raises ConfigError if the first configuration is bad."""
        while not stop.is_set():
            self.restart_requested.clear()
            config = self.config()
            try:
                gpus = await asyncio.to_thread(discover, self.nvml, config.device_filter)
            except InventoryError as error:
                log.error("%s; retrying in %gs", error, self.options.restart_delay)
                await sleep_unless(stop, self.options.restart_delay)
                continue
            if not gpus:
                log.warning(
                    "No devices found on %s. Waiting for a restart.", self.options.node_name
                )
                await self._wait(stop, partial(self._kubelet_changed, self._kubelet_identity()))
                continue
            instance = _Instance(self, config, gpus)
            try:
                kubelet_seen = await self._start(instance)
            except Exception as error:
                log.error(
                    "device plugin failed to start, retrying in %gs: %s",
                    self.options.restart_delay,
                    error,
                )
                await instance.stop()
                # Retry after the delay, or as soon as a (new) kubelet socket appears.
                kubelet_now = partial(self._kubelet_changed, self._kubelet_identity())
                await self._wait(stop, kubelet_now, timeout=self.options.restart_delay)
                continue
            self.current = instance
            await self._wait(stop, partial(self._restart_needed, instance, kubelet_seen))
            log.info("stopping device plugin instance (%s)", "exit" if stop.is_set() else "restart")
            await instance.stop()
            self.current = None

    def _kubelet_identity(self) -> tuple[int, int] | None:
        """Inode and ctime of kubelet's socket, which kubelet creates anew at each start."""
        try:
            stat = (self.options.kubelet_socket or self.options.plugin_dir / "kubelet.sock").stat()
        except OSError:
            return None
        return stat.st_ino, stat.st_ctime_ns

    async def _start(self, instance: _Instance) -> tuple[int, int] | None:
        if self.options.mig_apply_lock is not None:
            await asyncio.to_thread(_remove_stale_mig_apply_lock, self.options.mig_apply_lock)
        self.board.track(gpu.uuid for gpu in instance.gpus)
        if instance.mig is not None:
            await instance.mig.startup()
            await asyncio.to_thread(instance.mig.manager.publish_all)
        await instance.server.start()
        if self.options.kubelet_socket is not None:
            await register_with_kubelet(
                self.options.kubelet_socket,
                instance.socket.name,
                instance.config.resource_name,
                preferred_allocation=instance.config.enable_preferred_allocation,
            )
        kubelet_seen = self._kubelet_identity()  # the kubelet we registered with
        self.starts += 1
        log.info(
            "serving %d GPUs x %d as %s on %s",
            len(instance.gpus),
            instance.config.device_split_count,
            instance.config.resource_name,
            instance.socket,
        )
        stopping = instance.stopping
        instance.tasks = [
            guarded_task(instance.registrar.run(stopping), "node-registration"),
            # Ends by itself when DP_DISABLE_HEALTHCHECKS turns XID checks off.
            guarded_task(instance.health.run(stopping), "xid-health", may_finish=True),
        ]
        if instance.mig is not None:
            instance.tasks.append(guarded_task(instance.mig.run(stopping), "mig-reconcile"))
        return kubelet_seen

    def _kubelet_changed(self, seen: tuple[int, int] | None) -> bool:
        return self._kubelet_identity() not in (seen, None)

    def _restart_needed(self, instance: _Instance, kubelet_seen: tuple[int, int] | None) -> bool:
        if self._kubelet_changed(kubelet_seen):
            log.info("kubelet socket re-created: kubelet restarted, registering again")
            return True
        if not os.path.exists(instance.socket):
            log.info("our socket %s was removed: registering again", instance.socket)
            return True
        return False

    async def _wait(
        self, stop: asyncio.Event, restart_needed: Callable[[], bool], timeout: float | None = None
    ) -> None:
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while not (stop.is_set() or self.restart_requested.is_set() or restart_needed()):
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                return
            await sleep_unless(stop, self.options.kubelet_poll)
