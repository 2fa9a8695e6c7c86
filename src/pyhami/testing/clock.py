"""A Clock that moves only when told to, for tests and simulations."""

import asyncio
from datetime import UTC, datetime, timedelta

START = datetime(2026, 1, 1, tzinfo=UTC)


class ManualClock:
    """Wall and monotonic time that advance together, only by `advance` or `sleep`.

    `sleep` records how long it was asked to wait, moves time by that much, and yields to the
    event loop once, so a loop that sleeps between steps runs at full speed.
    """

    def __init__(self, start: datetime = START, *, monotonic: float = 1000.0) -> None:
        if start.tzinfo is None:
            raise ValueError(f"ManualClock start {start} has no timezone; wall time is UTC")
        self._wall = start
        self._monotonic = monotonic
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self._monotonic

    def now(self) -> datetime:
        return self._wall

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds})")
        self._monotonic += seconds
        self._wall += timedelta(seconds=seconds)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(max(seconds, 0.0))
        await asyncio.sleep(0)
