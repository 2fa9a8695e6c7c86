"""pyhami's scheduler as a user runs it: `pyhami scheduler` processes (one per replica, each
its own ports) under the chart's ServiceAccount, and a stand-in for the Service in front of
them that routes each new connection to a ready replica.

The processes run the code under test (this checkout's `src`), log to a file each, and are
killed with SIGKILL when a test wants a crash."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import ssl
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

import pyhami
from pyhami.sim.demo.cluster import SCHEDULER_NAME, DemoCluster
from pyhami.testing.real_cluster import free_port

SOURCE = Path(pyhami.__file__).resolve().parents[1]
START_TIMEOUT_S = 60.0
PROBE_PERIOD_S = 0.25


@dataclass
class SchedulerReplica:
    """One `pyhami scheduler` process; `start` returns once it answers /healthz."""

    name: str
    args: Sequence[str]
    kubeconfig: Path
    ca_file: Path
    log: Path
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def start(self) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "POD_NAME": self.name,  # the leader-election identity
            "PYTHONPATH": str(SOURCE),
        }
        env.pop("POD_NAMESPACE", None)  # no pod of its own to label
        command = [
            sys.executable,
            "-m",
            "pyhami.cli",
            "scheduler",
            f"--http_bind=127.0.0.1:{self.port}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            *self.args,
        ]
        with self.log.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                *command, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out
            )
        async with asyncio.timeout(START_TIMEOUT_S):
            while await self.probe("/healthz") is None:
                if self.process.returncode is not None:
                    raise AssertionError(f"{self.name} exited at start:\n{self.log_tail()}")
                await asyncio.sleep(0.1)

    async def probe(self, path: str) -> int | None:
        """The status of GET `path` on the main port, None when nothing answers."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{self.url}{path}", ssl=context, timeout=aiohttp.ClientTimeout(2)) as r,
            ):
                return r.status
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None

    async def metrics(self) -> str:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as answer,
        ):
            return await answer.text()

    def freeze(self) -> None:
        """SIGSTOP: the process stops between any two instructions, mid-request included."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    async def kill(self) -> None:
        """SIGKILL: no lease given back, no request finished, nothing cleaned up."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            await self.kill()

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


async def scheduler_replica(
    cluster: DemoCluster, name: str, *extra: str, port: int | None = None
) -> SchedulerReplica:
    """A replica as the chart runs it: the chart's ServiceAccount, TLS, kube-scheduler's
    client certificate required, the demo's device config (not started yet)."""
    real = cluster.real
    assert real is not None
    kubeconfig = await real.service_account_kubeconfig("kube-system", "pyhami-scheduler")
    tls = cluster.tls
    replica = SchedulerReplica(
        name,
        [
            f"--device-config-file={cluster.device_config_file}",
            f"--cert_file={tls.cert_file}",
            f"--key_file={tls.key_file}",
            f"--extender-client-ca={tls.ca_file}",
            f"--scheduler-name={SCHEDULER_NAME}",
            *extra,
        ],
        kubeconfig,
        tls.ca_file,
        cluster.workdir / f"{name}.log",
    )
    if port is not None:
        replica.port = port
    return replica


class ReadyEndpoint:
    """What a Kubernetes Service with a readiness probe on `/readyz` does for kube-scheduler:
    a stable address whose new connections go to a replica that answers the probe with 200.
    A follower answers 503 ("not the leader"), so only the leader receives connections; with
    none ready a connection is closed at once. Bytes are relayed as they are (TLS stays end to
    end between kube-scheduler and the replica)."""

    def __init__(self, replicas: Sequence[SchedulerReplica]) -> None:
        self.replicas = list(replicas)
        self.port = free_port()
        self.ready: SchedulerReplica | None = None
        self.routed: dict[str, int] = {}  # replica name -> connections sent there
        self._server: asyncio.Server | None = None
        self._probe: asyncio.Task[None] | None = None
        self._relays: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self._probe = asyncio.create_task(self._probe_loop())

    async def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        if self._server is not None:
            self._server.close()
        for relay in list(self._relays):
            relay.cancel()
        await asyncio.gather(
            *self._relays, *(t for t in (self._probe,) if t), return_exceptions=True
        )

    async def _probe_loop(self) -> None:
        while True:
            ready = None
            for replica in self.replicas:
                if await replica.probe("/readyz") == 200:
                    ready = replica
                    break
            self.ready = ready
            await asyncio.sleep(PROBE_PERIOD_S)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = self.ready
        if target is None:
            writer.close()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", target.port
            )
        except OSError:
            writer.close()
            return
        self.routed[target.name] = self.routed.get(target.name, 0) + 1
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.create_task(_relay(source, sink))
            self._relays.add(task)
            task.add_done_callback(self._relays.discard)


async def _relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        sink.close()


METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric `name` in a Prometheus text page: (labels, value)."""
    found = []
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if match and match["name"] == name:
            found.append((dict(LABEL.findall(match["labels"])), float(match["value"])))
    return found
