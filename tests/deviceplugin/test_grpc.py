"""The DevicePlugin gRPC service over a real unix socket, driven by FakeKubelet."""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio
import pytest

from pyhami.deviceplugin.allocation import AllocationError
from pyhami.deviceplugin.api import HEALTHY, UNHEALTHY, api_pb2, api_pb2_grpc
from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.health import HealthBoard
from pyhami.deviceplugin.inventory import discover
from pyhami.deviceplugin.server import (
    DevicePluginServicer,
    KubeletRegistrationError,
    PluginServer,
    register_with_kubelet,
)
from pyhami.testing import FakeKubelet, FakeNVML
from pyhami.testing.fake_nvml import a100_80g

RESOURCE = "nvidia.com/gpu"


@dataclass
class ScriptedAllocations:
    """Answers Allocate / GetPreferredAllocation with what a test scripts (an error or a reply)."""

    allocate_error: Exception | None = None
    prefer_error: Exception | None = None
    calls: list[str] = field(default_factory=list)

    async def allocate(self, request: api_pb2.AllocateRequest) -> api_pb2.AllocateResponse:
        self.calls.append("allocate")
        if self.allocate_error is not None:
            raise self.allocate_error
        return api_pb2.AllocateResponse(
            container_responses=[api_pb2.ContainerAllocateResponse(envs={"K": "V"})]
        )

    async def prefer(
        self, request: api_pb2.PreferredAllocationRequest
    ) -> api_pb2.PreferredAllocationResponse:
        self.calls.append("prefer")
        if self.prefer_error is not None:
            raise self.prefer_error
        ids = list(request.container_requests[0].available_deviceIDs)[-1:]
        return api_pb2.PreferredAllocationResponse(
            container_responses=[api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids)]
        )


@dataclass
class Served:
    kubelet: FakeKubelet
    board: HealthBoard
    allocations: ScriptedAllocations
    server: PluginServer
    uuids: list[str]


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(numa=1))
    gpus = discover(nvml, DeviceFilter())
    board = HealthBoard(g.uuid for g in gpus)
    allocations = ScriptedAllocations()
    stopping = asyncio.Event()
    async with FakeKubelet() as kubelet:
        servicer = DevicePluginServicer(
            gpus,
            split=3,
            numa_topology=True,
            board=board,
            allocations=allocations,
            stopping=stopping,
        )
        server = PluginServer(servicer, kubelet.directory / "nvidia-gpu.sock", stopping)
        await server.start()
        await register_with_kubelet(
            kubelet.socket, "nvidia-gpu.sock", RESOURCE, preferred_allocation=False
        )
        yield Served(kubelet, board, allocations, server, [g.uuid for g in gpus])
        await server.stop()


async def test_kubelet_sees_split_replicas_with_numa(served: Served) -> None:
    plugin = await served.kubelet.wait_for_plugin(RESOURCE)
    devices = await plugin.wait_for_devices(lambda d: len(d) == 6)
    assert [d.ID for d in devices[:3]] == [f"{served.uuids[0]}-{n}" for n in range(3)]
    assert {d.health for d in devices} == {HEALTHY}
    assert [n.ID for n in devices[3].topology.nodes] == [1]
    assert plugin.options.get_preferred_allocation_available
    assert not plugin.options.pre_start_required
    assert served.kubelet.registrations[0].endpoint == "nvidia-gpu.sock"


async def test_health_change_is_streamed_and_recovery_too(served: Served) -> None:
    plugin = await served.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 6)
    served.board.mark(served.uuids[1], "XID 79", 0.0)
    devices = await plugin.wait_for_devices(lambda d: d[5].health == UNHEALTHY)
    assert [d.health for d in devices] == [HEALTHY] * 3 + [UNHEALTHY] * 3
    served.board.recover(served.uuids[1])
    await plugin.wait_for_devices(lambda d: all(x.health == HEALTHY for x in d))


async def test_admission_uses_the_preference_and_allocate(served: Served) -> None:
    plugin = await served.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 6)
    response = await plugin.admit_container(1)
    assert dict(response.envs) == {"K": "V"}
    assert served.allocations.calls == ["prefer", "allocate"]
    assert plugin.in_use == {f"{served.uuids[1]}-2"}  # the plugin's preference was honoured


async def test_allocate_errors_become_grpc_status_and_serving_goes_on(served: Served) -> None:
    plugin = await served.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 6)
    served.allocations.allocate_error = AllocationError("pod was not scheduled by pyhami")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plugin.allocate([[f"{served.uuids[0]}-0"]])
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "not scheduled by pyhami" in (refused.value.details() or "")
    served.allocations.allocate_error = RuntimeError("bug")
    with pytest.raises(grpc.aio.AioRpcError) as crashed:
        await plugin.allocate([[f"{served.uuids[0]}-0"]])
    assert crashed.value.code() is grpc.StatusCode.INTERNAL
    served.allocations.allocate_error = None
    assert (await plugin.allocate([[f"{served.uuids[0]}-0"]])).container_responses


async def test_a_failed_preference_lets_kubelet_choose(served: Served) -> None:
    plugin = await served.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 6)
    served.allocations.prefer_error = RuntimeError("API down")
    await plugin.admit_container(2)
    assert plugin.in_use == {f"{served.uuids[0]}-0", f"{served.uuids[0]}-1"}


async def test_prestart_is_empty_and_stop_ends_the_stream(served: Served) -> None:
    plugin = await served.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 6)
    reply = await plugin.stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=["x"]))
    assert reply == api_pb2.PreStartContainerResponse()
    await served.server.stop()
    await plugin.wait_for_stream_end()
    assert not served.server.socket.exists()


async def test_kubelet_refuses_a_wrong_version() -> None:
    async with (
        FakeKubelet() as kubelet,
        grpc.aio.insecure_channel(f"unix://{kubelet.socket}") as channel,
    ):
        with pytest.raises(grpc.aio.AioRpcError, match="unsupported device plugin API"):
            await api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version="v1alpha", endpoint="x.sock", resource_name=RESOURCE
                )
            )


async def test_register_without_kubelet_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeletRegistrationError, match=r"cannot register nvidia\.com/gpu"):
        await register_with_kubelet(
            tmp_path / "kubelet.sock", "x.sock", RESOURCE, preferred_allocation=False
        )
