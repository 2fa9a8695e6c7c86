"""Leader election rounds on a manual clock over an in-memory Lease with conflict checks."""

import asyncio
from dataclasses import dataclass, field

import pytest

from pyhami.kube import LeaseRecord
from pyhami.scheduler.leader import ElectionTiming, LeaderElector
from pyhami.testing import ManualClock


class Conflict(Exception):
    pass


@dataclass
class MemoryLease:
    """One Lease; a write based on a stale read fails like a 409."""

    record: LeaseRecord | None = None
    version: int = 0
    reads: dict[int, int] = field(default_factory=dict)
    fail: bool = False

    async def get(self) -> LeaseRecord | None:
        if self.fail:
            raise ConnectionError("API down")
        self.reads[id(asyncio.current_task())] = self.version
        return self.record

    async def create(self, record: LeaseRecord) -> None:
        if self.record is not None:
            raise Conflict("exists")
        self.record, self.version = record, self.version + 1

    async def update(self, record: LeaseRecord) -> None:
        if self.fail:
            raise ConnectionError("API down")
        if self.reads.get(id(asyncio.current_task())) != self.version:
            raise Conflict("stale")
        self.record, self.version = record, self.version + 1


TIMING = ElectionTiming(lease_duration=15, renew_deadline=10, retry_period=2)


def _elector(
    store: MemoryLease, name: str, clock: ManualClock, log: list[tuple[str, bool]]
) -> LeaderElector:
    async def changed(leading: bool) -> None:
        log.append((name, leading))

    return LeaderElector(store, name, TIMING, clock=clock, on_change=changed)


async def test_only_one_replica_leads_and_the_other_takes_over_within_the_lease() -> None:
    store, clock, log = MemoryLease(), ManualClock(), []
    a, b = _elector(store, "a", clock, log), _elector(store, "b", clock, log)
    await a.step()
    await b.step()
    assert (a.is_leader, b.is_leader) == (True, False)
    assert b.leader == "a"
    for _ in range(10):  # a keeps renewing; b never gets in
        clock.advance(2)
        await a.step()
        await b.step()
        assert (a.is_leader, b.is_leader) == (True, False)
    killed_at = clock.monotonic()  # a dies without releasing
    while not b.is_leader:
        clock.advance(2)
        await b.step()
    assert clock.monotonic() - killed_at <= TIMING.lease_duration + TIMING.retry_period
    assert store.record is not None and store.record.holder == "b"
    assert store.record.transitions == 1
    assert log == [("a", True), ("b", True)]


async def test_leader_steps_down_when_it_cannot_renew_before_the_deadline() -> None:
    store, clock, log = MemoryLease(), ManualClock(), []
    a = _elector(store, "a", clock, log)
    await a.step()
    store.fail = True
    clock.advance(8)
    await a.step()
    assert a.is_leader  # still inside the renew deadline
    clock.advance(4)
    await a.step()
    assert not a.is_leader
    assert log == [("a", True), ("a", False)]


async def test_clean_stop_releases_so_the_successor_need_not_wait() -> None:
    store, clock, log = MemoryLease(), ManualClock(), []
    a, b = _elector(store, "a", clock, log), _elector(store, "b", clock, log)
    stop = asyncio.Event()
    stop.set()
    await a.step()
    await a.run(stop)  # returns at once and releases
    assert store.record is not None and store.record.holder == ""
    await b.step()
    assert b.is_leader


def test_timing_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        ElectionTiming(lease_duration=5, renew_deadline=10, retry_period=2)


async def test_follow_mode_leads_with_our_kube_scheduler_and_never_writes() -> None:
    store, clock, log = MemoryLease(), ManualClock(), []
    follower = LeaderElector(
        store,
        "hami-scheduler-1",
        TIMING,
        clock=clock,
        campaign=False,
    )
    await follower.step()
    assert not follower.is_leader and store.record is None  # no lease: nothing written
    store.record = LeaseRecord("hami-scheduler-10_5f2c", 15, renew_time=clock.now())
    await follower.step()
    assert not follower.is_leader  # HAMi's prefix bug: -1 must not match -10
    for renewals in range(3):
        store.record = LeaseRecord(
            "hami-scheduler-1_9a1b", 15, renew_time=clock.now(), transitions=renewals
        )
        await follower.step()
        assert follower.is_leader
        clock.advance(2)
    clock.advance(16)  # kube-scheduler stopped renewing
    await follower.step()
    assert not follower.is_leader
    assert store.record.holder == "hami-scheduler-1_9a1b"  # never overwritten
    del log
