"""Pods as the API server returns them, and a collector over a region directory."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pyhami.kube.views import read_pod
from pyhami.model import NodeName
from pyhami.monitor.host import NvmlOpener
from pyhami.monitor.metrics import MonitorCollector, monitor_registry
from pyhami.monitor.pods import MonitoredPod, pod_view
from pyhami.monitor.sanity import SanityAlarms
from pyhami.monitor.scan import RegionDirectory
from pyhami.testing import ManualClock

NODE = NodeName("gpu-node-1")
NOW = 1_800_000_000.0


def pod_object(
    name: str,
    uid: str,
    containers: Sequence[str] = ("main",),
    *,
    init: Sequence[str] = (),
    allocated: str | None = None,
    mig: str | None = None,
    node: str = NODE,
    namespace: str = "default",
) -> dict[str, Any]:
    annotations = {"hami.io/vgpu-node": node}
    if allocated is not None:
        annotations["hami.io/vgpu-devices-allocated"] = allocated
    if mig is not None:
        annotations["hami.io/vgpu-mig-allocations"] = mig
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": {"hami.io/vgpu-node": node},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,
            "initContainers": [{"name": c, "image": "busybox"} for c in init],
            "containers": [{"name": c, "image": "cuda"} for c in containers],
        },
    }


@dataclass
class StaticPods:
    """A fixed list of pods (the PodSource interface; the informer one is tested separately)."""

    objects: list[dict[str, Any]] = field(default_factory=list)

    def pods(self) -> list[MonitoredPod]:
        return [pod_view(read_pod(obj)) for obj in self.objects]


Sample = tuple[str, dict[str, str], float]


@dataclass
class Scraper:
    root: Path
    pods: StaticPods
    open_nvml: NvmlOpener | None = None
    legacy: bool = False
    node: NodeName | None = NODE
    grace: float = 300.0

    def __post_init__(self) -> None:
        self.regions = RegionDirectory(self.root, self.grace)
        self.alarms = SanityAlarms()
        self.collector = MonitorCollector(
            node=self.node,
            pods=self.pods,
            regions=self.regions,
            open_nvml=self.open_nvml,
            alarms=self.alarms,
            clock=ManualClock(datetime.fromtimestamp(NOW, UTC)),
            legacy=self.legacy,
        )
        self.registry = monitor_registry(self.collector)

    def tick(self) -> None:
        self.regions.update({pod.uid for pod in self.pods.pods()}, now=NOW)

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def samples(self, name: str) -> list[Sample]:
        found = []
        for family in text_string_to_metric_families(self.text()):
            for sample in family.samples:
                if sample.name == name:
                    found.append((sample.name, dict(sample.labels), sample.value))
        return found

    def helps(self) -> dict[str, str]:
        return {f.name: f.documentation for f in text_string_to_metric_families(self.text())}
