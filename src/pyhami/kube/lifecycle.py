"""Start/stop services that also work as `async with` blocks."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self


class AsyncService(abc.ABC):
    """Subclasses give `start` and `stop`; `async with service:` runs one around the block."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
