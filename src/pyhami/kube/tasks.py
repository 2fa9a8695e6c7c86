"""Background tasks that never die quietly: named, and their failure or exit is logged."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def guarded_task(
    coro: Coroutine[Any, Any, None], name: str, *, may_finish: bool = False
) -> asyncio.Task[None]:
    """Start `coro` as a named task; a crash is logged loudly, and so is a return unless the
    task `may_finish` (a one-shot job rather than a loop that should run until cancelled)."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(_report_finish if may_finish else _report_exit)
    return task


def _report_exit(task: asyncio.Task[None]) -> None:
    if _report_crash(task):
        return
    log.warning("background task exited", task=task.get_name())


def _report_finish(task: asyncio.Task[None]) -> None:
    _report_crash(task)


def _report_crash(task: asyncio.Task[None]) -> bool:
    """Log a crash; True when the task did not simply return."""
    if task.cancelled():
        return True
    error = task.exception()
    if error is None:
        return False
    log.error("background task crashed", task=task.get_name(), error=repr(error), exc_info=error)
    return True


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel tasks and wait until they are done (their own errors were already logged)."""
    live = [t for t in tasks if t is not None and not t.done()]
    for task in live:
        task.cancel()
    if live:
        await asyncio.wait(live)
