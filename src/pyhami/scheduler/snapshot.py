"""The metrics view of the scheduler's state, taken at scrape time.

Unlike HAMi, whose node gauges exist only on the leader and lag up to 15 s behind the
registration loop, every replica reports its live ledger.
"""

from __future__ import annotations

from pyhami.engine import app_only_usage, collapse_init_usage
from pyhami.model import MigAllocation
from pyhami.protocol import NVIDIA_VENDOR
from pyhami.scheduler.metrics import DeviceSample, MetricsSnapshot, PodDeviceSample, QuotaSample
from pyhami.scheduler.state import ClusterState


def metrics_snapshot(state: ClusterState) -> MetricsSnapshot:
    ledger = state.ledger
    migs: dict[tuple[str, str], list[MigAllocation]] = {}
    pods: list[PodDeviceSample] = []
    namespaces: set[str] = set(state.quota_namespaces)
    for key in ledger.pod_keys():
        allocation = ledger.pod(key)
        if allocation is None:
            continue
        namespaces.add(allocation.namespace)
        for entry in allocation.mig_allocations:
            if entry.runtime_ready:
                migs.setdefault((allocation.node, entry.gpu_uuid), []).append(entry)
        usage = (app_only_usage if allocation.init_finished else collapse_init_usage)(
            allocation.containers, allocation.init_count, NVIDIA_VENDOR, allocation.sidecars
        )
        pods.extend(
            PodDeviceSample(allocation.namespace, allocation.node, allocation.name, device)
            for device in usage
        )
    devices = [
        DeviceSample(node, card, tuple(migs.get((node, card.id), ())))
        for node in sorted(ledger.node_names())
        for card in ledger.device_usage(node)
    ]
    nvidia = state.config.nvidia
    quotas: list[QuotaSample] = []
    for namespace in sorted(namespaces):
        limit = state.quotas.limit(namespace)
        memory, cores = ledger.namespace_usage(namespace)
        rows = (
            (nvidia.resource_memory_name, memory, None if limit is None else limit.memory),
            (nvidia.resource_core_name, cores, None if limit is None else limit.cores),
        )
        quotas.extend(
            QuotaSample(namespace, resource, used, cap)
            for resource, used, cap in rows
            if used or cap is not None
        )
    return MetricsSnapshot(
        devices=tuple(devices),
        quotas=tuple(quotas),
        pods=tuple(pods),
        unreadable_nodes=tuple(sorted(state.registration_errors)),
    )
