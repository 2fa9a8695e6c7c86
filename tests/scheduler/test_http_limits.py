"""Slow and numerous clients: every connection to the scheduler's ports is bounded in time and
in number, so a few hundred slow TLS clients cannot hold the extender (and its memory).

Loopback only, short limits (1 s), bounded loops: each wait below ends well after the limit
it checks or fails the test."""

import asyncio
import contextlib
import ssl
from datetime import timedelta
from pathlib import Path

from pyhami.scheduler.runtime import SchedulerProcess

from .cluster import Cluster, running_cluster

LIMITS = {
    "http_header_timeout": timedelta(seconds=1),
    "http_body_timeout": timedelta(seconds=1),
    "http_max_connections": 8,
}
CLOSED_WITHIN_S = 10.0  # far above the 1 s limits: a wait this long means "never closed"
PARTIAL_HEAD = b"POST /webhook HTTP/1.1\r\nHost: scheduler\r\nContent-Type: appl"


async def _tls_connection(
    cluster: Cluster, process: SchedulerProcess
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = ssl.create_default_context(cadata=cluster.ca.decode())
    return await asyncio.open_connection("127.0.0.1", process.main_port, ssl=context)


async def _closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before closing the connection (fails if it stays open)."""
    received = b""
    async with asyncio.timeout(CLOSED_WITHIN_S):
        try:
            while chunk := await reader.read(1 << 16):
                received += chunk
        except (ConnectionError, ssl.SSLError):
            pass
    return received


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write, whether or not the server has closed the connection already (cap reached)."""
    writer.write(data)
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        await writer.drain()


async def _drop(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        await writer.wait_closed()


async def test_slow_tls_clients_are_dropped_and_the_connection_cap_holds(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        process = await cluster.scheduler(**LIMITS)
        guard = process.guards["main"]
        clients = [await _tls_connection(cluster, process) for _ in range(20)]
        for _, writer in clients:
            await _send(writer, PARTIAL_HEAD)  # a request head that never ends
        await asyncio.sleep(0.2)
        assert guard.open_connections() <= 8
        results = await asyncio.gather(*(_closed(reader) for reader, _ in clients))
        assert results == [b""] * 20  # every one closed, none answered
        assert guard.refused >= 12 and guard.expired >= 1
        for _, writer in clients:
            await _drop(writer)
        # The slots are free again: a well-behaved client is served.
        status, _ = await cluster.get(process, "/healthz")
        assert status == 200


async def test_a_body_that_does_not_arrive_gets_a_json_408_and_the_connection_closes(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path) as cluster:
        process = await cluster.scheduler(**LIMITS)
        for path in ("/webhook", "/filter"):
            reader, writer = await _tls_connection(cluster, process)
            head = (
                f"POST {path} HTTP/1.1\r\nHost: scheduler\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            await _send(writer, head.encode())
            if path == "/filter":  # kube-scheduler's route: the caller needs a certificate
                answer = await _closed(reader)
                assert answer.startswith(b"HTTP/1.1 401 ") and b'"Error"' in answer
            else:
                answer = await _closed(reader)
                assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
                assert b"application/json" in answer and b"not received within 1 s" in answer
            await _drop(writer)


async def test_a_stalled_handshake_and_a_slow_plain_client_are_dropped(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        process = await cluster.scheduler(**LIMITS)
        silent_reader, silent = await asyncio.open_connection("127.0.0.1", process.main_port)
        plain_reader, plain = await asyncio.open_connection("127.0.0.1", process.metrics_port)
        await _send(plain, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # head never finished
        assert await _closed(silent_reader) == b""  # never sent a ClientHello
        assert await _closed(plain_reader) == b""
        assert process.guards["metrics"].expired == 1
        await _drop(silent)
        await _drop(plain)
