"""`pyhami scheduler` settings: HAMi's flags and environment, validated once at start-up."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from pyhami.protocol.goparse import GoDurationError, parse_duration
from pyhami.scheduler.dra_admission import DRA_MODES, DraMode


class SettingsError(ValueError):
    """A flag or environment value that cannot be used; the message names it."""


def parse_go_duration(text: str, what: str) -> timedelta:
    """A flag's Go duration (`5m`, `28s`, `1h30m`, `100ms`, `0`); negative ones are refused."""
    try:
        seconds = parse_duration(text)
    except GoDurationError as err:
        raise SettingsError(f"{what}: {err} (use Go form such as 5m, 28s)") from err
    if seconds < 0:
        raise SettingsError(f"{what}: invalid duration {text!r}: it must not be negative")
    return timedelta(seconds=seconds)


def parse_label_selector(text: str) -> dict[str, str]:
    """`k=v,k2=v2` (HAMi's `--node-label-selector`)."""
    selector: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--node-label-selector: {item!r} is not key=value")
        selector[key.strip()] = value.strip()
    return selector


def parse_dra_mode(text: str) -> DraMode:
    for mode in DRA_MODES:
        if text == mode:
            return mode
    raise SettingsError(f"--dra-mode {text!r}: choose one of {', '.join(DRA_MODES)}")


def split_host_port(address: str, what: str) -> tuple[str, int]:
    """`host:port` or `:port` (all interfaces), as Go's net.Listen takes it."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"{what}: {address!r} is not host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """Everything `pyhami scheduler` is told; names follow HAMi's flags."""

    device_config_file: str
    http_bind: str = "127.0.0.1:8080"
    cert_file: str = ""
    key_file: str = ""
    scheduler_name: str = ""
    node_scheduler_policy: str = "binpack"
    gpu_scheduler_policy: str = "spread"
    metrics_bind_address: str = ":9395"
    node_label_selector: Mapping[str, str] = field(default_factory=dict)
    kube_timeout: float = 0.0
    node_lock_timeout: timedelta = timedelta(minutes=5)
    node_lock_retry_timeout: timedelta = timedelta(seconds=28)
    force_overwrite_default_scheduler: bool = True
    leader_elect: bool = False
    leader_elect_resource_name: str = ""
    leader_elect_resource_namespace: str = ""
    # Campaign for the Lease ourselves instead of following the co-located kube-scheduler's.
    leader_elect_campaign: bool = False
    lease_duration: timedelta = timedelta(seconds=15)
    renew_deadline: timedelta = timedelta(seconds=10)
    retry_period: timedelta = timedelta(seconds=2)
    legacy_metrics: bool = False
    kubeconfig: str = ""
    identity: str = ""
    pod_namespace: str = ""
    trusted_writers: tuple[str, ...] = ()
    # Namespaces whose pods may set the env that controls libvgpu (limits, CUDA_DISABLE_CONTROL).
    limit_control_namespaces: tuple[str, ...] = ()
    # Which GPU pods the webhook turns into DRA claims: off, selected (nodeSelector
    # gpu.pyhami.io/mode=dra) or all.
    dra_mode: DraMode = "off"
    # Evaluate every candidate on every filter, for complete events and /explain.
    explain_all: bool = False
    # How long /filter waits for the caches to sync before answering with an error.
    sync_wait: timedelta = timedelta(seconds=25)
    # Callers of /filter, /bind and /explain must show a certificate signed by this bundle.
    extender_client_ca: str = ""
    # Serve those routes to anyone beyond loopback without a client CA (explicit opt-out).
    extender_allow_any_caller: bool = False
    # Per-connection limits of both listeners (serving/listener.py).
    http_header_timeout: timedelta = timedelta(seconds=30)
    http_body_timeout: timedelta = timedelta(seconds=10)
    http_max_connections: int = 512

    def __post_init__(self) -> None:
        if not self.device_config_file:
            raise SettingsError("--device-config-file is required")
        if self.node_scheduler_policy not in ("binpack", "spread"):
            raise SettingsError(
                f"--node-scheduler-policy must be binpack or spread, "
                f"got {self.node_scheduler_policy!r}"
            )
        if bool(self.cert_file) != bool(self.key_file):
            raise SettingsError("--cert_file and --key_file must be given together")
        host, _ = split_host_port(self.http_bind, "--http_bind")
        split_host_port(self.metrics_bind_address, "--metrics-bind-address")
        if self.extender_client_ca and not self.tls:
            raise SettingsError(
                "--extender-client-ca needs --cert_file and --key_file (client certificates "
                "are only seen over TLS)"
            )
        unguarded = not self.extender_client_ca and not self.extender_allow_any_caller
        if unguarded and not is_loopback(host):
            raise SettingsError(
                f"--http_bind {self.http_bind} is reachable beyond this host, and nothing says "
                "who may call /filter and /bind: give --extender-client-ca FILE (the CA of "
                "kube-scheduler's client certificate), or --extender-allow-any-caller to "
                "accept anyone who reaches the port"
            )
        if self.http_header_timeout <= timedelta(0) or self.http_body_timeout <= timedelta(0):
            raise SettingsError("--http-header-timeout and --http-body-timeout must be positive")
        if self.http_max_connections < 1:
            raise SettingsError(
                f"--http-max-connections must be at least 1, got {self.http_max_connections}"
            )
        if self.leader_elect:
            if not self.leader_elect_resource_name or not self.leader_elect_resource_namespace:
                raise SettingsError(
                    "--leader-elect needs --leader-elect-resource-name and "
                    "--leader-elect-resource-namespace"
                )
            if not self.identity:
                raise SettingsError("--leader-elect needs an identity (hostname or POD_NAME)")

    @property
    def tls(self) -> bool:
        return bool(self.cert_file)
