"""Per-node serialisation of this scheduler's binds, in memory.

The node lock itself (`hami.io/mutex.lock`) is `pyhami.kube.nodelock`; `NodeMutexes` makes
concurrent binds to one node queue here instead of racing on the annotation.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any


class NodeMutexes:
    """One asyncio lock per node, dropped when the node goes away."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def hold(self, node: str) -> Any:
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            yield

    def forget(self, node: str) -> None:
        lock = self._locks.get(node)
        if lock is not None and not lock.locked():
            del self._locks[node]
