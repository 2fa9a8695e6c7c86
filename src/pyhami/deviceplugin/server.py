"""The kubelet-facing gRPC side: the DevicePlugin service on our unix socket, and Register.

Thin on purpose: device lists come from `listing`, Allocate and preferred allocation from the
`Allocations` object passed in; this module maps their errors to gRPC status codes and logs.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from pyhami.deviceplugin.allocation import AllocationError
from pyhami.deviceplugin.api import VERSION, api_pb2, api_pb2_grpc
from pyhami.deviceplugin.health import HealthBoard
from pyhami.deviceplugin.inventory import Gpu
from pyhami.deviceplugin.listing import kubelet_devices

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]


class Allocations(Protocol):
    """Allocate and GetPreferredAllocation, behind the gRPC surface."""

    async def allocate(self, request: api_pb2.AllocateRequest) -> api_pb2.AllocateResponse:
        """Raises AllocationError with an operator-readable message."""

    async def prefer(
        self, request: api_pb2.PreferredAllocationRequest
    ) -> api_pb2.PreferredAllocationResponse: ...


class KubeletRegistrationError(RuntimeError):
    """kubelet refused or could not be reached for Register."""


@dataclass(eq=False)
class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    gpus: Sequence[Gpu]
    _: KW_ONLY
    split: int | Mapping[str, int]
    numa_topology: bool
    board: HealthBoard
    allocations: Allocations
    stopping: asyncio.Event

    def device_list(self) -> api_pb2.ListAndWatchResponse:
        healthy = {gpu.uuid: self.board.healthy(gpu.uuid) for gpu in self.gpus}
        return api_pb2.ListAndWatchResponse(
            devices=kubelet_devices(
                self.gpus, self.split, healthy, numa_topology=self.numa_topology
            )
        )

    async def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: Context
    ) -> api_pb2.DevicePluginOptions:
        # Always offered (as HAMi): it steers kubelet to replicas of the scheduler's GPUs.
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    async def ListAndWatch(
        self, request: api_pb2.Empty, context: Context
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        while not self.stopping.is_set():
            seen = self.board.version
            yield self.device_list()
            await self.board.until_change(seen, self.stopping)

    async def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Context
    ) -> api_pb2.PreferredAllocationResponse:
        try:
            return await self.allocations.prefer(request)
        except AllocationError as error:
            log.warning("no preferred allocation, kubelet will choose devices itself: %s", error)
            return api_pb2.PreferredAllocationResponse()
        except Exception:
            # A preference is optional: answer nothing and let kubelet choose by itself.
            log.exception("GetPreferredAllocation failed; kubelet will choose devices itself")
            return api_pb2.PreferredAllocationResponse()

    async def Allocate(
        self, request: api_pb2.AllocateRequest, context: Context
    ) -> api_pb2.AllocateResponse:
        try:
            return await self.allocations.allocate(request)
        except AllocationError as error:
            log.error("Allocate refused: %s", error)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
        except Exception as error:
            log.exception("Allocate failed unexpectedly")
            await context.abort(
                grpc.StatusCode.INTERNAL, f"pyhami device plugin: Allocate failed: {error}"
            )
        raise AssertionError("context.abort returns only by raising")

    async def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: Context
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


class SocketServer:
    """One grpc.aio server on one unix socket; `stop()` removes the socket file."""

    def __init__(self, socket: Path, add: Callable[[grpc.aio.Server], None]) -> None:
        self.socket = socket
        self._add = add  # adds the servicers to a fresh server
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        self._add(server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=1)
            self._server = None
        self.socket.unlink(missing_ok=True)


class PluginServer(SocketServer):
    """Our DevicePlugin gRPC server on `socket`."""

    def __init__(self, servicer: DevicePluginServicer, socket: Path, stopping: asyncio.Event):
        super().__init__(
            socket, lambda server: api_pb2_grpc.add_DevicePluginServicer_to_server(servicer, server)
        )
        self._stopping = stopping

    async def start(self) -> None:
        await super().start()
        # Dial our own socket once, as HAMi does, so a broken listener fails start, not kubelet.
        async with grpc.aio.insecure_channel(f"unix://{self.socket}") as channel:
            await api_pb2_grpc.DevicePluginStub(channel).GetDevicePluginOptions(
                api_pb2.Empty(), timeout=5
            )

    async def stop(self) -> None:
        self._stopping.set()
        await super().stop()


async def register_with_kubelet(
    kubelet_socket: Path, endpoint: str, resource_name: str, *, preferred_allocation: bool
) -> None:
    """Announce our socket to kubelet (`Register` on kubelet.sock)."""
    request = api_pb2.RegisterRequest(
        version=VERSION,
        endpoint=endpoint,
        resource_name=resource_name,
        options=api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=preferred_allocation
        ),
    )
    # A fresh subchannel (no reconnect backoff left from a kubelet that just went away), and,
    # like HAMi's blocking dial, up to 5 s for kubelet to accept the connection.
    options = [("grpc.use_local_subchannel_pool", 1)]
    try:
        async with grpc.aio.insecure_channel(
            f"unix://{kubelet_socket}", options=options
        ) as channel:
            await api_pb2_grpc.RegistrationStub(channel).Register(
                request, timeout=5, wait_for_ready=True
            )
    except grpc.aio.AioRpcError as error:
        raise KubeletRegistrationError(
            f"cannot register {resource_name} with kubelet at {kubelet_socket}: "
            f"{error.code().name}: {error.details()}"
        ) from error
