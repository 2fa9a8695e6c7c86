"""A DRA driver on FakeNVML, the DRA kubelet double and the fake API server, wired like a node."""

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.health import HealthSettings
from pyhami.dra.api import DRIVER
from pyhami.dra.service import DraDriver, DriverOptions
from pyhami.kube import KubeClient
from pyhami.model.dra import DeviceResultView
from pyhami.testing import FakeKubeAPIServer, FakeNVML
from pyhami.testing.dra_kubelet import ClaimRef, DRAKubelet, DRAPluginConnection
from pyhami.testing.dra_objects import allocation_result, create_claimed_pod
from pyhami.testing.fake_nvml import a100_80g

NODE = "gpu-node-1"
GIB = 1 << 30


def result(device: str = "gpu-0", **overrides: Any) -> DeviceResultView:
    """An allocation result in this node's pool."""
    return allocation_result(device, **{"pool": NODE, **overrides})


@dataclass
class Node:
    api: FakeKubeAPIServer
    kube: KubeClient
    kubelet: DRAKubelet
    nvml: FakeNVML
    hook: Path
    state: Path  # kubelet's plugins dir, the CDI dir
    driver: DraDriver | None = None
    task: asyncio.Task[None] | None = None
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def options(self) -> DriverOptions:
        return DriverOptions(
            node_name=NODE,
            plugins_dir=self.state / "plugins",
            registry_dir=self.kubelet.registry_dir,
            cdi_dir=self.state / "cdi",
            settings=AllocationSettings(hook_path=PurePosixPath(self.hook)),
            retry_interval=0.1,
            socket_poll=0.05,
            health=HealthSettings(wait_ms=20),
        )

    @property
    def vgpu(self) -> Path:
        return self.hook / "vgpu"

    async def start(self, options: DriverOptions | None = None) -> DraDriver:
        self.stop_event = asyncio.Event()
        self.driver = DraDriver(self.kube, self.nvml, options or self.options)
        self.task = asyncio.create_task(self.driver.run(self.stop_event))
        ready = asyncio.ensure_future(self.driver.ready.wait())
        await asyncio.wait({ready, self.task}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if self.task.done():
            task, self.task = self.task, None
            task.result()  # raises what stopped the start
        assert self.driver.ready.is_set(), "driver not ready in time"
        return self.driver

    async def stop(self) -> None:
        self.stop_event.set()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self.task, 10)
            self.task = None

    async def plugin(self, registrations: int = 1) -> DRAPluginConnection:
        return await self.kubelet.wait_for_plugin(DRIVER, registrations=registrations)

    def claim(
        self, name: str, results: list[DeviceResultView], *, allocated: bool = True
    ) -> ClaimRef:
        """A claim allocated with `results`, reserved for a new pod `pod-<name>`."""
        made = create_claimed_pod(
            self.api.store, f"pod-{name}", name, results, node=NODE, allocated=allocated
        )
        return ClaimRef("default", name, made.claim_uid)


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    # unix socket paths are limited to ~107 bytes: the sockets live in a short /tmp directory.
    state = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    async with FakeKubeAPIServer() as api, DRAKubelet() as kubelet:
        api.store.create("nodes", None, {"metadata": {"name": NODE}})
        kube = KubeClient(api.configuration())
        nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(), a100_80g(numa=1))
        nvml.link(0, 1, nvlinks=4)
        hook = tmp_path / "hook"
        (hook / "vgpu").mkdir(parents=True)
        node = Node(api=api, kube=kube, kubelet=kubelet, nvml=nvml, hook=hook, state=state)
        try:
            yield node
        finally:
            await node.stop()
            await kube.close()
            shutil.rmtree(state, ignore_errors=True)
