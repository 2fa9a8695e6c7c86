"""ManualClock: wall and monotonic time move together, only when told to or slept on."""

from datetime import UTC, datetime, timedelta

import pytest

from pyhami.kube import Clock
from pyhami.testing import ManualClock


async def test_sleep_moves_both_clocks_and_is_recorded() -> None:
    start = datetime(2026, 8, 21, 12, tzinfo=UTC)
    manual = ManualClock(start, monotonic=5.0)
    clock: Clock = manual  # it is a Clock to the code under test
    await clock.sleep(2.5)
    manual.advance(10)
    assert (clock.monotonic(), clock.now()) == (17.5, start + timedelta(seconds=12.5))
    assert manual.sleeps == [2.5]


def test_a_clock_does_not_go_back_and_wall_time_is_utc() -> None:
    with pytest.raises(ValueError, match=r"does not go back: advance\(-1\)"):
        ManualClock().advance(-1)
    with pytest.raises(ValueError, match="has no timezone"):
        ManualClock(datetime(2026, 1, 1))  # the mistake under test
