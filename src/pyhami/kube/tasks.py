"""Background tasks that never die quietly: named, and their failure or exit is logged."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def guarded_task(
    coro: Coroutine[Any, Any, None], name: str, *, may_finish: bool = False
) -> asyncio.Task[None]:
    """Start `coro` as a named task; a crash is logged loudly, and so is a return unless the
    task `may_finish` (a one-shot job rather than a loop that should run until cancelled)."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(functools.partial(_report, may_finish=may_finish))
    return task


def _report(task: asyncio.Task[None], *, may_finish: bool) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error(
            "background task crashed", task=task.get_name(), error=repr(error), exc_info=error
        )
    elif not may_finish:
        log.warning("background task exited", task=task.get_name())


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel tasks and wait until they are done (their own errors were already logged)."""
    live = [t for t in tasks if t is not None and not t.done()]
    for task in live:
        task.cancel()
    if live:
        await asyncio.wait(live)


async def unless_stopped(
    work: Awaitable[object], stop: asyncio.Event, timeout: float | None = None
) -> None:
    """Await `work` until it is done, `stop` is set or `timeout` seconds pass, whichever comes
    first; what is still waiting then is cancelled. An error of `work` is raised here."""
    job = asyncio.ensure_future(work)
    waiters = {job, asyncio.ensure_future(stop.wait())}
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(*waiters)
    if not job.cancelled():
        job.result()
