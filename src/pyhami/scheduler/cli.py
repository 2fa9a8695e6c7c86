"""`pyhami scheduler`: HAMi's scheduler flags and environment, then run until interrupted.

Flags keep HAMi's spellings (`--http_bind`, `--cert_file`, `--node-lock-timeout`, …) so the
chart's command line works unchanged. One fix: `HAMI_NODELOCK_EXPIRE` is honoured when
`--node-lock-timeout` is not given (HAMi reads and then overwrites it with the flag's default).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from datetime import timedelta

import typer

from pyhami.cli_errors import (
    check_certificate,
    check_kubeconfig,
    check_port_free,
    fail,
    run_service,
)
from pyhami.cli_habits import GPU_POLICY_METAVAR, LogFormatOption, parse_gpu_policy
from pyhami.cli_klog import DEBUG_VERBOSITY, KlogVerbosity
from pyhami.devices.config import DeviceConfigError
from pyhami.logs import LogFormat, configure_logging
from pyhami.protocol import NodePolicy
from pyhami.scheduler.settings import (
    SchedulerSettings,
    SettingsError,
    parse_dra_mode,
    parse_go_duration,
    parse_label_selector,
    split_host_port,
)

NODE_LOCK_ENV = "HAMI_NODELOCK_EXPIRE"


def _settings(**flags: object) -> SchedulerSettings:
    lock_flag = flags.pop("node_lock_timeout")
    lock_text = str(lock_flag) if lock_flag else os.environ.get(NODE_LOCK_ENV, "5m")
    lock_what = "--node-lock-timeout" if lock_flag else NODE_LOCK_ENV
    namespace = os.environ.get("POD_NAMESPACE", "")
    writers = flags.pop("trusted_writers")
    trusted = tuple(str(t) for t in writers) if isinstance(writers, list) else ()
    namespaces = flags.pop("limit_control_namespaces")
    allowed = tuple(str(n) for n in namespaces) if isinstance(namespaces, list) else ()
    if not trusted and namespace:
        trusted = (f"system:serviceaccount:{namespace}:",)

    def duration(name: str) -> timedelta:  # a Go duration flag, named by its option
        return parse_go_duration(str(flags[name]), "--" + name.replace("_", "-"))

    return SchedulerSettings(
        device_config_file=str(flags["device_config_file"]),
        http_bind=str(flags["http_bind"]),
        cert_file=str(flags["cert_file"]),
        key_file=str(flags["key_file"]),
        scheduler_name=str(flags["scheduler_name"]),
        node_scheduler_policy=str(flags["node_scheduler_policy"]),
        gpu_scheduler_policy=str(flags["gpu_scheduler_policy"]),
        metrics_bind_address=str(flags["metrics_bind_address"]),
        node_label_selector=parse_label_selector(str(flags["node_label_selector"])),
        kube_timeout=float(str(flags["kube_timeout"])),
        node_lock_timeout=parse_go_duration(lock_text, lock_what),
        node_lock_retry_timeout=duration("node_lock_retry_timeout"),
        force_overwrite_default_scheduler=bool(flags["force_overwrite_default_scheduler"]),
        leader_elect=bool(flags["leader_elect"]),
        leader_elect_resource_name=str(flags["leader_elect_resource_name"]),
        leader_elect_resource_namespace=str(flags["leader_elect_resource_namespace"]),
        leader_elect_campaign=bool(flags["leader_elect_campaign"]),
        lease_duration=duration("leader_elect_lease_duration"),
        renew_deadline=duration("leader_elect_renew_deadline"),
        retry_period=duration("leader_elect_retry_period"),
        legacy_metrics=bool(flags["legacy_metrics"]),
        kubeconfig=os.environ.get("KUBECONFIG", ""),
        identity=os.environ.get("POD_NAME") or socket.gethostname(),
        pod_namespace=namespace,
        trusted_writers=trusted,
        limit_control_namespaces=allowed,
        dra_mode=parse_dra_mode(str(flags["dra_mode"])),
        explain_all=bool(flags["explain_all"]),
        extender_client_ca=str(flags["extender_client_ca"]),
        extender_allow_any_caller=bool(flags["extender_allow_any_caller"]),
        http_header_timeout=duration("http_header_timeout"),
        http_body_timeout=duration("http_body_timeout"),
        http_max_connections=int(str(flags["http_max_connections"])),
    )


def scheduler(  # noqa: PLR0917 - one typer option per HAMi flag
    device_config_file: str = typer.Option(
        "", "--device-config-file", help="device YAML (required)"
    ),
    http_bind: str = typer.Option("127.0.0.1:8080", "--http_bind", help="main server address"),
    cert_file: str = typer.Option("", "--cert_file", help="TLS certificate (reloaded on change)"),
    key_file: str = typer.Option("", "--key_file", help="TLS key (reloaded on change)"),
    extender_client_ca: str = typer.Option(
        "",
        "--extender-client-ca",
        help="CA bundle: /filter, /bind and /explain answer only callers whose client "
        "certificate it signed (kube-scheduler's tlsConfig certFile)",
    ),
    extender_allow_any_caller: bool = typer.Option(
        False,
        "--extender-allow-any-caller",
        help="serve /filter and /bind beyond loopback without --extender-client-ca",
    ),
    http_header_timeout: str = typer.Option(
        "30s", "--http-header-timeout", help="TLS handshake and each request head (and idle)"
    ),
    http_body_timeout: str = typer.Option("10s", "--http-body-timeout", help="each request body"),
    http_max_connections: int = typer.Option(
        512, "--http-max-connections", help="open connections per listener"
    ),
    scheduler_name: str = typer.Option(
        "", "--scheduler-name", help="schedulerName the webhook sets"
    ),
    node_scheduler_policy: NodePolicy = typer.Option(  # noqa: B008 (an enum constant)
        NodePolicy.BINPACK, "--node-scheduler-policy", help="default when a pod names none"
    ),
    gpu_scheduler_policy: str = typer.Option(
        "spread",
        "--gpu-scheduler-policy",
        parser=parse_gpu_policy,
        metavar=GPU_POLICY_METAVAR,
        help="default when a pod names none; a chain such as binpack,numa is accepted",
    ),
    metrics_bind_address: str = typer.Option(":9395", "--metrics-bind-address"),
    node_label_selector: str = typer.Option("", "--node-label-selector", help="k=v,k2=v2"),
    kube_qps: float = typer.Option(5.0, "--kube-qps", help="accepted for HAMi compatibility"),
    kube_burst: int = typer.Option(10, "--kube-burst", help="accepted for HAMi compatibility"),
    kube_timeout: float = typer.Option(
        0.0, "--kube-timeout", help="API request timeout, s (0 = none)"
    ),
    node_lock_timeout: str = typer.Option(
        "", "--node-lock-timeout", help=f"default ${NODE_LOCK_ENV} or 5m"
    ),
    node_lock_retry_timeout: str = typer.Option("28s", "--node-lock-retry-timeout"),
    force_overwrite_default_scheduler: bool = typer.Option(
        True, "--force-overwrite-default-scheduler/--no-force-overwrite-default-scheduler"
    ),
    leader_elect: bool = typer.Option(False, "--leader-elect"),
    leader_elect_resource_name: str = typer.Option("", "--leader-elect-resource-name"),
    leader_elect_resource_namespace: str = typer.Option("", "--leader-elect-resource-namespace"),
    leader_elect_campaign: bool = typer.Option(
        False,
        "--leader-elect-campaign",
        help="hold the Lease ourselves (default: follow the kube-scheduler of this pod)",
    ),
    leader_elect_lease_duration: str = typer.Option("15s", "--leader-elect-lease-duration"),
    leader_elect_renew_deadline: str = typer.Option("10s", "--leader-elect-renew-deadline"),
    leader_elect_retry_period: str = typer.Option("2s", "--leader-elect-retry-period"),
    legacy_metrics: bool = typer.Option(False, "--legacy-metrics"),
    trusted_writers: list[str] = typer.Option(  # noqa: B008
        [],
        "--trusted-annotation-writer",
        help="user (or prefix ending in ':') allowed to change scheduler-owned pod annotations",
    ),
    limit_control_namespaces: list[str] = typer.Option(  # noqa: B008
        [],
        "--allow-limit-control-namespace",
        help="namespace whose pods may set the env that controls libvgpu (repeatable)",
    ),
    dra_mode: str = typer.Option(
        "off",
        "--dra-mode",
        help="which GPU pods ask for DRA claims instead of HAMi's resources: off, selected "
        "(nodeSelector gpu.pyhami.io/mode=dra) or all",
    ),
    explain_all: bool = typer.Option(
        False, "--explain-all-nodes", help="evaluate every candidate per filter (slower)"
    ),
    debug: bool = typer.Option(False, "--debug", help="debug logs, and a traceback on failure"),
    verbosity: KlogVerbosity = 0,
    log_format: LogFormatOption = LogFormat.CONSOLE,
) -> None:
    """Run the scheduler extender, admission webhook and metrics (HAMi's `scheduler`)."""
    debug = debug or verbosity >= DEBUG_VERBOSITY
    configure_logging(debug=debug, log_format=log_format)
    del kube_qps, kube_burst  # no client-side throttle: one process, one connection pool
    try:
        settings = _settings(
            **{k: v for k, v in locals().items() if k not in ("debug", "verbosity", "log_format")}
        )
    except (SettingsError, DeviceConfigError) as err:
        fail("scheduler", str(err))
    check_certificate(settings.cert_file, settings.key_file, "--cert_file/--key_file", "scheduler")
    # both addresses are valid: the settings checked them
    for flag, address in (
        ("--http_bind", settings.http_bind),
        ("--metrics-bind-address", settings.metrics_bind_address),
    ):
        check_port_free(*split_host_port(address, flag), flag, "scheduler")
    check_kubeconfig(settings.kubeconfig or None, "scheduler")
    run_service(
        "scheduler", _run(settings), debug=debug, usage_errors=(SettingsError, DeviceConfigError)
    )


async def _run(settings: SchedulerSettings) -> None:
    from pyhami.kube import KubeClient
    from pyhami.scheduler.runtime import SchedulerProcess, load_device_config

    device_config = load_device_config(settings.device_config_file)
    timeout = settings.kube_timeout or None
    async with await KubeClient.from_kubeconfig(
        settings.kubeconfig or None, timeout_s=timeout
    ) as client:
        process = SchedulerProcess(settings, client, device_config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, process.request_stop)
        await process.run_forever()
