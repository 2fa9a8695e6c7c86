"""Guarded tasks say when they die."""

import asyncio

import pytest
from structlog.testing import capture_logs

from pyhami.kube import cancel_and_wait, guarded_task
from pyhami.kube.tasks import unless_stopped


async def test_crash_and_unexpected_exit_are_logged() -> None:
    async def crash() -> None:
        raise RuntimeError("boom")

    async def finish() -> None:
        return

    with capture_logs() as logs:
        tasks = [
            guarded_task(crash(), "t/crash"),
            guarded_task(finish(), "t/exit"),
            guarded_task(finish(), "t/oneshot", may_finish=True),
        ]
        await asyncio.wait(tasks)
        await asyncio.sleep(0)
    seen = {(e["event"], e["task"]) for e in logs}
    assert ("background task crashed", "t/crash") in seen
    assert ("background task exited", "t/exit") in seen
    assert not any(task == "t/oneshot" for _, task in seen)
    assert [t.get_name() for t in tasks] == ["t/crash", "t/exit", "t/oneshot"]


async def test_cancel_and_wait_is_quiet() -> None:
    with capture_logs() as logs:
        task = guarded_task(asyncio.sleep(60), "t/sleeper")
        await cancel_and_wait(task, None)
    assert task.cancelled() and logs == []


async def test_unless_stopped_ends_on_the_work_on_stop_or_on_the_timeout() -> None:
    done = asyncio.Event()
    done.set()
    await unless_stopped(asyncio.sleep(0), asyncio.Event())  # the work ends first
    sleeper = asyncio.ensure_future(asyncio.sleep(60))
    await unless_stopped(sleeper, done)  # stop was set: the work is cancelled
    assert sleeper.cancelled()
    sleeper = asyncio.ensure_future(asyncio.sleep(60))
    await unless_stopped(sleeper, asyncio.Event(), timeout=0.01)
    assert sleeper.cancelled()


async def test_unless_stopped_raises_the_works_own_error() -> None:
    async def fail() -> None:
        raise RuntimeError("the watch broke")

    with pytest.raises(RuntimeError, match="the watch broke"):
        await unless_stopped(fail(), asyncio.Event())
