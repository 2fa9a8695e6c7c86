"""kubectl habits on every command: -h, --version, `-f -`, -n, -o, readable help at 100
columns, GPU-policy chains, the monitor's own options in its help."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from pyhami import __version__
from pyhami.cli import app

CLUSTER = Path(__file__).parent / "sim" / "fixtures" / "cluster.yaml"
runner = CliRunner()


def _commands(group: typer.core.TyperGroup, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], object]]:
    ctx = typer.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*path, name), command
        if isinstance(command, typer.core.TyperGroup):
            yield from _commands(command, (*path, name))


ALL_COMMANDS = [path for path, _ in _commands(typer.main.get_command(app))]


def test_every_command_is_covered() -> None:
    assert {"scheduler", "device-plugin", "monitor", "demo", "simulate", "explain"} <= {
        path[0] for path in ALL_COMMANDS}
    assert ("annotations", "decode") in ALL_COMMANDS


@pytest.mark.parametrize("path", [(), *ALL_COMMANDS], ids=lambda p: " ".join(p) or "pyhami")
def test_help_and_version_on_every_command(path: tuple[str, ...]) -> None:
    helped = runner.invoke(app, [*path, "-h"], env={"COLUMNS": "100"})
    assert helped.exit_code == 0, helped.output
    text = helped.stdout
    assert "<bool>" not in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    for name in path:
        command = command.get_command(ctx, name)  # type: ignore[attr-defined]
    for param in command.params:
        for flag in param.opts:
            if flag.startswith("--"):
                assert flag in text, f"{flag} missing or cut in the help of {path}"
    versioned = runner.invoke(app, [*path, "--version"])
    assert versioned.exit_code == 0 and versioned.stdout == f"pyhami {__version__}\n"


def test_monitor_help_lists_its_options_and_environment() -> None:
    text = runner.invoke(app, ["monitor", "--help"], env={"COLUMNS": "100"}).stdout
    for line in ("--metrics-bind-address ADDR", "--legacy-metrics[=BOOL]", "-v=N",
                 "HOOK_PATH", "NODE_NAME", "KUBECONFIG", "HAMI_RESYNC_INTERVAL"):
        assert line in text


def test_choices_are_listed_in_help() -> None:
    text = runner.invoke(app, ["simulate", "-h"], env={"COLUMNS": "100"}).stdout
    assert "<binpack|spread>" in text
    assert "binpack|spread|topology-aware|mutex|numa[,...]" in text
    assert "-o, --output <json|yaml|table|wide>" in text
    text = runner.invoke(app, ["scheduler", "-h"], env={"COLUMNS": "100"}).stdout
    assert "--node-scheduler-policy <binpack|spread>" in text


def test_files_from_stdin() -> None:
    text = CLUSTER.read_text()
    result = runner.invoke(app, ["simulate", "-f", "-", "--now", "1"], input=text)
    assert result.exit_code == 0, result.output
    assert [p["name"] for p in json.loads(result.stdout)["pods"]] == ["notebook", "pair",
                                                                      "too-big"]
    result = runner.invoke(app, ["explain", "too-big", "-f", "-"], input=text)
    assert result.exit_code == 0 and "no node fits" in result.stdout


def test_namespace_flag() -> None:
    result = runner.invoke(app, ["explain", "notebook", "-n", "ml", "-f", str(CLUSTER)])
    assert result.exit_code == 0 and result.stdout.startswith("pod ml/notebook\n")
    result = runner.invoke(app, ["explain", "notebook", "-n", "default", "-f", str(CLUSTER)])
    assert result.exit_code == 2 and "no pending pod 'default/notebook'" in result.stderr
    result = runner.invoke(app, ["simulate", "-n", "ml", "-f", str(CLUSTER), "--now", "1"])
    assert [p["name"] for p in json.loads(result.stdout)["pods"]] == ["notebook"]


def test_output_formats() -> None:
    base = ["explain", "default/too-big", "-f", str(CLUSTER)]
    as_json = json.loads(runner.invoke(app, [*base, "-o", "json"]).stdout)
    assert as_json["pod"] == "default/too-big" and as_json["outcome"] == "unschedulable"
    gpu_a = next(n for n in as_json["nodes"] if n["node"] == "gpu-a")
    assert gpu_a["reasons"] == {"CardInsufficientMemory": 2}
    assert [c["id"] for c in gpu_a["cardStates"]] == ["GPU-a100-0", "GPU-a100-1"]
    assert yaml.safe_load(runner.invoke(app, [*base, "-o", "yaml"]).stdout) == as_json
    table = runner.invoke(app, [*base, "-o", "table"]).stdout
    wide = runner.invoke(app, [*base, "-o", "wide"]).stdout
    assert "NUMA 1, tried #1): rejected: CardInsufficientMemory" in wide
    assert "NUMA" not in table and "rejected: CardInsufficientMemory" in table
    simulated = ["simulate", "-f", str(CLUSTER), "--now", "7"]
    data = json.loads(runner.invoke(app, [*simulated, "-o", "json"]).stdout)
    assert yaml.safe_load(runner.invoke(app, [*simulated, "-o", "yaml"]).stdout) == data
    assert "hami.io/vgpu-time: 7" in runner.invoke(app, [*simulated, "-o", "wide"]).stdout
    decoded = runner.invoke(app, ["annotations", "decode", "hami.io/vgpu-devices-allocated",
                                  "GPU-1,NVIDIA,1000,10:;", "-o", "yaml"])
    assert yaml.safe_load(decoded.stdout)[0][0]["uuid"] == "GPU-1"


def test_gpu_policy_chains_are_accepted_and_typos_named() -> None:
    result = runner.invoke(app, ["simulate", "-f", str(CLUSTER), "--gpu-policy",
                                 "binpack, numa", "--now", "1"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["simulate", "-f", str(CLUSTER), "--gpu-policy", "binpak"])
    assert result.exit_code == 2 and "'binpak' is not one of binpack, spread" in result.output
    result = runner.invoke(app, ["scheduler", "--gpu-scheduler-policy", "spread,nuam"])
    assert result.exit_code == 2 and "'nuam' is not one of" in result.output
