from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pyhami.model import ContainerDevice, DeviceUsage, MigAllocation, MigPlacement
from pyhami.scheduler.metrics import (
    DeviceSample,
    MetricsSnapshot,
    PodDeviceSample,
    QuotaSample,
    SchedulerMetrics,
)

MIG = MigAllocation(0, 1, "GPU-m", "1g.6gb", MigPlacement(0, 1), "MIG-1", 3, 0)
SNAPSHOT = MetricsSnapshot(
    devices=(
        DeviceSample("n1", DeviceUsage("GPU-a", 0, 1, 10, 2000, 8000, 25, 100, "NVIDIA-A100")),
        DeviceSample(
            "n1",
            DeviceUsage("GPU-m", 1, 1, 10, 6000, 24000, 25, 100, "NVIDIA-A30", mode="mig"),
            migs=(MIG,),
        ),
        DeviceSample("n2", DeviceUsage("AMD-0", 0, 1, 10, 0, 16000, 30, 120, "AMDGPU")),
        DeviceSample("n2", DeviceUsage("GPU-z", 1, 0, 10, 0, 0, 0, 0, "NVIDIA-T4")),
    ),
    quotas=(
        QuotaSample("team-a", "nvidia.com/gpumem", 3000, 30000),
        QuotaSample("team-b", "nvidia.com/gpucores", 25),
    ),
    pods=(
        PodDeviceSample("team-a", "n1", "p1", ContainerDevice("GPU-a", "NVIDIA", 2000, 25)),
        PodDeviceSample("team-a", "n2", "p2", ContainerDevice("AMD-0", "AMD", 0, 30)),
        PodDeviceSample("team-a", "n2", "p3", ContainerDevice("", "NVIDIA", 10, 10)),
    ),
    unreadable_nodes=("n3",),
)


def _samples(legacy: bool) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    metrics = SchedulerMetrics(lambda: SNAPSHOT, legacy=legacy)
    text = generate_latest(metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _get(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_device_gauges_use_hami_names_labels_and_units() -> None:
    s = _samples(legacy=False)
    dev = dict(
        node="n1", device_uuid="GPU-a", device_index="0", device_type="NVIDIA-A100", zone="vGPU"
    )
    assert _get(s, "hami_gpu_memory_limit_bytes", **dev) == 8000 * 1048576
    assert _get(s, "hami_gpu_core_limit_ratio", **dev) == 100
    assert _get(s, "hami_gpu_memory_allocated_bytes", **dev, device_cores="100") == 2000 * 1048576
    assert _get(s, "hami_gpu_shared_count", **dev) == 1
    assert _get(s, "hami_gpu_core_allocated_ratio", **dev) == 25
    assert (
        _get(s, "hami_node_gpu_overview", **dev, device_cores="100", device_memory_limit="8000")
        == 2000 * 1048576
    )
    assert _get(s, "hami_node_gpu_memory_allocated_ratio", **dev) == 0.25
    # A card with no memory registered has no ratio (division by zero avoided).
    assert not any(
        k[0] == "hami_node_gpu_memory_allocated_ratio" and ("device_uuid", "GPU-z") in k[1]
        for k in s
    )
    assert (
        _get(
            s,
            "hami_build_info",
            **{
                k: v
                for k, v in next(
                    dict(labels) for (name, labels) in s if name == "hami_build_info"
                ).items()
            },
        )
        == 1
    )


def test_amd_cores_are_normalised_to_percent() -> None:
    s = _samples(legacy=True)
    amd = dict(node="n2", device_uuid="AMD-0", device_index="0", device_type="AMDGPU", zone="vGPU")
    assert _get(s, "hami_gpu_core_limit_ratio", **amd) == 100
    assert _get(s, "hami_gpu_core_allocated_ratio", **amd) == 25  # ceil(30/120*100)
    old = dict(nodeid="n2", deviceuuid="AMD-0", deviceidx="0", devicetype="AMDGPU", zone="vGPU")
    assert _get(s, "GPUDeviceCoreLimit", **old) == 120  # legacy twin stays raw
    assert _get(s, "GPUDeviceCoreAllocated", **old) == 30
    pod = dict(
        namespace="team-a",
        node="n2",
        pod="p2",
        container_index="0",
        device_uuid="AMD-0",
        zone="vGPU",
    )
    assert _get(s, "hami_vgpu_core_allocated_ratio", **pod) == 25


def test_mig_quota_and_pod_series() -> None:
    s = _samples(legacy=True)
    assert (
        _get(
            s,
            "hami_node_gpu_mig_instance_info",
            node="n1",
            device_uuid="GPU-m",
            device_index="1",
            mig_uuid="MIG-1",
            profile="1g.6gb",
            gpu_instance_id="3",
            compute_instance_id="0",
            placement_start="0",
            placement_size="1",
            zone="vGPU",
        )
        == 1
    )
    assert (
        _get(
            s,
            "nodeGPUMigInstance",
            nodeid="n1",
            deviceuuid="GPU-m",
            deviceidx="1",
            migname="1g.6gb-3",
            zone="vGPU",
        )
        == 1
    )
    assert (
        _get(
            s,
            "hami_resource_quota_used",
            namespace="team-a",
            quota_name="nvidia.com/gpumem",
            limit="30000",
            zone="vGPU",
        )
        == 3000
    )
    assert (
        _get(
            s,
            "hami_resource_quota_limit",
            namespace="team-a",
            quota_name="nvidia.com/gpumem",
            zone="vGPU",
        )
        == 30000
    )
    assert (
        _get(
            s,
            "hami_resource_quota_used",
            namespace="team-b",
            quota_name="nvidia.com/gpucores",
            limit="0",
            zone="vGPU",
        )
        == 25
    )
    assert not any(
        k[0] == "hami_resource_quota_limit" and ("namespace", "team-b") in k[1] for k in s
    )
    assert (
        _get(
            s,
            "QuotaUsed",
            quotanamespace="team-a",
            quotaName="nvidia.com/gpumem",
            limit="30000",
            zone="vGPU",
        )
        == 3000
    )
    assert (
        _get(
            s,
            "vGPUMemoryAllocated",
            podnamespace="team-a",
            nodename="n1",
            podname="p1",
            containeridx="0",
            deviceuuid="GPU-a",
            zone="vGPU",
        )
        == 2000 * 1048576
    )
    # Entries without a card UUID are skipped.
    assert not any(("pod", "p3") in k[1] for k in s)


def test_legacy_names_only_with_the_flag() -> None:
    names = {name for name, _ in _samples(legacy=False)}
    assert "GPUDeviceMemoryLimit" not in names and "nodeGPUOverview" not in names
    legacy = {name for name, _ in _samples(legacy=True)}
    assert {
        "GPUDeviceMemoryLimit",
        "GPUDeviceSharedNum",
        "nodeGPUOverview",
        "nodeGPUMemoryPercentage",
        "vGPUCoreAllocated",
    } <= legacy


def test_own_histograms_and_counters_are_exported() -> None:
    metrics = SchedulerMetrics(MetricsSnapshot)
    metrics.filter_seconds.labels(path="live").observe(0.003)
    metrics.bind_seconds.observe(0.01)
    metrics.decisions.labels(verb="filter", outcome="fit").inc()
    text = generate_latest(metrics.registry).decode()
    assert 'pyhami_scheduler_filter_duration_seconds_count{path="live"} 1.0' in text
    assert "pyhami_scheduler_bind_duration_seconds_count 1.0" in text
    assert 'pyhami_scheduler_decisions_total{outcome="fit",verb="filter"} 1.0' in text


def test_nodes_with_unreadable_registrations_are_counted() -> None:
    samples = _samples(legacy=False)
    assert _get(samples, "pyhami_scheduler_node_registration_unreadable", node="n3") == 1.0
    assert [labels for name, labels in samples if "unreadable" in name] == [
        frozenset({("node", "n3")})
    ]
