"""The monitor service: the 5 s scan + feedback loop and the HTTP server (`/metrics`, `/healthz`).

Everything runs on one event loop, so scrapes and ticks never overlap and a region is never
closed while a scrape reads it. Where we differ from HAMi: a `/healthz` endpoint (HAMi has
none), and while the device plugin's MIG-apply lock file exists the feedback step is skipped
(HAMi stops its loop on the lock's inotify event; we look for the file each tick).
"""

import asyncio
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from pyhami.kube import Clock
from pyhami.kube.tasks import unless_stopped
from pyhami.monitor.feedback import Verdict, observe
from pyhami.monitor.host import NvmlOpener
from pyhami.monitor.metrics import MonitorCollector, monitor_registry
from pyhami.monitor.pods import PodSource
from pyhami.monitor.region import FeedbackFields, RegionError
from pyhami.monitor.sanity import SanityAlarms
from pyhami.monitor.scan import DirectoryError, RegionDirectory
from pyhami.monitor.settings import MonitorSettings
from pyhami.protocol.host_files import MIG_APPLY_LOCK
from pyhami.serving import ConnectionGuard

log = structlog.get_logger(__name__)

HEALTHY_TICKS = 3  # /healthz fails once this many periods pass without a good tick


@dataclass(frozen=True, slots=True)
class TickResult:
    verdicts: tuple[Verdict, ...]
    feedback_paused: bool


class MonitorService:
    def __init__(
        self,
        settings: MonitorSettings,
        pods: PodSource,
        open_nvml: NvmlOpener | None,
        clock: Clock,
        *,
        mig_apply_lock: Path = Path(MIG_APPLY_LOCK),
    ) -> None:
        self.settings = settings
        self.pods = pods
        self.clock = clock
        self.mig_apply_lock = mig_apply_lock
        self.regions = RegionDirectory(settings.containers_dir, settings.resync_interval_s)
        self.alarms = SanityAlarms()
        self.collector = MonitorCollector(
            node=settings.node_name,
            pods=pods,
            regions=self.regions,
            open_nvml=open_nvml,
            alarms=self.alarms,
            clock=clock,
            legacy=settings.legacy_metrics,
        )
        self.registry = monitor_registry(self.collector)
        self.last_good_tick: float | None = None  # monotonic
        self.last_error = "no scan yet"
        self._http = ConnectionGuard(settings.connection_limits)

    def tick(self) -> TickResult:
        """One scan and one feedback pass (raises DirectoryError when the root is unreadable)."""
        self.regions.update({pod.uid for pod in self.pods.pods()}, now=self.clock.now().timestamp())
        self.alarms.forget_all_but(self.regions.loaded)
        paused = self.mig_apply_lock.exists()
        verdicts = () if paused else tuple(observe(self._feedback_targets()))
        self.last_good_tick = self.clock.monotonic()
        return TickResult(verdicts, paused)

    def _feedback_targets(self) -> list[FeedbackFields]:
        """Each loaded region's feedback fields; one that cannot be read sits this tick out."""
        targets = []
        for region in self.regions.loaded.values():
            try:
                targets.append(region.feedback())
            except RegionError as err:
                log.warning("region left out of the feedback loop this tick", error=str(err))
        return targets

    async def run(self, stop: asyncio.Event) -> None:
        """Tick every period until `stop` is set; a failing tick is logged, never fatal."""
        while not stop.is_set():
            try:
                self.tick()
            except DirectoryError as err:
                self.last_error = str(err)
                log.warning("scan failed; retrying next period", error=str(err))
            await unless_stopped(self.clock.sleep(self.settings.tick_interval_s), stop)

    async def _metrics(self, request: web.Request) -> web.Response:
        try:
            body = generate_latest(self.registry)
        except Exception as err:  # a gathering error is HTTP 500, as in HAMi
            log.exception("metrics collection failed")
            return web.Response(status=500, text=f"collecting metrics failed: {err}\n")
        response = web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression()
        return response

    async def _healthz(self, _request: web.Request) -> web.Response:
        problem = self.health_problem()
        if problem is None:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"{problem}\n")

    def health_problem(self) -> str | None:
        if self.last_good_tick is None:
            return f"not ready: {self.last_error}"
        age = self.clock.monotonic() - self.last_good_tick
        if age > HEALTHY_TICKS * self.settings.tick_interval_s:
            return f"no successful scan for {age:.0f}s: {self.last_error}"
        return None

    async def start_http(self) -> int:
        """Serve on the configured address; returns the bound port (useful with port 0)."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        return await self._http.serve(
            app, self.settings.host, self.settings.port, None, access_log=False
        )

    async def stop_http(self) -> None:
        await self._http.close()

    def close(self) -> None:
        self.regions.close()
