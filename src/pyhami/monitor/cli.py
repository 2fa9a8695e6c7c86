"""`pyhami monitor`: HAMi's vGPUmonitor flags and environment (ops.md §1.1).

Startup follows HAMi: check HOOK_PATH and NODE_NAME, connect to the API server, wait for the
pod cache to sync (failure aborts), then serve `/metrics` and run the 5 s loop until SIGINT or
SIGTERM. Differences: a startup failure exits 1 (HAMi exits 0), and a node without NVML keeps
serving container metrics without host metrics (HAMi's container exits).
"""

import asyncio
import contextlib
import logging
import os
import signal
from typing import Annotated

import structlog
import typer

from pyhami.kube import KubeClient, SystemClock
from pyhami.monitor.host import NvmlOpener
from pyhami.monitor.pods import InformerPodSource
from pyhami.monitor.service import MonitorService
from pyhami.monitor.settings import MonitorSettings, MonitorSettingsError
from pyhami.nvml import NvmlUnavailableError, open_nvml

log = structlog.get_logger("pyhami.monitor")

SYNC_TIMEOUT_S = 60.0


def _nvml_opener() -> NvmlOpener | None:
    try:
        open_nvml().close()
    except NvmlUnavailableError as err:
        log.warning("no NVML on this node: serving without host metrics", error=str(err))
        return None
    return open_nvml


async def run_monitor(settings: MonitorSettings, open_nvml: NvmlOpener | None) -> None:
    client = await KubeClient.from_kubeconfig(settings.kubeconfig)
    async with client:
        pods = InformerPodSource(client, settings.node_name, settings.resync_interval_s)
        pods.informer.start()
        try:
            try:
                await pods.informer.wait_synced(SYNC_TIMEOUT_S)
            except TimeoutError as err:
                raise RuntimeError(
                    f"pod cache did not sync within {SYNC_TIMEOUT_S:.0f}s: "
                    f"{pods.informer.stats.last_error or 'no answer'}"
                ) from err
            settings.containers_dir.mkdir(parents=True, exist_ok=True)
            service = MonitorService(settings, pods, open_nvml, SystemClock())
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            port = await service.start_http()
            log.info(
                "serving", address=f"{settings.host}:{port}", hook_path=str(settings.hook_path)
            )
            try:
                await service.run(stop)
            finally:
                await service.stop_http()
                service.close()
        finally:
            await pods.informer.stop()


def monitor(
    metrics_bind_address: Annotated[
        str, typer.Option("--metrics-bind-address", help="TCP address of the metrics server")
    ] = ":9394",
    legacy_metrics: Annotated[
        bool, typer.Option("--legacy-metrics", help="also emit the pre-v2.9 metric names")
    ] = False,
    verbosity: Annotated[int, typer.Option("-v", "--v", help="log verbosity (klog style)")] = 0,
) -> None:
    """The vGPU monitor: container usage from the shared regions, priority feedback."""
    level = logging.DEBUG if verbosity >= 5 else logging.INFO
    logging.basicConfig(level=level)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    flags = {
        "metrics-bind-address": metrics_bind_address,
        "legacy-metrics": legacy_metrics,
        "v": verbosity,
    }
    for name, value in flags.items():
        log.info(f'FLAG: --{name}="{value}"')
    try:
        settings, warnings = MonitorSettings.from_environment(
            os.environ, metrics_bind_address=metrics_bind_address, legacy_metrics=legacy_metrics
        )
    except MonitorSettingsError as err:
        typer.echo(f"pyhami monitor: {err}", err=True)
        raise typer.Exit(2) from err
    for warning in warnings:
        log.warning(warning)
    with contextlib.suppress(KeyboardInterrupt):
        try:
            asyncio.run(run_monitor(settings, _nvml_opener()))
        except Exception as err:  # startup failures: one clear line, exit 1
            typer.echo(f"pyhami monitor: {err}", err=True)
            raise typer.Exit(1) from err
