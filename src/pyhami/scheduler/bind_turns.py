"""Per-node serialisation of this scheduler's binds, in memory.

The node lock itself (`hami.io/mutex.lock`) is `pyhami.kube.annotation_lock`; `BindTurns` makes
concurrent binds to one node queue here instead of racing on the annotation.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any


class NodeTurnTimeoutError(TimeoutError):
    """A bind's turn on its node did not come in time."""


class BindTurns:
    """One asyncio lock per node, dropped when the node goes away."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, int] = {}

    def queued(self, node: str) -> int:
        """Binds holding or waiting for the node's turn."""
        return self._queued.get(node, 0)

    @asynccontextmanager
    async def hold(self, node: str, *, within: float | None = None) -> Any:
        """The node's turn; NodeTurnTimeoutError when it does not come within `within` s."""
        lock = self._locks.setdefault(node, asyncio.Lock())
        self._queued[node] = self._queued.get(node, 0) + 1
        try:
            try:
                await asyncio.wait_for(lock.acquire(), None if within is None else max(within, 0))
            except TimeoutError as err:
                message = f"node {node}: no turn within {within:.1f}s"
                raise NodeTurnTimeoutError(message) from err
            try:
                yield
            finally:
                lock.release()
        finally:
            self._queued[node] -= 1
            if not self._queued[node]:
                del self._queued[node]

    def forget(self, node: str) -> None:
        lock = self._locks.get(node)
        if lock is not None and not lock.locked():
            del self._locks[node]
