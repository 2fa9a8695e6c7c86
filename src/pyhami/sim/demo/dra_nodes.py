"""The demo's DRA nodes (Kubernetes' own control plane only): each runs pyhami's DRA driver on
FakeNVML cards instead of the device plugin, with the vGPU monitor beside it (as in the chart's
DaemonSet), carries the label `gpu.pyhami.io/mode=dra`, and its kubelet double prepares a
pod's claims through the driver before the containers start."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.devices.nvidia.dra_claims import NODE_MODE_DRA, NODE_MODE_LABEL
from pyhami.dra.api import DRIVER
from pyhami.dra.service import DraDriver, DriverOptions
from pyhami.kube import KubeClient, cancel_and_wait
from pyhami.sim.demo.monitors import NodeMonitor, node_monitor
from pyhami.testing import FakeGpu, FakeKubelet, FakeNVML
from pyhami.testing.dra_claims import ClaimPreparer
from pyhami.testing.dra_kubelet import DRAKubelet
from pyhami.testing.node_agent import ContainerRuntime, NodeAgent

DRIVER_STOP_TIMEOUT_S = 20


def dra_node_name(number: int) -> str:
    return f"dra-node-{number}"


@dataclass
class DraDemoNode:
    name: str
    nvml: FakeNVML
    hook: Path
    kubelet: DRAKubelet
    device_kubelet: FakeKubelet  # kubelet's device-plugin side: nothing registers on a DRA node
    agent: NodeAgent
    driver: DraDriver
    monitor: NodeMonitor
    stop: asyncio.Event
    task: asyncio.Task[None]
    monitor_task: asyncio.Task[None]

    @property
    def metrics_url(self) -> str:
        return self.monitor.metrics_url


async def start_dra_node(
    name: str,
    cards: Sequence[FakeGpu],
    root: Path,
    *,
    driver_client: KubeClient,
    node_client: KubeClient,
    runtime: ContainerRuntime | None,
    monitor_client: KubeClient,
    monitor_tick_s: float,
) -> DraDemoNode:
    """The node registered with its label, the driver serving and registered with kubelet, the
    monitor serving."""
    hook = root / "hook"  # libvgpu in hook/vgpu when the caller installed it
    (hook / "vgpu" / "containers").mkdir(parents=True, exist_ok=True)
    nvml = FakeNVML.with_gpus(*cards)
    options = DriverOptions(
        node_name=name,
        plugins_dir=root / "plugins",
        registry_dir=root / "registry",
        cdi_dir=root / "cdi",
        settings=AllocationSettings(
            hook_path=PurePosixPath(hook), vgpu_lock_dir=PurePosixPath(root / "vgpulock")
        ),
    )
    kubelet = DRAKubelet(options.registry_dir)
    await kubelet.start()
    device_kubelet = FakeKubelet(root / "kubelet")
    await device_kubelet.start()
    agent = NodeAgent(
        node_client,
        name,
        device_kubelet,
        runtime=runtime,
        claims=ClaimPreparer(node_client, kubelet, [options.cdi_dir]),
    )
    await agent.register_node({NODE_MODE_LABEL: NODE_MODE_DRA})
    stop = asyncio.Event()
    driver = DraDriver(driver_client, nvml, options)
    task = asyncio.create_task(driver.run(stop), name=f"demo/{name}/dra-driver")
    await kubelet.wait_for_plugin(DRIVER, timeout=30)
    await agent.start()
    monitor = node_monitor(name, root, nvml, monitor_client, tick_s=monitor_tick_s)
    monitor_task = await monitor.start(stop, name)
    return DraDemoNode(
        name, nvml, hook, kubelet, device_kubelet, agent, driver, monitor, stop, task, monitor_task
    )


async def stop_dra_node(node: DraDemoNode) -> None:
    await node.agent.stop()
    node.stop.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(node.task, DRIVER_STOP_TIMEOUT_S)
    await cancel_and_wait(node.monitor_task)
    await node.monitor.stop()
    await node.kubelet.stop()
    await node.device_kubelet.stop()
