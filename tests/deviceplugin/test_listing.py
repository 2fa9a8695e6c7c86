"""Replica ids for kubelet and the preferred-allocation choice."""

import pytest

from pyhami.deviceplugin.api import HEALTHY, UNHEALTHY
from pyhami.deviceplugin.inventory import Gpu
from pyhami.deviceplugin.listing import (
    NoPreferenceError,
    kubelet_devices,
    physical_id,
    preferred_replicas,
    replica_ids,
)

A = "GPU-0b7c1a2e-1111-2222-3333-444455556666"
B = "GPU-1d3e5f70-1111-2222-3333-444455556666"


def gpu(index: int, uuid: str, numa: int | None = 0) -> Gpu:
    return Gpu(
        index=index, uuid=uuid, name="NVIDIA A100", bus_id=f"0000:{index:02x}:00.0", numa=numa
    )


def test_split_replicas_in_gpu_order_with_health() -> None:
    devices = kubelet_devices([gpu(0, A), gpu(1, B)], 3, {B: False}, numa_topology=False)
    assert [d.ID for d in devices] == [f"{A}-0", f"{A}-1", f"{A}-2", f"{B}-0", f"{B}-1", f"{B}-2"]
    assert [d.health for d in devices] == [HEALTHY] * 3 + [UNHEALTHY] * 3
    assert not devices[0].HasField("topology")


def test_numa_topology_only_when_enabled_and_known() -> None:
    devices = kubelet_devices([gpu(0, A, numa=1), gpu(1, B, numa=None)], 1, {}, numa_topology=True)
    assert [n.ID for n in devices[0].topology.nodes] == [1]
    assert not devices[1].HasField("topology")


@pytest.mark.parametrize(
    "kubelet_id, want",
    [
        (f"{A}-0", A),
        (f"{A}-10", A),
        (f"{A}::3", A),
        (A, A),
        ("GPU-0b7c1a2e-1111-2222-3333-4444555566", "GPU-0b7c1a2e-1111-2222-3333-4444555566"),
        (f"{A}-x", f"{A}-x"),
    ],
)
def test_physical_id(kubelet_id: str, want: str) -> None:
    assert physical_id(kubelet_id) == want


def test_preferred_picks_replicas_of_the_scheduled_gpus() -> None:
    available = replica_ids(A, 3) + replica_ids(B, 3)
    assert preferred_replicas(available, [], [B], 1) == [f"{B}-0"]
    assert preferred_replicas(available, [], [B, A], 2) == [f"{B}-0", f"{A}-0"]


def test_preferred_counts_must_include_replicas() -> None:
    available = replica_ids(A, 3) + replica_ids(B, 3)
    assert preferred_replicas(available, [f"{A}-2"], [A, B], 2) == [f"{A}-2", f"{B}-0"]


@pytest.mark.parametrize(
    "available, desired, size, match",
    [
        (replica_ids(A, 2), [B], 1, "no available slice device found for annotated GPU"),
        (replica_ids(A, 2), [A], 2, "assigned 1 devices, kubelet wants 2"),
    ],
)
def test_preferred_refuses_what_it_cannot_express(
    available: list[str], desired: list[str], size: int, match: str
) -> None:
    with pytest.raises(NoPreferenceError, match=match):
        preferred_replicas(available, [], desired, size)
