"""`pyhami monitor`: HAMi's vGPUmonitor flags and environment.

Startup follows HAMi: check HOOK_PATH and NODE_NAME, connect to the API server, wait for the
pod cache to sync (failure aborts), then serve `/metrics` and run the 5 s loop until SIGINT or
SIGTERM. Differences: a startup failure exits 1 (HAMi exits 0), and a node without NVML keeps
serving container metrics without host metrics (HAMi's container exits).
"""

import asyncio
import os
import signal

import structlog
import typer

from pyhami.cli_errors import check_kubeconfig, check_port_free, fail, run_service
from pyhami.kube import KubeClient, SystemClock
from pyhami.logs import LOG_FORMAT_ENV, LogFormat, configure_logging
from pyhami.monitor.host import NvmlOpener
from pyhami.monitor.pods import InformerPodSource
from pyhami.monitor.service import MonitorService
from pyhami.monitor.settings import MonitorSettings, MonitorSettingsError, parse_flags
from pyhami.nvml import NvmlUnavailableError, open_nvml

log = structlog.get_logger("pyhami.monitor")

SYNC_TIMEOUT_S = 60.0
DEBUG_VERBOSITY = 5  # HAMi's monitor logs at debug from -v=5


def _nvml_opener() -> NvmlOpener | None:
    try:
        open_nvml().close()
    except NvmlUnavailableError as err:
        log.warning("no NVML on this node: serving without host metrics", error=str(err))
        return None
    return open_nvml


async def run_monitor(settings: MonitorSettings, open_nvml: NvmlOpener | None) -> None:
    async with await KubeClient.from_kubeconfig(settings.kubeconfig) as client:
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


# pflag syntax (`--legacy-metrics=true`, `-v=4`) is parsed by `parse_flags`, not by Click.
MONITOR_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def monitor(ctx: typer.Context) -> None:
    """The vGPU monitor: container usage from the shared regions, priority feedback.

    \b
    Options (pflag syntax, as HAMi's vGPUmonitor takes them):
      --metrics-bind-address ADDR   where /metrics listens  [default: :9394]
      --legacy-metrics[=BOOL]       also export the pre-v2.9 metric names
      -v=N                          log verbosity (5 or more: debug logs, tracebacks)
      --log-format=console|json     one line per record (default: $PYHAMI_LOG_FORMAT, console)
      klog flags (--logtostderr, --log_file, ...) are accepted and ignored

    \b
    Environment:
      HOOK_PATH              libvgpu's directory on the host (required)
      NODE_NAME              this node (required)
      KUBECONFIG             kubeconfig file (default: ~/.kube/config, else in-cluster)
      HAMI_RESYNC_INTERVAL   pod cache resync  [default: 5m]
    """
    try:
        flags = parse_flags(ctx.args)
        settings, warnings = MonitorSettings.from_environment(
            os.environ,
            metrics_bind_address=flags.metrics_bind_address,
            legacy_metrics=flags.legacy_metrics,
        )
    except MonitorSettingsError as err:
        fail("monitor", str(err))
    log_format = flags.log_format or os.environ.get(LOG_FORMAT_ENV) or LogFormat.CONSOLE
    if log_format not in tuple(LogFormat):
        fail("monitor", f"{LOG_FORMAT_ENV}: {log_format!r} is not console or json")
    check_port_free(settings.host, settings.port, "--metrics-bind-address", "monitor")
    check_kubeconfig(settings.kubeconfig, "monitor")
    configure_logging(debug=flags.verbosity >= DEBUG_VERBOSITY, log_format=log_format)
    log.info(f'FLAG: --metrics-bind-address="{flags.metrics_bind_address}"')
    log.info(f'FLAG: --legacy-metrics="{str(flags.legacy_metrics).lower()}"')
    log.info(f'FLAG: --v="{flags.verbosity}"')
    for warning in warnings:
        log.warning(warning)
    if flags.ignored:
        log.info("klog flags accepted and ignored", flags=list(flags.ignored))
    run_service(
        "monitor",
        run_monitor(settings, _nvml_opener()),
        debug=flags.verbosity >= DEBUG_VERBOSITY,
        debug_hint=f"-v={DEBUG_VERBOSITY}",
    )
