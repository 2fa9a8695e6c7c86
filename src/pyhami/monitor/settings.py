"""`pyhami monitor` settings from HAMi's flags and environment, checked once."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyhami.model import NodeName
from pyhami.protocol.goparse import GoDurationError, GoNumError, atoi, parse_bool, parse_duration
from pyhami.serving import ConnectionLimits

DEFAULT_RESYNC_S = 300.0  # HAMI_RESYNC_INTERVAL default 5m
TICK_S = 5.0  # HAMi's scan + feedback period


class MonitorSettingsError(ValueError):
    """A flag or environment value the monitor cannot start with; the message names it."""


def bind_address(text: str) -> tuple[str, int]:
    """`host:port` or `:port` as Go's net.Listen reads it."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise MonitorSettingsError(f"--metrics-bind-address: {text!r} is not [host]:port")
    return host.strip("[]") or "0.0.0.0", int(port)


# klog flags HAMi's binary accepts; pyhami logs through structlog and ignores them.
KLOG_FLAGS = frozenset(
    {
        "logtostderr",
        "alsologtostderr",
        "log_dir",
        "log_file",
        "log_file_max_size",
        "stderrthreshold",
        "vmodule",
        "add_dir_header",
        "skip_headers",
        "skip_log_headers",
        "one_output",
    }
)
_VALUE_FLAGS = frozenset({"metrics-bind-address", "v", "log-format"})


@dataclass(frozen=True, slots=True)
class MonitorFlags:
    metrics_bind_address: str = ":9394"
    legacy_metrics: bool = False
    verbosity: int = 0
    ignored: tuple[str, ...] = ()  # klog flags given (accepted for HAMi charts, not used)
    log_format: str = ""  # pyhami's own: console or json (empty: $PYHAMI_LOG_FORMAT, console)


def parse_flags(args: Sequence[str]) -> MonitorFlags:
    """vGPUmonitor's command line in pflag syntax: `--name=value`, `--name value`, `-v=4`,
    `-v4`, and bool flags bare or as `--legacy-metrics=true` (how HAMi's chart passes it)."""
    values: dict[str, str] = {}
    ignored: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-") or arg in ("-", "--"):
            raise MonitorSettingsError(f"unexpected argument {arg!r}")
        name, eq, value = arg.lstrip("-").partition("=")
        if not arg.startswith("--") and name.startswith("v") and len(name) > 1 and not eq:
            name, eq, value = "v", "=", name[1:]  # -v4
        if name == "legacy-metrics":
            values[name] = value if eq else "true"
        elif name in _VALUE_FLAGS or name in KLOG_FLAGS:
            if not eq:
                if not rest:
                    raise MonitorSettingsError(f"flag needs an argument: {arg}")
                value = rest.pop(0)
            if name in KLOG_FLAGS:
                ignored.append(name)
            else:
                values[name] = value
        else:
            raise MonitorSettingsError(f"unknown flag: {arg}")
    try:
        legacy = parse_bool(values.get("legacy-metrics", "false"))
    except GoNumError as err:
        raise MonitorSettingsError(f"--legacy-metrics: {err}") from err
    try:
        verbosity = atoi(values.get("v", "0"))
    except GoNumError as err:
        raise MonitorSettingsError(f"-v: {err}") from err
    log_format = values.get("log-format", "")
    if log_format not in ("", "console", "json"):
        raise MonitorSettingsError(f"--log-format: {log_format!r} is not console or json")
    return MonitorFlags(
        metrics_bind_address=values.get("metrics-bind-address", ":9394"),
        legacy_metrics=legacy,
        verbosity=verbosity,
        ignored=tuple(ignored),
        log_format=log_format,
    )


@dataclass(frozen=True, slots=True)
class MonitorSettings:
    hook_path: Path  # $HOOK_PATH; regions live under <hook_path>/containers
    node_name: NodeName
    host: str = "0.0.0.0"
    port: int = 9394
    legacy_metrics: bool = False
    kubeconfig: str | None = None
    resync_interval_s: float = DEFAULT_RESYNC_S
    tick_interval_s: float = TICK_S
    # A node port any pod can reach: slow or numerous clients must not take it over.
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)

    @property
    def containers_dir(self) -> Path:
        return self.hook_path / "containers"

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str],
        *,
        metrics_bind_address: str = ":9394",
        legacy_metrics: bool = False,
    ) -> tuple["MonitorSettings", list[str]]:
        """The settings plus warnings to log (HAMi keeps the default on a bad resync value)."""
        hook_path = environ.get("HOOK_PATH", "")
        if not hook_path:
            raise MonitorSettingsError("HOOK_PATH must be set (the HAMi-core runtime directory)")
        node = environ.get("NODE_NAME", "")
        if not node:
            raise MonitorSettingsError("NODE_NAME must be set (downward API spec.nodeName)")
        warnings = []
        resync = DEFAULT_RESYNC_S
        raw = environ.get("HAMI_RESYNC_INTERVAL", "")
        if raw:
            try:
                parsed = parse_duration(raw)
            except GoDurationError:
                parsed = 0.0
            if parsed <= 0:
                warnings.append(f"HAMI_RESYNC_INTERVAL={raw!r} is not a positive Go duration; 5m")
            else:
                resync = parsed
        host, port = bind_address(metrics_bind_address)
        settings = cls(
            hook_path=Path(hook_path),
            node_name=NodeName(node),
            host=host,
            port=port,
            legacy_metrics=legacy_metrics,
            kubeconfig=environ.get("KUBECONFIG") or None,
            resync_interval_s=resync,
        )
        return settings, warnings
