"""Guarded tasks say when they die."""

import asyncio

from structlog.testing import capture_logs

from pyhami.kube import cancel_and_wait, guarded_task


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
