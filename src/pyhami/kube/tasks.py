"""Background tasks that never die quietly: named, and their failure or exit is logged."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def guarded_task(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """Start `coro` as a named task; a crash or an unexpected return is logged loudly."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(_report)
    return task


def _report(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error(
            "background task crashed", task=task.get_name(), error=repr(error), exc_info=error
        )
    else:
        log.warning("background task exited", task=task.get_name())


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel tasks and wait until they are done (their own errors were already logged)."""
    live = [t for t in tasks if t is not None and not t.done()]
    for task in live:
        task.cancel()
    if live:
        await asyncio.wait(live)
