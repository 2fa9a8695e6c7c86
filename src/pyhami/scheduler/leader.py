"""Leader election on our own Lease (client-go's algorithm), so only one replica decides.

HAMi does not campaign: it watches the kube-scheduler's Lease and trusts its local clock and a
hostname prefix match (`hami-scheduler-1` also matches `hami-scheduler-10`). pyhami campaigns
itself: each replica tries to acquire or renew one Lease every `retry_period`; another holder's
lease counts as live until `lease_duration` after we last *saw it change* (our monotonic clock, so
skew between machines does not matter); a leader that cannot renew within `renew_deadline` steps
down before anyone else may take over. A clean stop gives the lease up so the next replica takes
over at once.

Two modes. *Follow* (the default, for HAMi's chart, where the kube-scheduler container of the
same pod campaigns for the Lease named by `--leader-elect-resource-name`): never write the
Lease; lead while its holder is our pod's kube-scheduler (`<hostname>_<uuid>`) and it is
being renewed. Campaigning there would fight kube-scheduler for its own Lease, and leading in
a different pod than the kube-scheduler that calls us on 127.0.0.1 would stop all
scheduling. *Campaign* (`--leader-elect-campaign`, for deployments without a kube-scheduler
election): acquire and renew the Lease ourselves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from pyhami.kube import Clock, LeaseRecord

log = structlog.get_logger(__name__)


class LeaseStore(Protocol):
    """Read/modify/write of one Lease (`pyhami.kube.LeaseLock`); writes fail on a conflict."""

    async def get(self) -> LeaseRecord | None: ...

    async def create(self, record: LeaseRecord) -> None: ...

    async def update(self, record: LeaseRecord) -> None: ...


@dataclass(frozen=True, slots=True)
class ElectionTiming:
    """Seconds; defaults are kube-scheduler's (15 s lease, 10 s renew deadline, 2 s retry)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry_period < renew_deadline < lease_duration, got "
                f"{self.retry_period}, {self.renew_deadline}, {self.lease_duration}"
            )


class LeaderElector:
    """Campaigns for one Lease; `is_leader` and `leader` say where this replica stands."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        timing: ElectionTiming,
        *,
        clock: Clock,
        on_change: Callable[[bool], Awaitable[None]] | None = None,
        campaign: bool = True,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        self.store = store
        self.identity = identity
        self.timing = timing
        self._clock = clock
        self._on_change = on_change
        self.campaign = campaign
        self.is_leader = False
        self.leader = ""
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0

    def _observe(self, record: LeaseRecord | None) -> None:
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock.monotonic()
        self.leader = record.holder if record is not None else ""

    def _ours(self, holder: str) -> bool:
        """Our identity, or the kube-scheduler of our pod (client-go writes `<hostname>_<uuid>`);
        an exact match on the part before `_`, not HAMi's bare prefix (`-1` matching `-10`)."""
        return holder == self.identity or holder.startswith(self.identity + "_")

    async def follow(self) -> bool:
        """One round without writing: True while our pod's kube-scheduler holds a live lease."""
        current = await self.store.get()
        self._observe(current)
        if current is None or not self._ours(current.holder):
            return False
        return self._observed_at + current.lease_duration_s > self._clock.monotonic()

    async def try_acquire_or_renew(self) -> bool:
        """One round: True when we hold the lease afterwards."""
        now = self._clock.now()
        duration = max(1, round(self.timing.lease_duration))
        mine = LeaseRecord(self.identity, duration, acquire_time=now, renew_time=now)
        current = await self.store.get()
        if current is None:
            await self.store.create(mine)
            self._observe(mine)
            return True
        self._observe(current)
        held_by_other = current.holder not in ("", self.identity)
        if held_by_other and self._observed_at + current.lease_duration_s > self._clock.monotonic():
            return False
        if current.holder == self.identity:
            mine = replace(mine, acquire_time=current.acquire_time, transitions=current.transitions)
        else:
            mine = replace(mine, transitions=current.transitions + 1)
        await self.store.update(mine)
        self._observe(mine)
        return True

    async def _set_leading(self, leading: bool) -> None:
        if leading == self.is_leader:
            return
        self.is_leader = leading
        log.info("leadership changed", identity=self.identity, leading=leading)
        if self._on_change is not None:
            await self._on_change(leading)

    async def step(self) -> None:
        """One round, with the renew deadline applied to a campaigning leader (a follower
        stops leading at once)."""
        try:
            won = await (self.try_acquire_or_renew() if self.campaign else self.follow())
        except Exception as err:  # an API failure is a lost round, never a crash
            log.warning("lease round failed", identity=self.identity, error=str(err))
            won = False
        if won:
            self._renewed_at = self._clock.monotonic()
            await self._set_leading(True)
        elif (
            not self.campaign
            or self._clock.monotonic() - self._renewed_at > self.timing.renew_deadline
        ):
            await self._set_leading(False)

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign until `stop` is set, then give the lease up if we hold it."""
        try:
            while not stop.is_set():
                await self.step()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.timing.retry_period)
        finally:
            await self.release()

    async def release(self) -> None:
        """Hand the lease back (holder emptied) so a successor need not wait out its term."""
        held = self.is_leader and self.campaign
        await self._set_leading(False)
        if not held:
            return
        try:
            current = await self.store.get()
            if current is not None and current.holder == self.identity:
                await self.store.update(
                    replace(current, holder="", lease_duration_s=1, renew_time=self._clock.now())
                )
        except Exception as err:
            log.warning("lease release failed", identity=self.identity, error=str(err))
