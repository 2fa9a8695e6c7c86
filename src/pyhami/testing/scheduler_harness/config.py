"""The kube-scheduler extender configuration the harness follows (that of HAMi's chart)."""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from pathlib import Path

from pyhami.model import PodView
from pyhami.protocol.goparse import parse_duration
from pyhami.testing.certs import KeyPair
from pyhami.testing.scheduler_harness.predicates import requested

# The resource names HAMi's chart lists under managedResources for NVIDIA.
HAMI_NVIDIA_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/priority",
)


@dataclass(frozen=True, slots=True)
class ManagedResource:
    name: str
    ignored_by_scheduler: bool = True


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """One `extenders[]` entry of a KubeSchedulerConfiguration."""

    url_prefix: str
    filter_verb: str = "filter"
    bind_verb: str = ""
    preempt_verb: str = ""  # kube-scheduler's to send; the harness does not preempt
    node_cache_capable: bool = False
    managed_resources: tuple[ManagedResource, ...] = ()
    ignorable: bool = False
    http_timeout_s: float = 30.0
    tls_insecure: bool = False
    tls_ca_pem: bytes | None = None
    tls_server_name: str | None = None
    # `tlsConfig.certFile`/`keyFile`: the client certificate shown to the extender.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.url_prefix.startswith(("http://", "https://")):
            raise ValueError(f"extender urlPrefix must be http(s)://..., got {self.url_prefix!r}")
        if self.http_timeout_s <= 0:
            raise ValueError(f"extender httpTimeout must be > 0, got {self.http_timeout_s}")
        if not self.filter_verb:
            raise ValueError("this harness drives filter: set filterVerb")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("extender tlsConfig needs certFile and keyFile together")

    @classmethod
    def from_kube_scheduler_config(cls, entry: object) -> ExtenderConfig:
        """Parse the camelCase YAML/JSON entry (`urlPrefix`, `tlsConfig.caData`, ...)."""
        if not isinstance(entry, dict):
            raise ValueError(f"an extenders[] entry must be an object, got {entry!r}")
        tls = entry.get("tlsConfig") or {}
        ca_pem = None
        if tls.get("caData"):
            ca_pem = base64.b64decode(tls["caData"])
        elif tls.get("caFile"):
            ca_pem = Path(tls["caFile"]).read_bytes()
        if tls.get("certData") or tls.get("keyData"):
            raise ValueError("extender tlsConfig: this harness reads certFile/keyFile, not *Data")
        url = str(entry.get("urlPrefix", ""))
        if entry.get("enableHTTPS") and url.startswith("http://"):
            url = "https://" + url[len("http://") :]
        timeout = entry.get("httpTimeout", "30s")
        return cls(
            url_prefix=url,
            filter_verb=str(entry.get("filterVerb", "")),
            bind_verb=str(entry.get("bindVerb", "")),
            preempt_verb=str(entry.get("preemptVerb", "")),
            node_cache_capable=bool(entry.get("nodeCacheCapable", False)),
            managed_resources=tuple(
                ManagedResource(str(r["name"]), bool(r.get("ignoredByScheduler", False)))
                for r in entry.get("managedResources") or ()
            ),
            ignorable=bool(entry.get("ignorable", False)),
            http_timeout_s=parse_duration(timeout) if isinstance(timeout, str) else float(timeout),
            tls_insecure=bool(tls.get("insecure", False)),
            tls_ca_pem=ca_pem,
            tls_server_name=tls.get("serverName") or None,
            tls_cert_file=Path(tls["certFile"]) if tls.get("certFile") else None,
            tls_key_file=Path(tls["keyFile"]) if tls.get("keyFile") else None,
        )

    @classmethod
    def hami_chart(
        cls,
        url_prefix: str,
        *,
        ca_pem: bytes | None = None,
        client_certificate: KeyPair | None = None,
        http_timeout_s: float = 30.0,
    ) -> ExtenderConfig:
        """The extender HAMi's chart configures (NVIDIA resources), at `url_prefix`, showing
        `client_certificate` to the extender as our chart's kube-scheduler does."""
        return cls(
            url_prefix=url_prefix,
            bind_verb="bind",
            preempt_verb="preempt",
            node_cache_capable=True,
            managed_resources=tuple(ManagedResource(n, True) for n in HAMI_NVIDIA_RESOURCES),
            http_timeout_s=http_timeout_s,
            tls_insecure=ca_pem is None and url_prefix.startswith("https://"),
            tls_ca_pem=ca_pem,
            tls_cert_file=None if client_certificate is None else client_certificate.cert_file,
            tls_key_file=None if client_certificate is None else client_certificate.key_file,
        )

    def interested_in(self, pod: PodView) -> bool:
        """kube-scheduler's IsInterested: any managed resource in any container's requests or
        limits (an extender that manages none is interested in every pod)."""
        if not self.managed_resources:
            return True
        names = {r.name for r in self.managed_resources}
        return bool(names & requested(pod).keys())

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.url_prefix.startswith("https://"):
            return None
        if self.tls_insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(
                cadata=self.tls_ca_pem.decode() if self.tls_ca_pem else None
            )
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context
