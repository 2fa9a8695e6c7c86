"""Client-side throttling like client-go's: a token bucket of `qps` refilled up to `burst`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pyhami.kube.clock import Clock, SystemClock


@dataclass(frozen=True, slots=True)
class RateLimit:
    qps: float
    burst: int

    def __post_init__(self) -> None:
        if self.qps <= 0 or self.burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, got {self}")


class TokenBucket:
    """`acquire` returns at once while tokens last, then paces callers at `qps`."""

    def __init__(self, limit: RateLimit, clock: Clock | None = None) -> None:
        self.limit = limit
        self._clock: Clock = clock or SystemClock()
        self._tokens = float(limit.burst)
        self._last = self._clock.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:  # first come, first served
            now = self._clock.monotonic()
            refill = (now - self._last) * self.limit.qps
            self._tokens = min(float(self.limit.burst), self._tokens + refill)
            self._last = now
            self._tokens -= 1
            if self._tokens < 0:
                # Take the token on credit and wait until it would have been refilled; the
                # next caller's refill pays the debt back (no re-check, no float creep).
                await self._clock.sleep(-self._tokens / self.limit.qps)
