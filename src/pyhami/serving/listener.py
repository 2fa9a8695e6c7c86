"""Listening sockets that slow or numerous clients cannot exhaust.

aiohttp alone keeps a connection for as long as its client cares to dribble bytes: 800 slow
TLS clients once held the extender's port for 80 s and 240 MB. Here every connection gets:
* the TLS handshake within `header_timeout_s` (asyncio's handshake timeout);
* each request head within `header_timeout_s` of the connection opening or of the previous
  answer (so an idle keep-alive connection also closes then; clients reconnect);
* each request body within `body_timeout_s` (the routes read bodies through `read_body`);
and at most `max_connections` connections are open at once: one more is closed as soon as its
handshake is done, before a byte of HTTP is read.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from aiohttp import web
from aiohttp.log import access_logger
from aiohttp.web_protocol import RequestHandler

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a client may take and how many may be connected (see the module docstring)."""

    header_timeout_s: float = 30.0
    body_timeout_s: float = 10.0
    max_connections: int = 512

    def __post_init__(self) -> None:
        if self.header_timeout_s <= 0 or self.body_timeout_s <= 0:
            raise ValueError("connection timeouts must be positive")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")


class BodyTimeoutError(Exception):
    """The client did not send its whole body within the body timeout."""


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The body, or limit+1 bytes when it is longer (the decoder then says so).

    Raises BodyTimeoutError when it does not arrive within `timeout_s`."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.content.iter_chunked(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    break
    except TimeoutError as err:
        raise BodyTimeoutError(f"request body not received within {timeout_s:g} s") from err
    return b"".join(chunks)


class ConnectionGuard:
    """One listener's limits: `serve` an app under them, `close` it at the end."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.refused = 0  # connections closed because the cap was reached
        self.expired = 0  # connections closed because a request head was late
        self._timers: dict[RequestHandler, asyncio.TimerHandle] = {}
        self._server: web.Server | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None

    def open_connections(self) -> int:
        return 0 if self._server is None else len(self._server.connections)

    async def serve(
        self,
        app: web.Application,
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        *,
        access_log: bool = True,
    ) -> int:
        """Serve `app` on host:port under these limits; returns the bound port (useful with 0)."""
        app.middlewares.insert(0, self.middleware)  # outermost: it times the whole request
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            shutdown_timeout=1.0,
            access_log=access_logger if access_log else None,
        )
        await self._runner.setup()
        server = self._server = self._runner.server
        assert server is not None  # set by setup()
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: _Gate(self, server()),
            host,
            port,
            ssl=context,
            # asyncio refuses a handshake timeout without TLS.
            ssl_handshake_timeout=self.limits.header_timeout_s if context else None,
        )
        return int(self._listener.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and close the app's connections (a guard that never served: no-op)."""
        if self._listener is not None:
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The head has arrived: stop its clock while the request is handled, restart it after."""
        connection = request.protocol
        self._disarm(connection)
        try:
            return await handler(request)
        finally:
            self._arm(connection)

    def _admit(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        if self.open_connections() >= self.limits.max_connections:
            self.refused += 1
            if self.refused == 1 or self.refused % 100 == 0:
                log.warning(
                    "connection refused: too many open connections",
                    limit=self.limits.max_connections,
                    refused=self.refused,
                )
            transport.abort()
            return
        transport.set_protocol(handler)
        handler.connection_made(transport)
        self._arm(handler)

    def _arm(self, connection: RequestHandler) -> None:
        self._disarm(connection)
        loop = asyncio.get_running_loop()
        self._timers[connection] = loop.call_later(
            self.limits.header_timeout_s, self._expire, connection
        )

    def _disarm(self, connection: RequestHandler) -> None:
        timer = self._timers.pop(connection, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, connection: RequestHandler) -> None:
        self._timers.pop(connection, None)
        transport = connection.transport
        if transport is None or transport.is_closing():
            return
        self.expired += 1
        log.debug("connection closed: no request head in time", limit=self.limits.header_timeout_s)
        transport.abort()


class _Gate(asyncio.Protocol):
    """Stands in for the request handler until the connection is admitted (after TLS)."""

    def __init__(self, guard: ConnectionGuard, handler: RequestHandler) -> None:
        self._guard = guard
        self._handler = handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream server's
        self._guard._admit(self._handler, transport)
