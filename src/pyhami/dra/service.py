"""The DRA driver process: GPUs from NVML, their health, the slice, and kubelet's two sockets.

`DraDriver.run(stop)` loads the checkpoint (a bad one stops the start with its reason),
discovers the GPUs, starts XID health watching and the ResourceSlice publisher, serves the
DRAPlugin service on `<plugins dir>/gpu.pyhami.io/dra.sock`, and only then opens the
registration socket, so kubelet never finds a driver that cannot answer yet. A registration
socket that disappears (kubelet cleans its registry directory on some restarts) is opened again.
"""

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.health import HealthBoard, HealthSettings, HealthWatcher, sleep_unless
from pyhami.deviceplugin.inventory import discover
from pyhami.deviceplugin.server import SocketServer
from pyhami.dra import cdi
from pyhami.dra.api import (
    DRIVER,
    KUBELET_PLUGINS_DIR,
    KUBELET_REGISTRY_DIR,
    dra_pb2_grpc,
    pluginregistration_pb2_grpc,
)
from pyhami.dra.checkpoint import Checkpoint
from pyhami.dra.plugin import DRAPluginServicer, RegistrationServicer
from pyhami.dra.prepare import Preparer
from pyhami.dra.slices import SlicePublisher, read_facts
from pyhami.kube import KubeClient, cancel_and_wait, guarded_task
from pyhami.kube.errors import KubeError
from pyhami.kube.views import read_node
from pyhami.model import NodeSpecError
from pyhami.nvml import Nvml

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DriverOptions:
    node_name: str
    plugins_dir: Path = KUBELET_PLUGINS_DIR
    registry_dir: Path = KUBELET_REGISTRY_DIR
    cdi_dir: Path = cdi.CDI_DIR
    settings: AllocationSettings = field(default_factory=AllocationSettings)
    device_filter: DeviceFilter = field(default_factory=DeviceFilter)
    health: HealthSettings = field(default_factory=HealthSettings)
    retry_interval: float = 5.0
    socket_poll: float = 1.0

    @property
    def driver_dir(self) -> Path:
        return self.plugins_dir / DRIVER

    @property
    def plugin_socket(self) -> Path:
        return self.driver_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRIVER}-reg.sock"

    @property
    def checkpoint_file(self) -> Path:
        return self.driver_dir / "checkpoint.json"


class DraDriver:
    """The whole DRA driver for one node."""

    def __init__(self, kube: KubeClient, nvml: Nvml, options: DriverOptions) -> None:
        self.kube = kube
        self.nvml = nvml
        self.options = options
        self.publisher: SlicePublisher | None = None
        self.registration: RegistrationServicer | None = None
        self.ready = asyncio.Event()  # serving and registered-socket open

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set (raises CheckpointError, InventoryError, NvmlError)."""
        options = self.options
        checkpoint = await asyncio.to_thread(Checkpoint.load, options.checkpoint_file)
        gpus = await asyncio.to_thread(discover, self.nvml, options.device_filter)
        facts = await asyncio.to_thread(read_facts, self.nvml, gpus)
        board = HealthBoard(gpu.uuid for gpu in gpus)
        preparer = Preparer(
            self.kube,
            options.node_name,
            facts,
            options.settings,
            checkpoint,
            cdi_dir=options.cdi_dir,
        )
        self.publisher = SlicePublisher(
            self.kube,
            options.node_name,
            facts,
            board,
            node_uid=await self._node_uid(),
            retry_interval=options.retry_interval,
        )
        health = HealthWatcher(self.nvml, gpus, board, options.health)
        servicer = DRAPluginServicer(preparer)
        self.registration = registration = RegistrationServicer(options.plugin_socket)
        plugin_server = SocketServer(
            options.plugin_socket,
            lambda server: dra_pb2_grpc.add_DRAPluginServicer_to_server(servicer, server),
        )
        registration_server = SocketServer(
            options.registration_socket,
            lambda server: pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(
                registration, server
            ),
        )
        tasks = [
            guarded_task(self.publisher.run(stop), "dra-resourceslice"),
            guarded_task(health.run(stop), "dra-xid-health", may_finish=True),
        ]
        try:
            await plugin_server.start()
            await registration_server.start()
            log.info(
                "DRA driver %s serving %d GPUs on %s (%d claims prepared before)",
                DRIVER,
                len(gpus),
                options.plugin_socket,
                len(checkpoint.claims),
            )
            self.ready.set()
            await self._keep_registration_socket(stop, registration_server)
        finally:
            await cancel_and_wait(*tasks)
            await registration_server.stop()
            await plugin_server.stop()

    async def _node_uid(self) -> str:
        try:
            return read_node(await self.kube.get_node(self.options.node_name)).uid
        except (KubeError, NodeSpecError) as error:
            log.warning("ResourceSlice without an owner (cannot read node): %s", error)
            return ""

    async def _keep_registration_socket(self, stop: asyncio.Event, server: SocketServer) -> None:
        while not stop.is_set():
            await sleep_unless(stop, self.options.socket_poll)
            if not stop.is_set() and not server.socket.exists():
                log.info("registration socket %s was removed: opening it again", server.socket)
                await server.stop()
                await server.start()
