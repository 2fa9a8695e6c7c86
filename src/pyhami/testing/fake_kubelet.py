"""A kubelet stand-in for device-plugin tests: the real gRPC protocol on real unix sockets.

Like kubelet it serves `Registration` on `<dir>/kubelet.sock`; for every plugin that registers it
dials `<dir>/<endpoint>`, asks `GetDevicePluginOptions`, keeps a `ListAndWatch` stream open, and
admits containers by picking free healthy device ids (through `GetPreferredAllocation` when the
plugin offers it) and calling `Allocate`. `restart()` does what a kubelet restart does to plugins:
the registration server goes away, every socket in the directory is removed, and a new
`kubelet.sock` appears.

    async with FakeKubelet() as kubelet:
        ...start a plugin with plugin_dir=kubelet.directory...
        plugin = await kubelet.wait_for_plugin("nvidia.com/gpu")
        await plugin.wait_for_devices(lambda devices: len(devices) == 20)
        response = await plugin.admit_container(1)
"""

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from pyhami.deviceplugin.api import HEALTHY, VERSION, api_pb2, api_pb2_grpc
from pyhami.kube.lifecycle import AsyncService
from pyhami.kube.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Devices = tuple[api_pb2.Device, ...]


class SocketDirectoryService(AsyncService):
    """A kubelet double serving in a directory of sockets: a short temporary one of its own
    unless given one (unix socket paths are limited to ~107 bytes), removed once it stopped."""

    def __init__(self, directory: Path | None, prefix: str) -> None:
        self._owns_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await super().__aexit__(exc_type, exc, tb)
        if self._owns_directory:  # here, not in stop(): FakeKubelet.restart() keeps it
            shutil.rmtree(self.directory, ignore_errors=True)


class KubeletError(Exception):
    """The fake kubelet could not do what a test asked (no such plugin, no free device, ...)."""


class PluginConnection:
    """kubelet's view of one registered plugin: options, its latest device list, allocations."""

    def __init__(self, request: api_pb2.RegisterRequest, socket: Path) -> None:
        self.request = request
        self.resource_name = request.resource_name
        self.socket = socket
        self.options = api_pb2.DevicePluginOptions()
        self.devices: Devices = ()
        self.updates = 0  # ListAndWatch messages received
        self.stream_ended = False
        self.in_use: set[str] = set()
        self._changed = asyncio.Condition()
        # Own subchannel: no reconnect backoff inherited from a channel to a plugin that went away.
        self._channel = grpc.aio.insecure_channel(
            f"unix://{socket}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.stub = api_pb2_grpc.DevicePluginStub(self._channel)
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # kubelet dials plugins blocking, with a timeout.
        self.options = await self.stub.GetDevicePluginOptions(
            api_pb2.Empty(), timeout=5, wait_for_ready=True
        )
        self._watch = asyncio.create_task(
            self._list_and_watch(), name=f"kubelet-law-{self.resource_name}"
        )

    async def _list_and_watch(self) -> None:
        try:
            async for response in self.stub.ListAndWatch(api_pb2.Empty()):
                async with self._changed:
                    self.devices = tuple(response.devices)
                    self.updates += 1
                    self._changed.notify_all()
        except grpc.aio.AioRpcError:
            pass  # the plugin went away: `stream_ended` says so
        finally:
            async with self._changed:
                self.stream_ended = True
                self._changed.notify_all()

    async def wait_for_devices(
        self, predicate: Callable[[Devices], bool], timeout: float = 10.0
    ) -> Devices:
        """Wait until the latest ListAndWatch list satisfies `predicate`; return it."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self.devices))
            return self.devices

    async def wait_for_stream_end(self, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.stream_ended)

    def healthy_ids(self) -> list[str]:
        return [d.ID for d in self.devices if d.health == HEALTHY]

    async def admit_container(self, count: int) -> api_pb2.ContainerAllocateResponse:
        """Admit one container asking for `count` devices, the way kubelet's device manager does."""
        available = [i for i in self.healthy_ids() if i not in self.in_use]
        if len(available) < count:
            raise KubeletError(
                f"{self.resource_name}: {count} requested, {len(available)} free and healthy"
            )
        chosen = available[:count]
        if self.options.get_preferred_allocation_available:
            preferred = await self.stub.GetPreferredAllocation(
                api_pb2.PreferredAllocationRequest(
                    container_requests=[
                        api_pb2.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available, allocation_size=count
                        )
                    ]
                ),
                timeout=10,
            )
            if preferred.container_responses:
                ids = list(preferred.container_responses[0].deviceIDs)
                # kubelet only honours a preference made of free devices of the right size.
                if len(ids) == count and set(ids) <= set(available):
                    chosen = ids
        response = await self.allocate([chosen])
        self.in_use.update(chosen)
        return response.container_responses[0]

    async def allocate(self, device_ids: Sequence[Sequence[str]]) -> api_pb2.AllocateResponse:
        """A raw Allocate call, one container request per id list."""
        request = api_pb2.AllocateRequest(
            container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=list(ids)) for ids in device_ids
            ]
        )
        return await self.stub.Allocate(request, timeout=30)

    async def close(self) -> None:
        await cancel_and_wait(self._watch)
        await self._channel.close()


class FakeKubelet(SocketDirectoryService, api_pb2_grpc.RegistrationServicer):
    """Registration server plus device-manager client, in one asyncio loop."""

    def __init__(self, directory: Path | None = None) -> None:
        super().__init__(directory, "kubelet-")
        self.socket = self.directory / "kubelet.sock"
        self.registrations: list[api_pb2.RegisterRequest] = []
        self.plugins: dict[str, PluginConnection] = {}
        self._server: grpc.aio.Server | None = None
        self._registered = asyncio.Condition()
        self._connecting: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        await cancel_and_wait(*self._connecting)
        for plugin in list(self.plugins.values()):
            await plugin.close()
        self.plugins.clear()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        self.socket.unlink(missing_ok=True)

    async def restart(self) -> None:
        """Go away, remove every socket in the directory (as kubelet does), and come back."""
        await self.stop()
        for socket in self.directory.glob("*.sock"):
            socket.unlink(missing_ok=True)
        await self.start()

    async def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api_pb2.Empty:
        problem = self._problem(request)
        if problem is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        self.registrations.append(request)
        # Like kubelet: answer Register first, then connect to the plugin in the background.
        task = asyncio.create_task(
            self._connect(request), name=f"kubelet-connect-{request.endpoint}"
        )
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)
        return api_pb2.Empty()

    def _problem(self, request: api_pb2.RegisterRequest) -> str | None:
        if request.version != VERSION:
            return f"unsupported device plugin API version {request.version!r}, want {VERSION}"
        if "/" not in request.resource_name:
            return f"invalid extended resource name {request.resource_name!r}"
        if "/" in request.endpoint or not request.endpoint:
            return (
                f"endpoint must be a socket file name in {self.directory}, got {request.endpoint!r}"
            )
        return None

    async def _connect(self, request: api_pb2.RegisterRequest) -> None:
        plugin = PluginConnection(request, self.directory / request.endpoint)
        try:
            await plugin.start()
        except grpc.aio.AioRpcError as error:
            log.warning(
                "fake kubelet: cannot reach plugin %s: %s", request.endpoint, error.details()
            )
            await plugin.close()
            return
        previous = self.plugins.get(request.resource_name)
        async with self._registered:
            self.plugins[request.resource_name] = plugin
            self._registered.notify_all()
        if previous is not None:
            await previous.close()

    async def wait_for_plugin(
        self, resource_name: str, timeout: float = 10.0, *, registrations: int = 1
    ) -> PluginConnection:
        """Wait until `resource_name` registered `registrations` times in all and is connected."""

        def ready() -> bool:
            mine = [r for r in self.registrations if r.resource_name == resource_name]
            plugin = self.plugins.get(resource_name)
            return len(mine) >= registrations and plugin is not None and plugin.request is mine[-1]

        async with asyncio.timeout(timeout), self._registered:
            await self._registered.wait_for(ready)
            return self.plugins[resource_name]

    def plugin(self, resource_name: str) -> PluginConnection:
        try:
            return self.plugins[resource_name]
        except KeyError:
            raise KubeletError(f"no plugin registered for {resource_name}") from None
