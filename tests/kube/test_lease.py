"""LeaseLock: coordination.k8s.io/v1 read/modify/write with conflicts, against the fake."""

from datetime import UTC, datetime

import pytest

from pyhami.kube import LEASES, Conflict, KubeClient, LeaseLock, LeaseRecord

T0 = datetime(2026, 12, 2, 20, 0, 0, 123456, tzinfo=UTC)


async def test_create_get_round_trip_with_micro_time(kube: KubeClient) -> None:
    lock = LeaseLock(kube, "kube-system", "pyhami")
    assert await lock.get() is None
    record = LeaseRecord("a", 15, acquire_time=T0, renew_time=T0)
    await lock.create(record)
    assert await lock.get() == record
    raw = await kube.get(LEASES, "pyhami", "kube-system")
    assert raw["spec"]["renewTime"] == "2026-12-02T20:00:00.123456Z"
    assert raw["spec"]["holderIdentity"] == "a" and raw["spec"]["leaseDurationSeconds"] == 15


async def test_update_after_someone_else_wrote_is_conflict(kube: KubeClient) -> None:
    mine, theirs = LeaseLock(kube, "default", "l"), LeaseLock(kube, "default", "l")
    await mine.create(LeaseRecord("a", 15, T0, T0))
    await theirs.get()
    await mine.get()
    await theirs.update(LeaseRecord("b", 15, T0, T0, 1))
    with pytest.raises(Conflict):
        await mine.update(LeaseRecord("a", 15, T0, T0))
    with pytest.raises(Conflict):
        await LeaseLock(kube, "default", "l").create(LeaseRecord("c", 15))


def test_lock_needs_a_name() -> None:
    with pytest.raises(ValueError):
        LeaseLock(None, "", "x")  # type: ignore[arg-type]
