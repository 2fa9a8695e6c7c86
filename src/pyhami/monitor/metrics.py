"""The monitor's Prometheus surface, built fresh on every scrape.

Names, labels and help texts are HAMi's; every family carries `zone="vGPU"` except
`hami_build_info`; the legacy twins appear only with `--legacy-metrics`. pyhami adds two
families of its own: `pyhami_monitor_sanity_alarms_total` and `pyhami_monitor_regions_refused`.

Container series come from the region when it names a device, else from the pod's allocation
annotation with zero usage, so an allocated container is visible before its first CUDA call; a
pod without that annotation (its GPUs came through DRA) has the allocation record the DRA
driver left in the container's folder instead, so both kinds of pod get the same series.
A region that cannot be read this scrape, or that holds impossible numbers (see `sanity`), is
refused the same way: its numbers are not exported, it counts in
`pyhami_monitor_regions_refused` and the reason is logged when it changes. A refused
allocation record counts there too.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pyhami.kube import Clock
from pyhami.model import ContainerDevices, NodeName
from pyhami.monitor.host import HostCard, NvmlOpener, read_host_cards
from pyhami.monitor.layout import UUID_LABEL_BYTES
from pyhami.monitor.pods import MonitoredPod, PodSource
from pyhami.monitor.region import RegionError, VirtualDevice
from pyhami.monitor.sanity import AlarmKind, SanityAlarms
from pyhami.monitor.scan import ContainerKey, RegionDirectory, report_refusal
from pyhami.serving.build_info import BuildInfo

MIB = 1 << 20
ZONE = "vGPU"

_HOST = ("node", "device_index", "device_uuid", "device_type")
_HOST_LEGACY = ("nodeid", "deviceidx", "deviceuuid", "devicetype")
_VGPU = ("namespace", "pod", "container", "vdevice_index", "device_uuid")
_VGPU_LEGACY = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid")
_MIG = (*_VGPU, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id")


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    help: str
    labels: tuple[str, ...]


HOST_MEMORY = _Spec("hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", _HOST)
HOST_UTIL = _Spec("hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", _HOST)
HOST_MEMORY_CONTROLLER = _Spec(
    "hami_host_gpu_memory_controller_utilization_ratio",
    "GPU memory controller utilization ratio (0-100)",
    _HOST[1:],  # HAMi leaves `node` off this one; kept
)
VGPU_USED = _Spec("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes", _VGPU)
VGPU_LIMIT = _Spec("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes", _VGPU)
CONTAINER_MEMORY = _Spec(
    "hami_container_device_memory_bytes", "Container device memory usage in bytes", _VGPU
)
CONTAINER_UTIL = _Spec(
    "hami_container_device_utilization_ratio", "Container device SM utilization ratio", _VGPU
)
VGPU_CONTEXT = _Spec(
    "hami_vgpu_memory_context_bytes", "Container device memory context size in bytes", _VGPU
)
VGPU_MODULE = _Spec(
    "hami_vgpu_memory_module_bytes", "Container device memory module size in bytes", _VGPU
)
VGPU_BUFFER = _Spec(
    "hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes", _VGPU
)
LAST_KERNEL = _Spec(
    "hami_container_last_kernel_elapsed_seconds",
    "Seconds since last kernel execution in container",
    _VGPU,
)
MIG_INFO = _Spec("hami_mig_device_info", "MIG runtime identity for a container allocation", _MIG)

# Legacy twins: the same values under the pre-v2.9 names and labels.
LEGACY_HOST_MEMORY = _Spec("HostGPUMemoryUsage", HOST_MEMORY.help, _HOST_LEGACY)
LEGACY_HOST_UTIL = _Spec("HostCoreUtilization", HOST_UTIL.help, _HOST_LEGACY)
LEGACY_USED = _Spec("vGPU_device_memory_usage_in_bytes", VGPU_USED.help, _VGPU_LEGACY)
LEGACY_LIMIT = _Spec("vGPU_device_memory_limit_in_bytes", VGPU_LIMIT.help, _VGPU_LEGACY)
LEGACY_MEMORY_DESC = _Spec(
    "Device_memory_desc_of_container",
    CONTAINER_MEMORY.help,
    (*_VGPU_LEGACY, "context", "module", "data", "offset"),
)
LEGACY_UTIL = _Spec("Device_utilization_desc_of_container", CONTAINER_UTIL.help, _VGPU_LEGACY)
LEGACY_LAST_KERNEL = _Spec("Device_last_kernel_of_container", LAST_KERNEL.help, _VGPU_LEGACY)
LEGACY_MIG = _Spec("MigInfo", MIG_INFO.help, (*_VGPU_LEGACY, "instanceid"))

ALARMS = _Spec(
    "pyhami_monitor_sanity_alarms",
    "Impossible values found in shared regions (each distinct finding counted once)",
    ("kind",),
)
REFUSED = _Spec(
    "pyhami_monitor_regions_refused",
    "Container directories whose region file or allocation record is currently refused "
    "(unreadable or impossible)",
    (),
)


class _Families(dict[str, GaugeMetricFamily]):
    """The families of one scrape by name, created on first use, in a stable order."""

    def add(self, spec: _Spec, labels: tuple[str, ...], value: float) -> None:
        family = self.get(spec.name)
        if family is None:
            family = GaugeMetricFamily(spec.name, spec.help, labels=(*spec.labels, "zone"))
            self[spec.name] = family
        family.add_metric((*labels, ZONE), value)


@dataclass(frozen=True, slots=True)
class _Row:
    """One container x virtual device, from the region or from the allocation."""

    labels: tuple[str, str, str, str, str]
    device: VirtualDevice
    last_kernel_time: int


@dataclass(kw_only=True, eq=False)  # eq=False: the registry keys its collectors by identity
class MonitorCollector(Collector):
    node: NodeName | None
    pods: PodSource
    regions: RegionDirectory
    open_nvml: NvmlOpener | None
    alarms: SanityAlarms
    clock: Clock
    legacy: bool = False
    # Regions refused by the last scrape, with the reason, to log a reason once.
    _refused: dict[ContainerKey, str] = field(default_factory=dict, init=False)

    def collect(self) -> Iterator[Metric]:
        out = _Families()
        cards = self._host(out)
        by_uuid = {card.uuid: card for card in cards}
        now = self.clock.now().timestamp()
        refused: dict[ContainerKey, str] = {}
        for pod in self.pods.pods():
            for row in self._rows(pod, by_uuid, refused):
                self._container(out, row, now)
            self._mig(out, pod)
        for key, reason in refused.items():
            report_refusal(
                "region not exported; the allocation's series stand in", key, reason, self._refused
            )
        self._refused = refused
        yield from out.values()
        alarms = CounterMetricFamily(ALARMS.name, ALARMS.help, labels=(*ALARMS.labels, "zone"))
        for kind in AlarmKind:
            alarms.add_metric((kind.value, ZONE), self.alarms.counts[kind])
        yield alarms
        refused_now = GaugeMetricFamily(REFUSED.name, REFUSED.help, labels=("zone",))
        directories = {*self.regions.refused, *self.regions.records.refused, *refused}
        refused_now.add_metric((ZONE,), len(directories))
        yield refused_now

    def _host(self, out: _Families) -> tuple[HostCard, ...]:
        if self.open_nvml is None:
            return ()
        cards = read_host_cards(self.open_nvml)
        if self.node is None:
            return cards  # still used by the sanity checks; HAMi skips host metrics
        for card in cards:
            labels = (self.node, str(card.index), card.uuid, card.type)
            out.add(HOST_MEMORY, labels, card.memory.used)
            out.add(HOST_UTIL, labels, card.utilization.gpu)
            out.add(HOST_MEMORY_CONTROLLER, labels[1:], card.utilization.memory)
            if self.legacy:
                out.add(LEGACY_HOST_MEMORY, labels, card.memory.used)
                out.add(LEGACY_HOST_UTIL, labels, card.utilization.gpu)
        return cards

    def _rows(
        self, pod: MonitoredPod, cards: Mapping[str, HostCard], refused: dict[ContainerKey, str]
    ) -> Iterator[_Row]:
        for container in pod.containers:
            key = ContainerKey(pod.uid, container)
            devices: tuple[VirtualDevice, ...] = ()
            last_kernel = 0
            region = self.regions.loaded.get(key)
            if region is not None:
                try:
                    snapshot = region.snapshot()
                except RegionError as err:
                    refused[key] = str(err)
                else:
                    impossible = self.alarms.check(key, snapshot, cards)
                    if impossible:
                        refused[key] = "; ".join(finding.detail for finding in impossible)
                    else:
                        devices, last_kernel = snapshot.devices, snapshot.last_kernel_time
            if not devices and pod.allocated:
                devices = _allocated_devices(pod.devices_of(container))
            elif not devices:  # no allocation annotation: the DRA driver's record, if any
                devices = _allocated_devices(self.regions.records.devices.get(key, ()))
            for device in devices:
                labels = (pod.namespace, pod.name, container, str(device.index), device.uuid)
                yield _Row(labels, device, last_kernel)

    def _container(self, out: _Families, row: _Row, now: float) -> None:
        device, labels = row.device, row.labels
        out.add(VGPU_USED, labels, device.used)
        out.add(VGPU_LIMIT, labels, device.limit)
        out.add(CONTAINER_MEMORY, labels, device.used)
        out.add(CONTAINER_UTIL, labels, device.sm_util)
        out.add(VGPU_CONTEXT, labels, device.context)
        out.add(VGPU_MODULE, labels, device.module)
        out.add(VGPU_BUFFER, labels, device.buffer)
        elapsed = max(0.0, now - row.last_kernel_time)
        if row.last_kernel_time > 0:
            out.add(LAST_KERNEL, labels, elapsed)
        if not self.legacy:
            return
        out.add(LEGACY_USED, labels, device.used)
        out.add(LEGACY_LIMIT, labels, device.limit)
        offset = device.used - device.context - device.module - device.buffer
        parts = (device.context, device.module, device.buffer, offset)
        out.add(LEGACY_MEMORY_DESC, (*labels, *map(str, parts)), device.used)
        out.add(LEGACY_UTIL, labels, device.sm_util)
        if row.last_kernel_time > 0:
            out.add(LEGACY_LAST_KERNEL, labels, elapsed)

    def _mig(self, out: _Families, pod: MonitoredPod) -> None:
        for mig in pod.mig:
            container = pod.container_at(mig.container_index)
            if not mig.runtime_ready or container is None:
                continue
            labels = (pod.namespace, pod.name, container, str(mig.device_index), mig.gpu_uuid)
            gpu_instance = str(mig.gpu_instance_id)
            identity = (mig.mig_uuid, mig.profile, gpu_instance, str(mig.compute_instance_id))
            out.add(MIG_INFO, (*labels, *identity), 1)
            if self.legacy:
                out.add(LEGACY_MIG, (*labels, gpu_instance), 1)


def _allocated_devices(allocated: ContainerDevices) -> tuple[VirtualDevice, ...]:
    """Zero-usage devices from the allocation (limit = the reserved MiB)."""
    return tuple(
        VirtualDevice(
            index=index,
            uuid=device.uuid[:UUID_LABEL_BYTES],
            limit=device.usedmem * MIB,
            sm_limit=device.usedcores,
        )
        for index, device in enumerate(allocated)
    )


def monitor_registry(collector: MonitorCollector) -> CollectorRegistry:
    """A private registry: no process or platform collectors, as HAMi's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BuildInfo())
    registry.register(collector)
    return registry
