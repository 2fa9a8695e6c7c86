"""The chart's caller authentication for the extender: kube-scheduler's client certificate and
the CA the extender checks it against come from one Secret, each side mounts its half, and the
certificate the chart makes really passes the extender's TLS check. No NodePort by default."""

from __future__ import annotations

import base64
from pathlib import Path, PurePosixPath
from typing import Any

from pyhami.scheduler.tls import ReloadingCertificate
from pyhami.testing.certs import client_seen_by, write_serving_certificate
from pyhami.testing.scheduler_harness.config import ExtenderConfig

from .commands import scheduler_settings
from .render import Rendered, render, render_args
from .test_chart_render import env_of, extender_container, kube_scheduler_config, pyhami_argv


def _pod_spec(rendered: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = rendered.one("Deployment")["spec"]["template"]["spec"]
    return spec


def _secret_item(spec: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) of the file a container reads at `path`."""
    target = PurePosixPath(path)
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in container.get("volumeMounts", ()):
        if PurePosixPath(mount["mountPath"]) == target.parent:
            secret = volumes[mount["name"]]["secret"]
            item = next(i for i in secret["items"] if i["path"] == target.name)
            return secret["secretName"], item["key"]
    raise AssertionError(f"{container['name']}: nothing mounted for {path}")


async def test_kube_schedulers_certificate_from_the_chart_passes_the_extenders_check(
    tmp_path: Path,
) -> None:
    rendered = render("defaults")
    spec = _pod_spec(rendered)
    scheduler = next(c for c in spec["containers"] if c["name"] == "kube-scheduler")
    extender = extender_container(rendered)
    settings = scheduler_settings(pyhami_argv(extender) or [], env_of(extender))
    (entry,) = kube_scheduler_config(rendered)["extenders"]
    tls = entry["tlsConfig"]
    files = {
        "ca.crt": _secret_item(spec, extender, settings.extender_client_ca),
        "tls.crt": _secret_item(spec, scheduler, tls["certFile"]),
        "tls.key": _secret_item(spec, scheduler, tls["keyFile"]),
    }
    (secret_name,) = {name for name, _ in files.values()}
    secret = rendered.one("Secret", secret_name)
    for local, (_, key) in files.items():
        (tmp_path / local).write_bytes(base64.b64decode(secret["data"][key]))
    serving_dir = tmp_path / "serving"
    serving_dir.mkdir()
    serving = write_serving_certificate(serving_dir)
    extender_tls = ReloadingCertificate(serving.cert_file, serving.key_file, tmp_path / "ca.crt")
    local = {"certFile": str(tmp_path / "tls.crt"), "keyFile": str(tmp_path / "tls.key")}
    harness = ExtenderConfig.from_kube_scheduler_config({**entry, "tlsConfig": {**tls, **local}})
    client = harness.ssl_context()
    assert client is not None
    assert await client_seen_by(extender_tls.context, client) == "kube-scheduler"


def test_client_auth_off_opens_the_port_explicitly_and_mounts_nothing() -> None:
    rendered = render_args("--set", "scheduler.extender.clientAuth.enabled=false")
    extender = extender_container(rendered)
    settings = scheduler_settings(pyhami_argv(extender) or [], env_of(extender))
    assert settings.extender_allow_any_caller and not settings.extender_client_ca
    assert "certFile" not in kube_scheduler_config(rendered)["extenders"][0]["tlsConfig"]
    assert not rendered.of_kind("Secret")


def test_an_existing_secret_is_mounted_and_none_is_made() -> None:
    rendered = render_args("--set", "scheduler.extender.clientAuth.existingSecret=mine")
    spec = _pod_spec(rendered)
    names = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert "mine" in names
    assert not [s for s in rendered.of_kind("Secret") if "extender-client" in s["metadata"]["name"]]


def test_the_service_is_cluster_ip_unless_asked() -> None:
    service = render("defaults").one("Service", "-scheduler")
    assert service["spec"]["type"] == "ClusterIP"
    assert all("nodePort" not in port for port in service["spec"]["ports"])
    node_port = render_args("--set", "scheduler.service.type=NodePort").one(
        "Service", "-scheduler"
    )
    assert {p["nodePort"] for p in node_port["spec"]["ports"]} == {31998, 31993}
