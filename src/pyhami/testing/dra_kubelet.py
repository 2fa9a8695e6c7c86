"""kubelet's DRA half for tests and the node agent: the real gRPC protocols on real unix sockets.

Like kubelet's plugin watcher it watches a registration directory for sockets; for each new one
it asks `Registration.GetInfo`, checks the answer the way kubelet does (type "DRAPlugin", a
supported service it speaks, an absolute endpoint), tells the plugin with
`NotifyRegistrationStatus`, and then dials the plugin's endpoint for `NodePrepareResources` and
`NodeUnprepareResources`. A registration socket that disappears unregisters its plugin.

    async with DRAKubelet() as kubelet:
        ...start a driver with registry_dir=kubelet.registry_dir...
        plugin = await kubelet.wait_for_plugin("gpu.pyhami.io")
        response = await plugin.prepare([ClaimRef("default", "claim-1", "uid-1")])
        edits = cdi_edits([cdi_dir], response.claims["uid-1"].devices[0].cdi_device_ids[0])
"""

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import yaml

from pyhami.dra.api import (
    DRA_PLUGIN_SERVICE,
    PLUGIN_TYPE,
    dra_pb2,
    dra_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from pyhami.kube.tasks import cancel_and_wait
from pyhami.testing.fake_kubelet import SocketDirectoryService

log = logging.getLogger(__name__)

# kubelet's plugin watcher notices new sockets within about a second; tests want it faster.
POLL_SECONDS = 0.05


class DRAKubeletError(Exception):
    """The DRA kubelet double could not do what was asked (no such plugin, an RPC failed)."""


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as kubelet names it to a DRA plugin."""

    namespace: str
    name: str
    uid: str

    def message(self) -> dra_pb2.Claim:
        return dra_pb2.Claim(namespace=self.namespace, name=self.name, uid=self.uid)


@dataclass(frozen=True)
class CdiMount:
    container_path: str
    host_path: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class CdiEdits:
    """What a container runtime applies to a container for one CDI device."""

    env: dict[str, str]
    mounts: tuple[CdiMount, ...]


def cdi_edits(cdi_dirs: Sequence[Path], device_id: str) -> CdiEdits:
    """The container edits of the fully qualified CDI device `vendor/class=name`, looked up in
    the spec files (JSON or YAML) of `cdi_dirs` as a runtime does (spec-wide edits first, then
    the device's)."""
    kind, sep, name = device_id.partition("=")
    if not sep or "/" not in kind or not name:
        raise DRAKubeletError(f"{device_id!r} is not a CDI device id (vendor/class=name)")
    for path in sorted(p for d in cdi_dirs for p in d.glob("*") if p.suffix in (".json", ".yaml")):
        try:
            spec = yaml.safe_load(path.read_text())  # JSON is YAML
        except (OSError, yaml.YAMLError) as error:
            raise DRAKubeletError(f"unreadable CDI spec {path}: {error}") from error
        if not isinstance(spec, dict) or spec.get("kind") != kind:
            continue
        for device in spec.get("devices") or []:
            if device.get("name") != name:
                continue
            env: dict[str, str] = {}
            mounts: list[CdiMount] = []
            for edits in (spec.get("containerEdits") or {}, device.get("containerEdits") or {}):
                env.update(item.split("=", 1) for item in edits.get("env") or [])
                mounts.extend(
                    CdiMount(m["containerPath"], m["hostPath"], tuple(m.get("options") or ()))
                    for m in edits.get("mounts") or []
                )
            return CdiEdits(env, tuple(mounts))
    raise DRAKubeletError(f"no CDI spec in {[str(d) for d in cdi_dirs]} defines device {device_id}")


class DRAPluginConnection:
    """kubelet's client of one registered DRA plugin."""

    def __init__(self, info: pluginregistration_pb2.PluginInfo, registration_socket: Path) -> None:
        self.info = info
        self.driver_name = info.name
        self.endpoint = Path(info.endpoint)
        self.registration_socket = registration_socket
        self._channel = grpc.aio.insecure_channel(
            f"unix://{self.endpoint}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.stub = dra_pb2_grpc.DRAPluginStub(self._channel)

    async def prepare(
        self, claims: Sequence[ClaimRef], timeout: float = 30.0
    ) -> dra_pb2.NodePrepareResourcesResponse:
        """One NodePrepareResources call (kubelet batches a pod's claims per driver)."""
        request = dra_pb2.NodePrepareResourcesRequest(claims=[c.message() for c in claims])
        return await self.stub.NodePrepareResources(request, timeout=timeout, wait_for_ready=True)

    async def unprepare(
        self, claims: Sequence[ClaimRef], timeout: float = 30.0
    ) -> dra_pb2.NodeUnprepareResourcesResponse:
        request = dra_pb2.NodeUnprepareResourcesRequest(claims=[c.message() for c in claims])
        return await self.stub.NodeUnprepareResources(request, timeout=timeout, wait_for_ready=True)

    async def close(self) -> None:
        await self._channel.close()


def registration_problem(info: pluginregistration_pb2.PluginInfo) -> str | None:
    """Why kubelet would refuse this DRA registration, or None."""
    if info.type != PLUGIN_TYPE:
        return f"plugin type {info.type!r} is not {PLUGIN_TYPE!r}"
    if not info.name:
        return "empty driver name"
    if DRA_PLUGIN_SERVICE not in info.supported_versions:
        return (
            f"none of the supported services {list(info.supported_versions)} is "
            f"{DRA_PLUGIN_SERVICE!r}"
        )
    if not Path(info.endpoint).is_absolute():
        return f"endpoint {info.endpoint!r} is not an absolute socket path"
    return None


class DRAKubelet(SocketDirectoryService):
    """Plugin watcher, registration client and DRA client, in one asyncio loop."""

    def __init__(self, registry_dir: Path | None = None) -> None:
        super().__init__(registry_dir, "kreg-")
        self.plugins: dict[str, DRAPluginConnection] = {}
        self.registrations = 0
        self._by_socket: dict[Path, DRAPluginConnection] = {}
        self._tried: dict[Path, tuple[int, int]] = {}  # socket -> (inode, ctime) seen
        self._changed = asyncio.Condition()
        self._watch: asyncio.Task[None] | None = None

    @property
    def registry_dir(self) -> Path:
        """kubelet's plugin registration directory, which it watches for sockets."""
        return self.directory

    async def start(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self._watch = asyncio.create_task(self._watch_directory(), name="dra-kubelet-watch")

    async def stop(self) -> None:
        await cancel_and_wait(self._watch)
        self._watch = None
        for plugin in list(self._by_socket.values()):
            await plugin.close()
        self._by_socket.clear()
        self.plugins.clear()
        self._tried.clear()

    async def _watch_directory(self) -> None:
        while True:
            # By identity, as kubelet's file watcher sees a re-created socket as a new one.
            present: dict[Path, tuple[int, int]] = {}
            for socket in self.registry_dir.glob("*.sock"):
                with contextlib.suppress(FileNotFoundError):
                    stat = socket.stat()
                    present[socket] = (stat.st_ino, stat.st_ctime_ns)
            for socket, identity in list(self._tried.items()):
                if present.get(socket) != identity:
                    del self._tried[socket]
                    await self._unregister(socket)
            for socket, identity in sorted(present.items()):
                if socket not in self._tried:
                    self._tried[socket] = identity
                    await self._register(socket)
            await asyncio.sleep(POLL_SECONDS)

    async def _register(self, socket: Path) -> None:
        options = [("grpc.use_local_subchannel_pool", 1)]
        try:
            async with grpc.aio.insecure_channel(f"unix://{socket}", options=options) as channel:
                stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
                info = await stub.GetInfo(
                    pluginregistration_pb2.InfoRequest(), timeout=5, wait_for_ready=True
                )
                problem = registration_problem(info)
                await stub.NotifyRegistrationStatus(
                    pluginregistration_pb2.RegistrationStatus(
                        plugin_registered=problem is None, error=problem or ""
                    ),
                    timeout=5,
                )
        except grpc.aio.AioRpcError as error:
            problem = f"{error.code().name}: {error.details()}"
        if problem is not None:
            log.warning("DRA kubelet: cannot register %s: %s", socket, problem)
            return
        async with self._changed:
            plugin = DRAPluginConnection(info, socket)
            previous = self.plugins.get(plugin.driver_name)
            self.plugins[plugin.driver_name] = plugin
            self._by_socket[socket] = plugin
            self.registrations += 1
            if previous is not None:
                self._by_socket.pop(previous.registration_socket, None)
                await previous.close()
            self._changed.notify_all()

    async def _unregister(self, socket: Path) -> None:
        async with self._changed:
            plugin = self._by_socket.pop(socket, None)
            if plugin is not None and self.plugins.get(plugin.driver_name) is plugin:
                del self.plugins[plugin.driver_name]
            self._changed.notify_all()
        if plugin is not None:
            await plugin.close()

    async def wait_for_plugin(
        self, driver_name: str, timeout: float = 10.0, *, registrations: int = 1
    ) -> DRAPluginConnection:
        """Wait until `driver_name` is registered, after `registrations` registrations in all."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(
                lambda: driver_name in self.plugins and self.registrations >= registrations
            )
            return self.plugins[driver_name]

    async def wait_for_unregistered(self, driver_name: str, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: driver_name not in self.plugins)

    def plugin(self, driver_name: str) -> DRAPluginConnection:
        try:
            return self.plugins[driver_name]
        except KeyError:
            raise DRAKubeletError(f"no DRA plugin registered for {driver_name}") from None
