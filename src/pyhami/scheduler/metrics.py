"""The scheduler's Prometheus surface.

HAMi's names and labels are reproduced exactly: allocation gauges built fresh on every
scrape from a snapshot of the node registry, the ledger and the quota table, all with the
constant label `zone="vGPU"`, plus `hami_build_info`. The legacy camelCase twins appear only
with `--legacy-metrics`. On top, pyhami adds its own filter and bind latency histograms and
decision counters (`pyhami_scheduler_*`), which HAMi does not have.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pyhami.serving.build_info import BuildInfo

MIB = 1 << 20
ZONE = "vGPU"
# up to kube-scheduler's extender timeout (the chart's httpTimeout is 30 s)
_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MigSample:
    """One MIG reservation whose runtime identity is complete."""

    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One registered card with what is allocated on it (MiB, percent, slots)."""

    node: str
    uuid: str
    index: int
    type: str
    totalmem: int
    usedmem: int
    totalcore: int
    usedcores: int
    used: int
    mode: str = ""
    migs: tuple[MigSample, ...] = ()

    @property
    def is_amd(self) -> bool:
        return self.type.lower().startswith("amd")


@dataclass(frozen=True, slots=True)
class QuotaSample:
    """One namespace x resource row of the quota table."""

    namespace: str
    resource: str
    used: int
    limit: int = 0
    limit_set: bool = False


@dataclass(frozen=True, slots=True)
class PodDeviceSample:
    """One pod's collapsed usage of one card."""

    namespace: str
    node: str
    pod: str
    container_index: int
    uuid: str
    usedmem: int
    usedcores: int


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything one scrape reports."""

    devices: tuple[DeviceSample, ...] = ()
    quotas: tuple[QuotaSample, ...] = ()
    pods: tuple[PodDeviceSample, ...] = ()
    unreadable_nodes: tuple[str, ...] = ()  # registration annotation there but unreadable


@dataclass(frozen=True, slots=True)
class _Family:
    """A gauge with its current and legacy names and label names."""

    name: str
    help: str
    labels: tuple[str, ...]
    legacy: str = ""
    legacy_labels: tuple[str, ...] = field(default_factory=tuple)

    def current(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.name, self.help, labels=(*self.labels, "zone"))

    def old(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.legacy, self.help, labels=(*self.legacy_labels, "zone"))


_DEV = ("node", "device_uuid", "device_index", "device_type")
_DEV_OLD = ("nodeid", "deviceuuid", "deviceidx", "devicetype")
MEMORY_LIMIT = _Family(
    "hami_gpu_memory_limit_bytes",
    "GPU device memory limit in bytes",
    _DEV,
    "GPUDeviceMemoryLimit",
    _DEV_OLD,
)
CORE_LIMIT = _Family(
    "hami_gpu_core_limit_ratio", "GPU device core limit", _DEV, "GPUDeviceCoreLimit", _DEV_OLD
)
MEMORY_ALLOCATED = _Family(
    "hami_gpu_memory_allocated_bytes",
    "GPU device memory allocated in bytes",
    ("node", "device_uuid", "device_index", "device_cores", "device_type"),
    "GPUDeviceMemoryAllocated",
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"),
)
SHARED_COUNT = _Family(
    "hami_gpu_shared_count",
    "Number of containers sharing this GPU",
    _DEV,
    "GPUDeviceSharedNum",
    _DEV_OLD,
)
CORE_ALLOCATED = _Family(
    "hami_gpu_core_allocated_ratio",
    "GPU device core allocated",
    _DEV,
    "GPUDeviceCoreAllocated",
    _DEV_OLD,
)
NODE_OVERVIEW = _Family(
    "hami_node_gpu_overview",
    "GPU overview on this node in bytes",
    ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type"),
    "nodeGPUOverview",
    ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype"),
)
NODE_MEMORY_RATIO = _Family(
    "hami_node_gpu_memory_allocated_ratio",
    "GPU memory allocated ratio on this node",
    _DEV,
    "nodeGPUMemoryPercentage",
    ("nodeid", "deviceuuid", "deviceidx"),
)
NODE_MIG = _Family(
    "hami_node_gpu_mig_instance_info",
    "MIG instance allocated on this node",
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
    "nodeGPUMigInstance",
    ("nodeid", "deviceuuid", "deviceidx", "migname"),
)
QUOTA_USED = _Family(
    "hami_resource_quota_used",
    "Resource quota used in this namespace",
    ("namespace", "quota_name", "limit"),
    "QuotaUsed",
    ("quotanamespace", "quotaName", "limit"),
)
QUOTA_LIMIT = _Family(
    "hami_resource_quota_limit",
    "Resource quota limit in this namespace",
    ("namespace", "quota_name"),
)
_POD = ("namespace", "node", "pod", "container_index", "device_uuid")
_POD_OLD = ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid")
VGPU_MEMORY = _Family(
    "hami_vgpu_memory_allocated_bytes",
    "vGPU device memory allocated to a container in bytes",
    _POD,
    "vGPUMemoryAllocated",
    _POD_OLD,
)
VGPU_CORE = _Family(
    "hami_vgpu_core_allocated_ratio",
    "vGPU device cores allocated to a container",
    _POD,
    "vGPUCoreAllocated",
    _POD_OLD,
)


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
            labels: Iterable[str],
            value: float,
            old_labels: Iterable[str] | None = None,
            old_value: float | None = None,
        ) -> None:
            families[fam].add_metric([*labels, ZONE], value)
            if fam in legacy and old_labels is not None:
                legacy[fam].add_metric(
                    [*old_labels, ZONE], value if old_value is None else old_value
                )

        cores_of = {(d.node, d.uuid): d for d in snap.devices}
        for d in snap.devices:
            dev = (d.node, d.uuid, str(d.index), d.type)
            with_cores = (d.node, d.uuid, str(d.index), str(d.totalcore), d.type)
            core_limit = 100.0 if d.is_amd and d.totalcore > 0 else float(d.totalcore)
            core_used = _amd_ratio(d.usedcores, d.totalcore) if d.is_amd else float(d.usedcores)
            emit(MEMORY_LIMIT, dev, d.totalmem * MIB, dev)
            emit(CORE_LIMIT, dev, core_limit, dev, float(d.totalcore))
            emit(MEMORY_ALLOCATED, with_cores, d.usedmem * MIB, with_cores)
            emit(SHARED_COUNT, dev, float(d.used), dev)
            emit(CORE_ALLOCATED, dev, core_used, dev, float(d.usedcores))
            overview = (d.node, d.uuid, str(d.index), str(d.totalcore), str(d.totalmem), d.type)
            emit(NODE_OVERVIEW, overview, d.usedmem * MIB, overview)
            if d.totalmem > 0:
                emit(NODE_MEMORY_RATIO, dev, d.usedmem / d.totalmem, dev[:3])
            if d.mode == "mig":
                for m in d.migs:
                    emit(
                        NODE_MIG,
                        (
                            d.node,
                            d.uuid,
                            str(d.index),
                            m.mig_uuid,
                            m.profile,
                            str(m.gpu_instance_id),
                            str(m.compute_instance_id),
                            str(m.placement_start),
                            str(m.placement_size),
                        ),
                        1.0,
                        (d.node, d.uuid, str(d.index), f"{m.profile}-{m.gpu_instance_id}"),
                    )
        for q in snap.quotas:
            limit = str(q.limit) if q.limit_set else "0"
            emit(
                QUOTA_USED,
                (q.namespace, q.resource, limit),
                float(q.used),
                (q.namespace, q.resource, limit),
            )
            if q.limit_set:
                emit(QUOTA_LIMIT, (q.namespace, q.resource), float(q.limit))
        for p in snap.pods:
            if not p.uuid:
                continue
            labels = (p.namespace, p.node, p.pod, str(p.container_index), p.uuid)
            owner = cores_of.get((p.node, p.uuid))
            cores = float(p.usedcores)
            if owner is not None and owner.is_amd:
                cores = _amd_ratio(p.usedcores, owner.totalcore)
            emit(VGPU_MEMORY, labels, p.usedmem * MIB, labels)
            emit(VGPU_CORE, labels, cores, labels, float(p.usedcores))
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
