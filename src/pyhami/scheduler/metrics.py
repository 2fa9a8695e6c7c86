"""The scheduler's Prometheus surface.

HAMi's names and labels are reproduced exactly: allocation gauges built fresh on every
scrape from a snapshot of the node registry, the ledger and the quota table, all with the
constant label `zone="vGPU"`, plus `hami_build_info`. The legacy camelCase twins appear only
with `--legacy-metrics`. On top, pyhami adds its own filter and bind latency histograms and
decision counters (`pyhami_scheduler_*`), which HAMi does not have.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pyhami.model import ContainerDevice, DeviceUsage, MigAllocation
from pyhami.serving.build_info import BuildInfo

MIB = 1 << 20
ZONE = "vGPU"
# up to kube-scheduler's extender timeout (the chart's httpTimeout is 30 s)
_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One registered card with what is allocated on it (MiB, percent, slots), and its MIG
    instances whose runtime identity is complete."""

    node: str
    card: DeviceUsage
    migs: tuple[MigAllocation, ...] = ()


@dataclass(frozen=True, slots=True)
class QuotaSample:
    """One namespace x resource row of the quota table."""

    namespace: str
    resource: str
    used: int
    limit: int | None = None  # None: no ResourceQuota limits it


@dataclass(frozen=True, slots=True)
class PodDeviceSample:
    """One pod's usage of one card, collapsed over its containers (container index 0, as in
    HAMi)."""

    namespace: str
    node: str
    pod: str
    device: ContainerDevice


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything one scrape reports."""

    devices: tuple[DeviceSample, ...] = ()
    quotas: tuple[QuotaSample, ...] = ()
    pods: tuple[PodDeviceSample, ...] = ()
    unreadable_nodes: tuple[str, ...] = ()  # registration annotation there but unreadable


_DEV = ("node", "device_uuid", "device_index", "device_type")
_DEV_OLD = ("nodeid", "deviceuuid", "deviceidx", "devicetype")


@dataclass(frozen=True, slots=True)
class _Family:
    """A gauge with its current and legacy names and label names (a card's, unless said)."""

    name: str
    help: str
    legacy: str = ""
    labels: tuple[str, ...] = _DEV
    legacy_labels: tuple[str, ...] = _DEV_OLD

    def current(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.name, self.help, labels=(*self.labels, "zone"))

    def old(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.legacy, self.help, labels=(*self.legacy_labels, "zone"))


MEMORY_LIMIT = _Family(
    "hami_gpu_memory_limit_bytes", "GPU device memory limit in bytes", "GPUDeviceMemoryLimit"
)
CORE_LIMIT = _Family("hami_gpu_core_limit_ratio", "GPU device core limit", "GPUDeviceCoreLimit")
MEMORY_ALLOCATED = _Family(
    "hami_gpu_memory_allocated_bytes",
    "GPU device memory allocated in bytes",
    "GPUDeviceMemoryAllocated",
    ("node", "device_uuid", "device_index", "device_cores", "device_type"),
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"),
)
SHARED_COUNT = _Family(
    "hami_gpu_shared_count", "Number of containers sharing this GPU", "GPUDeviceSharedNum"
)
CORE_ALLOCATED = _Family(
    "hami_gpu_core_allocated_ratio", "GPU device core allocated", "GPUDeviceCoreAllocated"
)
NODE_OVERVIEW = _Family(
    "hami_node_gpu_overview",
    "GPU overview on this node in bytes",
    "nodeGPUOverview",
    ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type"),
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype"),
)
NODE_MEMORY_RATIO = _Family(
    "hami_node_gpu_memory_allocated_ratio",
    "GPU memory allocated ratio on this node",
    "nodeGPUMemoryPercentage",
    legacy_labels=("nodeid", "deviceuuid", "deviceidx"),
)
NODE_MIG = _Family(
    "hami_node_gpu_mig_instance_info",
    "MIG instance allocated on this node",
    "nodeGPUMigInstance",
    (
        "node",
        "device_uuid",
        "device_index",
        "mig_uuid",
        "profile",
        "gpu_instance_id",
        "compute_instance_id",
        "placement_start",
        "placement_size",
    ),
    ("nodeid", "deviceuuid", "deviceidx", "migname"),
)
QUOTA_USED = _Family(
    "hami_resource_quota_used",
    "Resource quota used in this namespace",
    "QuotaUsed",
    ("namespace", "quota_name", "limit"),
    ("quotanamespace", "quotaName", "limit"),
)
QUOTA_LIMIT = _Family(
    "hami_resource_quota_limit",
    "Resource quota limit in this namespace",
    labels=("namespace", "quota_name"),
)
_POD = ("namespace", "node", "pod", "container_index", "device_uuid")
_POD_OLD = ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid")
VGPU_MEMORY = _Family(
    "hami_vgpu_memory_allocated_bytes",
    "vGPU device memory allocated to a container in bytes",
    "vGPUMemoryAllocated",
    _POD,
    _POD_OLD,
)
VGPU_CORE = _Family(
    "hami_vgpu_core_allocated_ratio",
    "vGPU device cores allocated to a container",
    "vGPUCoreAllocated",
    _POD,
    _POD_OLD,
)


def _is_amd(card: DeviceUsage) -> bool:
    return card.type.lower().startswith("amd")


def _amd_ratio(used: int, total: int) -> float:
    return float(math.ceil(used / total * 100)) if total > 0 else float(used)


class AllocationCollector(Collector):
    """Builds HAMi's allocation gauges from a snapshot taken at scrape time."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot], legacy: bool) -> None:
        self._snapshot = snapshot
        self._legacy = legacy

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        families = {fam: fam.current() for fam in _ALL}
        legacy = {fam: fam.old() for fam in _ALL if fam.legacy} if self._legacy else {}

        def emit(
            fam: _Family,
            labels: Sequence[str],
            value: float,
            old_value: float | None = None,
            old_labels: Sequence[str] | None = None,
        ) -> None:
            """The gauge's sample, and its legacy twin's (same labels and value unless given)."""
            families[fam].add_metric([*labels, ZONE], value)
            if fam in legacy:
                legacy[fam].add_metric(
                    [*(labels if old_labels is None else old_labels), ZONE],
                    value if old_value is None else old_value,
                )

        cards = {(d.node, d.card.id): d.card for d in snap.devices}
        for d in snap.devices:
            card, index = d.card, str(d.card.index)
            dev = (d.node, card.id, index, card.type)
            with_cores = (d.node, card.id, index, str(card.totalcore), card.type)
            amd = _is_amd(card)
            core_limit = 100.0 if amd and card.totalcore > 0 else float(card.totalcore)
            core_used = _amd_ratio(card.usedcores, card.totalcore) if amd else float(card.usedcores)
            emit(MEMORY_LIMIT, dev, card.totalmem * MIB)
            emit(CORE_LIMIT, dev, core_limit, float(card.totalcore))
            emit(MEMORY_ALLOCATED, with_cores, card.usedmem * MIB)
            emit(SHARED_COUNT, dev, float(card.used))
            emit(CORE_ALLOCATED, dev, core_used, float(card.usedcores))
            overview = (d.node, card.id, index, str(card.totalcore), str(card.totalmem), card.type)
            emit(NODE_OVERVIEW, overview, card.usedmem * MIB)
            if card.totalmem > 0:
                emit(NODE_MEMORY_RATIO, dev, card.usedmem / card.totalmem, old_labels=dev[:3])
            if card.mode != "mig":
                continue
            for m in d.migs:
                place = m.placement
                ids = (m.gpu_instance_id, m.compute_instance_id, place.start, place.size)
                emit(
                    NODE_MIG,
                    (*dev[:3], m.mig_uuid, m.profile, *map(str, ids)),
                    1.0,
                    old_labels=(*dev[:3], f"{m.profile}-{m.gpu_instance_id}"),
                )
        for q in snap.quotas:
            limit = str(q.limit or 0)
            emit(QUOTA_USED, (q.namespace, q.resource, limit), float(q.used))
            if q.limit is not None:
                emit(QUOTA_LIMIT, (q.namespace, q.resource), float(q.limit))
        for p in snap.pods:
            used = p.device
            if not used.uuid:
                continue
            labels = (p.namespace, p.node, p.pod, "0", used.uuid)
            owner = cards.get((p.node, used.uuid))
            cores = float(used.usedcores)
            if owner is not None and _is_amd(owner):
                cores = _amd_ratio(used.usedcores, owner.totalcore)
            emit(VGPU_MEMORY, labels, used.usedmem * MIB)
            emit(VGPU_CORE, labels, cores, float(used.usedcores))
        yield from families.values()
        yield from legacy.values()
        unreadable = GaugeMetricFamily(
            "pyhami_scheduler_node_registration_unreadable",
            "1 for a node whose GPU registration annotation cannot be read (the scheduler keeps "
            "its last good one, or leaves the node out); /explain says why.",
            labels=("node",),
        )
        for node in snap.unreadable_nodes:
            unreadable.add_metric([node], 1.0)
        yield unreadable


_ALL = (
    MEMORY_LIMIT,
    CORE_LIMIT,
    MEMORY_ALLOCATED,
    SHARED_COUNT,
    CORE_ALLOCATED,
    NODE_OVERVIEW,
    NODE_MEMORY_RATIO,
    NODE_MIG,
    QUOTA_USED,
    QUOTA_LIMIT,
    VGPU_MEMORY,
    VGPU_CORE,
)


class SchedulerMetrics:
    """The private registry behind `/metrics`, and pyhami's own instruments."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot], legacy: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BuildInfo())
        self.registry.register(AllocationCollector(snapshot, legacy))
        self.filter_seconds = Histogram(
            "pyhami_scheduler_filter_duration_seconds",
            "Time to answer one /filter call, by path (live or simulation).",
            ("path",),
            registry=self.registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.bind_seconds = Histogram(
            "pyhami_scheduler_bind_duration_seconds",
            "Time to answer one /bind call, node lock and API calls included.",
            registry=self.registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.decisions = Counter(
            "pyhami_scheduler_decisions",
            "Filter and bind answers, by verb and outcome.",
            ("verb", "outcome"),
            registry=self.registry,
        )
        self.filter_failures = Counter(
            "pyhami_scheduler_filter_node_failures",
            "Nodes rejected by /filter, by reason word.",
            ("reason",),
            registry=self.registry,
        )
        # Preemption, by path: `extender` (kube-scheduler's /preempt) or `scheduler` (our own,
        # for pods short only of GPU capacity, which kube-scheduler cannot see).
        self.preemption_attempts = Counter(
            "pyhami_scheduler_preemption_attempts",
            "Preemption questions answered, by path and outcome.",
            ("path", "outcome"),
            registry=self.registry,
        )
        self.preemption_victims = Counter(
            "pyhami_scheduler_preemption_victims",
            "Victims named (extender: in every node kept for kube-scheduler to choose from; "
            "scheduler: evicted).",
            ("path",),
            registry=self.registry,
        )
        self.preemption_evictions_failed = Counter(
            "pyhami_scheduler_preemption_evictions_failed",
            "Evictions the API server refused (429: a PodDisruptionBudget) or that failed, "
            "by HTTP status code.",
            ("code",),
            registry=self.registry,
        )
