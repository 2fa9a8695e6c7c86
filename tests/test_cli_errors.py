"""The first mistakes an operator makes get one line, exit 2, naming what to do; a traceback
only with --debug. Run through `pyhami.cli.main`, the console script."""

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.config import ConfigException

from pyhami.cli import main

DEVICE_CONFIG = "nvidia:\n  resourceCountName: nvidia.com/gpu\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.err


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No KUBECONFIG, no ~/.kube/config, not in a pod."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "device-config.yaml"
    config.write_text(DEVICE_CONFIG)
    return config


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def scheduler_args(config: Path, *extra: str) -> list[str]:
    return ["scheduler", "--device-config-file", str(config), "--http_bind", "127.0.0.1:0",
            "--metrics-bind-address", "127.0.0.1:0", *extra]


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_no_kubeconfig_and_no_in_cluster_config(
    capsys: pytest.CaptureFixture[str], no_cluster: Path
) -> None:
    code, err = run(capsys, *scheduler_args(no_cluster))
    assert code == 2
    assert one_line(err).startswith("pyhami scheduler: no cluster to talk to (")
    assert "set KUBECONFIG" in err and "in-cluster config" in err


def test_debug_shows_the_traceback(no_cluster: Path) -> None:
    with pytest.raises(ConfigException):
        main(scheduler_args(no_cluster, "--debug"))


def test_a_port_in_use(capsys: pytest.CaptureFixture[str], no_cluster: Path,
                       busy_port: int) -> None:
    code, err = run(capsys, *scheduler_args(no_cluster, "--http_bind", f"127.0.0.1:{busy_port}"))
    assert code == 2
    assert one_line(err) == (
        f"pyhami scheduler: --http_bind 127.0.0.1:{busy_port}: the port is in use by another "
        "process: stop it or choose another port\n")
    monkey_env = {"HOOK_PATH": str(no_cluster.parent), "NODE_NAME": "n1"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in monkey_env.items():
            patch.setenv(name, value)
        code, err = run(capsys, "monitor", f"--metrics-bind-address=127.0.0.1:{busy_port}")
    assert code == 2 and "--metrics-bind-address" in one_line(err) and "in use" in err


def test_unreadable_or_wrong_certificate_files(
    capsys: pytest.CaptureFixture[str], no_cluster: Path
) -> None:
    missing = str(no_cluster.parent / "tls.crt")
    code, err = run(capsys, *scheduler_args(no_cluster, "--cert_file", missing,
                                            "--key_file", missing))
    assert code == 2
    assert one_line(err) == (
        f"pyhami scheduler: cannot read {missing}: No such file or directory: check "
        "--cert_file/--key_file and the mount\n")
    code, err = run(capsys, *scheduler_args(no_cluster, "--cert_file", str(no_cluster),
                                            "--key_file", str(no_cluster)))
    assert code == 2 and "are not a PEM certificate and its key" in one_line(err)
    code, err = run(capsys, *scheduler_args(no_cluster, "--cert_file", str(no_cluster)))
    assert code == 2 and "must be given together" in one_line(err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["scheduler", "--http-bind", "x"], "pyhami scheduler: No such option: --http-bind"),
        (["simulate", "--nope"], "pyhami simulate: No such option: --nope"),
        (["annotations", "decode", "--x"], "pyhami annotations decode: No such option: --x"),
        (["frobnicate"], "pyhami: No such command 'frobnicate'."),
    ],
)
def test_unknown_flags_and_commands(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, err = run(capsys, *argv)
    assert code == 2
    assert one_line(err).startswith(message) and err.rstrip().endswith("-h` lists the flags)")
