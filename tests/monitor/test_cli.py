"""`pyhami monitor` flags and environment as HAMi's vGPUmonitor names them."""

import pytest
import typer
from typer.testing import CliRunner

from pyhami.monitor.cli import MONITOR_CONTEXT, monitor
from pyhami.monitor.settings import (
    MonitorFlags,
    MonitorSettings,
    MonitorSettingsError,
    bind_address,
    parse_flags,
)

app = typer.Typer()
app.command(context_settings=MONITOR_CONTEXT)(monitor)


def test_help_names_hamis_flags() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in ("--metrics-bind-address", "--legacy-metrics", "HOOK_PATH", "NODE_NAME"):
        assert flag in result.output


@pytest.mark.parametrize(
    "args, want",
    [
        ([], MonitorFlags()),
        (["--legacy-metrics"], MonitorFlags(legacy_metrics=True)),
        (["--legacy-metrics=true", "-v=4"], MonitorFlags(legacy_metrics=True, verbosity=4)),
        (["--legacy-metrics=False"], MonitorFlags()),
        (
            ["--metrics-bind-address", ":9999", "--v", "5"],
            MonitorFlags(metrics_bind_address=":9999", verbosity=5),
        ),
        (
            ["--metrics-bind-address=127.0.0.1:1", "-v2"],
            MonitorFlags(metrics_bind_address="127.0.0.1:1", verbosity=2),
        ),
        (
            ["--logtostderr=true", "--log_file", "/x"],
            MonitorFlags(ignored=("logtostderr", "log_file")),
        ),
    ],
)
def test_pflag_syntax(args: list[str], want: MonitorFlags) -> None:
    assert parse_flags(args) == want


@pytest.mark.parametrize(
    "args, message",
    [
        (["--legacy-metrics=maybe"], "--legacy-metrics"),
        (["-v=lots"], "-v"),
        (["--metrics-bind-address"], "needs an argument"),
        (["--port=1"], "unknown flag: --port=1"),
        (["serve"], "unexpected argument"),
    ],
)
def test_bad_flags_are_named(args: list[str], message: str) -> None:
    with pytest.raises(MonitorSettingsError, match=message):
        parse_flags(args)
    result = CliRunner().invoke(app, args, env={"HOOK_PATH": "/h", "NODE_NAME": "n"})
    assert result.exit_code == 2 and message in result.output


@pytest.mark.parametrize(
    "env, message",
    [
        ({"NODE_NAME": "n1"}, "HOOK_PATH must be set"),
        ({"HOOK_PATH": "/usr/local/vgpu"}, "NODE_NAME must be set"),
    ],
)
def test_required_environment(env: dict[str, str], message: str) -> None:
    result = CliRunner().invoke(app, [], env={"HOOK_PATH": "", "NODE_NAME": "", **env})
    assert result.exit_code == 2
    assert message in result.output


def test_bad_bind_address_is_refused() -> None:
    result = CliRunner().invoke(
        app,
        ["--metrics-bind-address", "nine"],
        env={"HOOK_PATH": "/usr/local/vgpu", "NODE_NAME": "n1"},
    )
    assert result.exit_code == 2 and "not [host]:port" in result.output


def test_settings_from_environment() -> None:
    settings, warnings = MonitorSettings.from_environment(
        {
            "HOOK_PATH": "/usr/local/vgpu",
            "NODE_NAME": "gpu-1",
            "HAMI_RESYNC_INTERVAL": "1m30s",
            "KUBECONFIG": "/k",
        },
        metrics_bind_address="127.0.0.1:9999",
        legacy_metrics=True,
    )
    assert warnings == []
    assert str(settings.containers_dir) == "/usr/local/vgpu/containers"
    assert (settings.host, settings.port, settings.legacy_metrics) == ("127.0.0.1", 9999, True)
    assert settings.resync_interval_s == 90 and settings.kubeconfig == "/k"
    assert settings.tick_interval_s == 5


def test_bad_resync_interval_warns_and_keeps_five_minutes() -> None:
    settings, warnings = MonitorSettings.from_environment(
        {"HOOK_PATH": "/h", "NODE_NAME": "n", "HAMI_RESYNC_INTERVAL": "soon"}
    )
    assert settings.resync_interval_s == 300 and "HAMI_RESYNC_INTERVAL" in warnings[0]


@pytest.mark.parametrize(
    "text, want",
    [(":9394", ("0.0.0.0", 9394)), ("127.0.0.1:80", ("127.0.0.1", 80)), ("[::1]:9", ("::1", 9))],
)
def test_bind_addresses(text: str, want: tuple[str, int]) -> None:
    assert bind_address(text) == want
    with pytest.raises(MonitorSettingsError):
        bind_address("host:99999")
