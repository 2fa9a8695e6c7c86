"""Time as a parameter: everything that reads or waits on time takes this one Clock, so tests
drive it (`pyhami.testing.ManualClock`). The engine stays pure: it takes time values, not a clock.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clocks: monotonic for intervals, UTC wall time for timestamps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
