"""`pyhami device-plugin`: flags, refused options and startup errors that say what to fix."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.deviceplugin.cli import load_config
from pyhami.deviceplugin.config import ConfigError, VgpuConfig
from pyhami.nvml import driver_available

runner = CliRunner(env={"COLUMNS": "200", "TERMINAL_WIDTH": "200", "NO_COLOR": "1"})


def said(result: Result) -> str:
    """The command's output as one line, without rich's box drawing."""
    return " ".join(result.output.replace("│", " ").split())


def test_help_lists_hami_flags() -> None:
    result = runner.invoke(app, ["device-plugin", "--help"])
    assert result.exit_code == 0
    for flag in (
        "--node-name",
        "--device-split-count",
        "--device-memory-scaling",
        "--device-cores-scaling",
        "--config-file",
        "--kubelet-socket",
        "--gdrcopy-enabled",
        "--gds-enabled",
        "--mofed-enabled",
        "--imex-channel-ids",
        "--imex-required",
    ):
        assert flag in said(result)


@pytest.mark.parametrize(
    "args, hint",
    [
        (["--mig-strategy", "mixed"], "--mig-strategy"),
        (["--device-list-strategy", "cdi-cri"], "--device-list-strategy"),
        (["--device-id-strategy", "index"], "--device-id-strategy"),
    ],
)
def test_unsupported_options_are_refused(args: list[str], hint: str) -> None:
    result = runner.invoke(app, ["device-plugin", "--node-name", "n", *args])
    assert result.exit_code == 2
    assert "not supported by pyhami" in said(result)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--imex-channel-ids", "1"], "--imex-channel-ids: only channel 0 is supported, got '1'"),
        (
            ["--imex-channel-ids", "0", "--imex-required"],
            "--imex-required: IMEX channel 0 has no character device at "
            "/dev/nvidia-caps-imex-channels/channel0 or "
            "{root}/dev/nvidia-caps-imex-channels/channel0",
        ),
    ],
)
def test_imex_channels_that_cannot_be_served_stop_the_start(
    args: list[str], message: str, tmp_path: Path
) -> None:
    result = runner.invoke(
        app,
        [
            "device-plugin",
            "--node-name",
            "n",
            "--node-config-file",
            str(tmp_path / "none.json"),
            "--nvidia-dev-root",
            str(tmp_path),
            *args,
        ],
    )
    assert result.exit_code == 2
    assert message.format(root=tmp_path) in said(result)


def test_node_name_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("NodeName", raising=False)
    result = runner.invoke(app, ["device-plugin"])
    assert result.exit_code == 2
    assert "NODE_NAME" in said(result)


def test_bad_config_file_exits_2_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "device-config.yaml"
    bad.write_text("nvidia:\n  deviceSplitCount: [1]\n")
    result = runner.invoke(
        app,
        [
            "device-plugin",
            "--node-name",
            "n",
            "--config-file",
            str(bad),
            "--node-config-file",
            str(tmp_path / "none.json"),
        ],
    )
    assert result.exit_code == 2
    assert "device-config.yaml" in said(result)


def test_no_driver_exits_1_with_the_fix(tmp_path: Path) -> None:
    if driver_available():
        pytest.skip("a driver is present here")
    result = runner.invoke(
        app, ["device-plugin", "--node-name", "n", "--node-config-file", str(tmp_path / "x.json")]
    )
    assert result.exit_code == 1
    assert "NVIDIA runtime" in said(result)


def test_flags_are_defaults_that_files_override(tmp_path: Path) -> None:
    yaml_file = tmp_path / "device-config.yaml"
    yaml_file.write_text("nvidia:\n  deviceSplitCount: 6\n")
    node_file = tmp_path / "config.json"
    node_file.write_text('{"nodeconfig": [{"name": "n", "devicememoryscaling": 1.5}]}')
    flags = VgpuConfig(device_split_count=3, device_core_scaling=2.0)
    config = load_config(flags, yaml_file, node_file, "n")
    assert (config.device_split_count, config.device_core_scaling) == (6, 2.0)
    assert config.device_memory_scaling == 1.5
    assert load_config(flags, None, node_file, "other").device_split_count == 3
    node_file.write_text('{"nodeconfig": [{"name": "n", "operatingmode": "mig"}]}')
    with pytest.raises(ConfigError, match="dynamic MIG"):
        load_config(flags, None, node_file, "n")


def test_without_a_driver_and_fail_on_init_error_false_it_idles_until_sigterm(
    tmp_path: Path,
) -> None:
    if driver_available():
        pytest.skip("a driver is present here")
    command = [
        sys.executable,
        "-c",
        "from pyhami.cli import main; main()",
        "device-plugin",
        "--node-name",
        "n",
        "--no-fail-on-init-error",
        "--node-config-file",
        str(tmp_path / "none.json"),
    ]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as process:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert "NVIDIA runtime" in first
        assert "idling" in process.stderr.readline()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
