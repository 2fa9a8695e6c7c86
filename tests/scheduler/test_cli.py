"""`pyhami scheduler` flag handling (the process itself is run by the leader-election test)."""

from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.scheduler.cli import NODE_LOCK_ENV, _settings

FLAGS = {
    "device_config_file": "/etc/device-config.yaml",
    "http_bind": "127.0.0.1:8080",
    "cert_file": "",
    "key_file": "",
    "scheduler_name": "hami-scheduler",
    "node_scheduler_policy": "binpack",
    "gpu_scheduler_policy": "spread",
    "metrics_bind_address": ":9395",
    "node_label_selector": "gpu=on",
    "kube_timeout": 0.0,
    "node_lock_timeout": "",
    "node_lock_retry_timeout": "28s",
    "force_overwrite_default_scheduler": True,
    "leader_elect": False,
    "leader_elect_resource_name": "",
    "leader_elect_resource_namespace": "",
    "leader_elect_campaign": False,
    "leader_elect_lease_duration": "15s",
    "leader_elect_renew_deadline": "10s",
    "leader_elect_retry_period": "2s",
    "legacy_metrics": False,
    "trusted_writers": [],
    "limit_control_namespaces": ["gpu-lab"],
    "dra_mode": "selected",
    "explain_all": False,
    "extender_client_ca": "",
    "extender_allow_any_caller": False,
    "http_header_timeout": "30s",
    "http_body_timeout": "10s",
    "http_max_connections": 512,
}


def test_the_lock_expiry_env_is_honoured_unless_the_flag_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NODE_LOCK_ENV, "10m")
    monkeypatch.setenv("POD_NAMESPACE", "hami")
    settings = _settings(**FLAGS)
    assert settings.node_lock_timeout == timedelta(minutes=10)
    assert settings.node_label_selector == {"gpu": "on"}
    assert settings.trusted_writers == ("system:serviceaccount:hami:",)
    assert settings.limit_control_namespaces == ("gpu-lab",)
    assert settings.dra_mode == "selected"
    assert _settings(**{**FLAGS, "node_lock_timeout": "1m"}).node_lock_timeout == timedelta(
        minutes=1
    )


def test_bad_flags_exit_2_with_the_reason() -> None:
    result = CliRunner().invoke(app, ["scheduler"])
    assert result.exit_code == 2
    assert "--device-config-file is required" in result.output
    result = CliRunner().invoke(app, ["scheduler", "--device-config-file", "/nope"])
    assert result.exit_code == 2 and "cannot read /nope" in result.output


def test_an_unknown_dra_mode_is_refused_naming_the_choices(tmp_path: Path) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia: {}\n")
    result = CliRunner().invoke(
        app, ["scheduler", "--device-config-file", str(config), "--dra-mode", "some"]
    )
    assert result.exit_code == 2
    assert "--dra-mode 'some': choose one of off, selected, all" in result.output
