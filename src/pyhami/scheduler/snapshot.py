"""The metrics view of the scheduler's state, taken at scrape time (scheduler.md §9).

Unlike HAMi, whose node gauges exist only on the leader and lag up to 15 s behind the
registration loop, every replica reports its live ledger.
"""

from __future__ import annotations

from pyhami.engine import app_only_usage, collapse_init_usage
from pyhami.model import MigAllocation
from pyhami.scheduler.metrics import (
    DeviceSample,
    MetricsSnapshot,
    MigSample,
    PodDeviceSample,
    QuotaSample,
)
from pyhami.scheduler.state import ClusterState

NVIDIA = "NVIDIA"


def _mig_sample(entry: MigAllocation) -> MigSample | None:
    if (
        not entry.runtime_ready
        or entry.gpu_instance_id is None
        or entry.compute_instance_id is None
    ):
        return None
    return MigSample(
        mig_uuid=entry.mig_uuid,
        profile=entry.profile,
        gpu_instance_id=entry.gpu_instance_id,
        compute_instance_id=entry.compute_instance_id,
        placement_start=entry.placement.start,
        placement_size=entry.placement.size,
    )


def metrics_snapshot(state: ClusterState) -> MetricsSnapshot:
    ledger = state.ledger
    migs: dict[tuple[str, str], list[MigSample]] = {}
    pods: list[PodDeviceSample] = []
    namespaces: set[str] = set(state.quota_namespaces)
    for key in ledger.pod_keys():
        allocation = ledger.pod(key)
        if allocation is None:
            continue
        namespaces.add(allocation.namespace)
        for entry in allocation.mig_allocations:
            sample = _mig_sample(entry)
            if sample is not None:
                migs.setdefault((allocation.node, entry.gpu_uuid), []).append(sample)
        usage = (app_only_usage if allocation.init_finished else collapse_init_usage)(
            allocation.containers, allocation.init_count, NVIDIA, allocation.sidecars
        )
        pods.extend(
            PodDeviceSample(
                namespace=allocation.namespace,
                node=allocation.node,
                pod=allocation.name,
                container_index=0,  # usage is collapsed per pod, as in HAMi
                uuid=device.uuid,
                usedmem=device.usedmem,
                usedcores=device.usedcores,
            )
            for device in usage
        )
    devices = [
        DeviceSample(
            node=node,
            uuid=card.id,
            index=card.index,
            type=card.type,
            totalmem=card.totalmem,
            usedmem=card.usedmem,
            totalcore=card.totalcore,
            usedcores=card.usedcores,
            used=card.used,
            mode=card.mode,
            migs=tuple(migs.get((node, card.id), ())),
        )
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
        for resource, used, cap in rows:
            if used or cap is not None:
                quotas.append(
                    QuotaSample(namespace, resource, used, cap or 0, limit_set=cap is not None)
                )
    return MetricsSnapshot(
        devices=tuple(devices),
        quotas=tuple(quotas),
        pods=tuple(pods),
        unreadable_nodes=tuple(sorted(state.registration_errors)),
    )
