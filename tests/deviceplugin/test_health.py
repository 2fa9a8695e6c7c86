"""XID policy, the health board, and the watcher that marks and recovers cards."""

import asyncio

import pytest

from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.health import HealthBoard, HealthSettings, HealthWatcher, XidPolicy
from pyhami.deviceplugin.inventory import discover
from pyhami.nvml import NvmlError
from pyhami.testing import FakeNVML, ManualClock
from pyhami.testing.fake_nvml import a100_80g


@pytest.mark.parametrize(
    "disable, enable, xid, fatal",
    [
        ("", "", 79, True),
        ("", "", 13, False),  # application error, ignored by default
        ("", "13", 13, True),
        ("79, 48", "", 79, False),
        ("all", "", 79, False),
        ("xids", "48", 48, True),
        ("", "all", 31, True),
    ],
)
def test_xid_policy(disable: str, enable: str, xid: int, fatal: bool) -> None:
    assert policy(disable, enable).is_fatal(xid) is fatal


def policy(disable: str, enable: str) -> XidPolicy:
    return XidPolicy.from_environment(
        {"DP_DISABLE_HEALTHCHECKS": disable, "DP_ENABLE_HEALTHCHECKS": enable}
    )


def test_policy_all_disabled_is_inactive() -> None:
    assert not policy("All", "").active
    assert policy("all", "79").active
    assert XidPolicy.from_environment({}).active


async def wait_until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_fatal_xid_marks_then_quiet_card_recovers() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g())
    gpus = discover(nvml, DeviceFilter())
    board = HealthBoard(g.uuid for g in gpus)
    clock = ManualClock()
    settings = HealthSettings(recovery_after=60, wait_ms=20)
    watcher = HealthWatcher(nvml, gpus, board, settings, clock=clock)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    await wait_until(lambda: nvml.open_watches > 0)
    nvml.inject_xid(1, 13)  # ignored
    nvml.inject_xid(1, 79)
    await wait_until(lambda: not board.healthy(gpus[1].uuid))
    assert board.healthy(gpus[0].uuid)
    trouble = board.trouble(gpus[1].uuid)
    assert trouble is not None and trouble.reason == "XID 79"
    nvml.fail("device_memory", index=1)  # the probe fails: stays unhealthy
    clock.advance(61)
    await asyncio.sleep(0.1)
    assert not board.healthy(gpus[1].uuid)
    nvml.heal()
    await wait_until(lambda: board.healthy(gpus[1].uuid))
    stop.set()
    await task


async def test_unwatchable_card_stays_unhealthy_and_wait_errors_mark_all() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g())
    nvml.make_unwatchable(0)
    gpus = discover(nvml, DeviceFilter())
    board = HealthBoard(g.uuid for g in gpus)
    clock = ManualClock()
    settings = HealthSettings(recovery_after=0, wait_ms=20)
    watcher = HealthWatcher(nvml, gpus, board, settings, clock=clock)
    stop = asyncio.Event()
    nvml.fail("xid_wait", times=1, error=NvmlError("nvmlEventSetWait", "Unknown Error", 999))
    task = asyncio.create_task(watcher.run(stop))
    await wait_until(lambda: board.version >= 2)
    assert not board.healthy(gpus[0].uuid)
    clock.advance(1)
    await wait_until(lambda: board.healthy(gpus[1].uuid))  # recovered after the bad wait
    assert not board.healthy(gpus[0].uuid)  # never recovers: cannot be watched
    stop.set()
    await task


async def test_board_change_wakes_waiters() -> None:
    board = HealthBoard(["GPU-a"])
    waiter = asyncio.create_task(board.wait_for_change(board.version))
    await asyncio.sleep(0)
    board.mark("GPU-a", "XID 79", 0.0)
    await asyncio.wait_for(waiter, 1)
    board.mark("GPU-unknown", "XID 79", 0.0)  # not ours: ignored
    assert board.version == 1


async def test_stopping_never_frees_the_event_set_under_a_waiting_thread() -> None:
    nvml = FakeNVML.with_gpus(a100_80g())
    gpus = discover(nvml, DeviceFilter())
    board = HealthBoard(g.uuid for g in gpus)
    watcher = HealthWatcher(nvml, gpus, board, HealthSettings(wait_ms=300))
    task = asyncio.create_task(watcher.run(asyncio.Event()))
    await wait_until(lambda: nvml.open_watches > 0)
    await asyncio.sleep(0.05)  # the thread is now blocked in wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (watch,) = nvml.created_watches
    assert watch.closed and not watch.closed_while_waiting
