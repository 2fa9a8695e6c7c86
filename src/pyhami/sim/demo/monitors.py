"""The vGPU monitor of a demo node, beside the device plugin or the DRA driver, as the chart
runs it in either DaemonSet: it reads the node's container folders and serves `/metrics`."""

import asyncio
from dataclasses import dataclass
from pathlib import Path

from pyhami.kube import KubeClient, SystemClock, guarded_task
from pyhami.model import NodeName
from pyhami.monitor.pods import InformerPodSource
from pyhami.monitor.service import MonitorService
from pyhami.monitor.settings import MonitorSettings
from pyhami.testing import FakeNVML


@dataclass
class NodeMonitor:
    service: MonitorService
    pods: InformerPodSource
    port: int = 0

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    async def start(self, stop: asyncio.Event, name: str) -> "asyncio.Task[None]":
        """Its pods known, its loop running until `stop` (the task returned), its port open."""
        self.pods.informer.start()
        await self.pods.informer.wait_synced(20)
        task = guarded_task(self.service.run(stop), f"demo/{name}/monitor", may_finish=True)
        self.port = await self.service.start_http()
        return task

    async def stop(self) -> None:
        """Once its loop's task has ended or was cancelled."""
        await self.service.stop_http()
        await self.pods.informer.stop()
        self.service.close()


# Where a demo node keeps, under its root folder, what the node's /tmp/hami holds.
MIG_APPLY_LOCK = "hami/hami-mig-apply.lock"


def node_monitor(
    name: str, root: Path, nvml: FakeNVML, client: KubeClient, *, tick_s: float
) -> NodeMonitor:
    """The monitor of node `name`, whose `$HOOK_PATH` is `root`/hook/vgpu, not started yet."""
    pods = InformerPodSource(client, NodeName(name), resync_period_s=300.0)
    service = MonitorService(
        MonitorSettings(
            hook_path=root / "hook" / "vgpu",
            node_name=NodeName(name),
            host="127.0.0.1",
            port=0,
            tick_interval_s=tick_s,
        ),
        pods,
        nvml.open,
        SystemClock(),
        mig_apply_lock=root / MIG_APPLY_LOCK,
    )
    return NodeMonitor(service, pods)
