"""One log format for every component: structlog's and the standard library's records (aiohttp's
access log included) on one handler, console or JSON, one line each, no Python reprs."""

import asyncio
import io
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Coroutine, Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import structlog
from typer.testing import CliRunner

from pyhami.cli import app, main
from pyhami.logs import LogFormat, configure_logging
from pyhami.testing import FakeKubeAPIServer


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root, access = logging.getLogger(), logging.getLogger("aiohttp.access")
    handlers, level, access_level = root.handlers[:], root.level, access.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    access.setLevel(access_level)
    structlog.reset_defaults()


def emit() -> None:
    structlog.get_logger("pyhami.test").info("region refused", detail='it\'s "odd" = bad', n=3)
    logging.getLogger("aiohttp.access").info('127.0.0.1 "GET /metrics HTTP/1.1" 200')
    structlog.get_logger("pyhami.test").debug("only with debug")
    logging.getLogger("kubernetes_asyncio.rest").debug("a response body")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("pyhami.test").exception("failed")


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_from_structlog_and_the_standard_library() -> None:
    out = io.StringIO()
    configure_logging(debug=True, log_format=LogFormat.JSON, stream=out)
    emit()
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["logger"], r["level"], r["event"]) for r in records] == [
        ("pyhami.test", "info", "region refused"),
        ("aiohttp.access", "info", '127.0.0.1 "GET /metrics HTTP/1.1" 200'),
        ("pyhami.test", "debug", "only with debug"),
        ("pyhami.test", "error", "failed"),
    ], "kubernetes-asyncio's debug stays off"
    assert records[0]["detail"] == 'it\'s "odd" = bad' and records[0]["n"] == 3
    assert records[0]["timestamp"].endswith("Z")
    assert "ValueError: boom" in records[3]["exception"]


@pytest.mark.usefixtures("restore_logging")
def test_console_lines_quote_like_json_not_like_python() -> None:
    out = io.StringIO()
    configure_logging(debug=False, stream=out)
    emit()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, (
        "no debug records (nor a line per HTTP request) without debug, and the traceback is "
        "one field"
    )
    first = lines[0].split(" ", 1)[1]
    assert first == ('INFO    pyhami.test: region refused detail="it\'s \\"odd\\" = bad" n=3')
    assert lines[1].split(" ", 1)[1].startswith("ERROR   pyhami.test: failed exception=")


@pytest.mark.usefixtures("restore_logging")
def test_structlog_follows_the_standard_library_levels_set_after_configuring() -> None:
    """One level decides for both kinds of logger, both ways: the demo quiets everything with
    one setLevel, and one logger's debug lines can be turned on without the others'."""
    out = io.StringIO()
    configure_logging(debug=False, stream=out)
    logging.getLogger("pyhami.chatty").setLevel(logging.DEBUG)
    structlog.get_logger("pyhami.chatty").debug("shown: its logger is at DEBUG")
    structlog.get_logger("pyhami.test").debug("hidden: the root is at INFO")
    logging.getLogger().setLevel(logging.WARNING)
    structlog.get_logger("pyhami.test").info("hidden: the root is at WARNING now")
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["DEBUG   pyhami.chatty: shown: its logger is at DEBUG"]


def test_bad_log_formats_are_refused() -> None:
    result = CliRunner().invoke(app, ["scheduler", "--log-format", "xml"])
    assert result.exit_code == 2 and "--log-format" in result.output
    monitor = CliRunner().invoke(
        app, ["monitor", "--log-format=xml"], env={"HOOK_PATH": "/h", "NODE_NAME": "n"}
    )
    assert monitor.exit_code == 2 and "--log-format: 'xml' is not console or json" in (
        monitor.output
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_scheduler_process_logs_json_lines(tmp_path: Path) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  resourceCountName: nvidia.com/gpu\n")
    async with FakeKubeAPIServer() as api:
        env = {
            **os.environ,
            "KUBECONFIG": str(api.write_kubeconfig(tmp_path / "kubeconfig")),
            "PYHAMI_LOG_FORMAT": "json",
        }
        port = _free_port()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from pyhami.cli import main; main()",
            "scheduler",
            "--device-config-file",
            str(config),
            "--http_bind",
            f"127.0.0.1:{port}",
            "--metrics-bind-address",
            f"127.0.0.1:{_free_port()}",
            "-v=4",
            env=env,
            stderr=asyncio.subprocess.PIPE,
        )
        lines: list[str] = []
        try:
            assert process.stderr is not None
            async with asyncio.timeout(120):  # a cold interpreter on a loaded 2-core machine
                while not any("scheduler listening" in line for line in lines):
                    lines.append((await process.stderr.readline()).decode())
                    assert lines[-1], f"the scheduler exited: {lines}"
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await reader.read()
            writer.close()
            async with asyncio.timeout(30):
                while not any('"aiohttp.access"' in line for line in lines):
                    lines.append((await process.stderr.readline()).decode())
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()
    records = [json.loads(line) for line in lines]  # every line is one JSON record
    assert {"pyhami.scheduler.runtime", "aiohttp.access"} <= {r["logger"] for r in records}


def _run_cli(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)


def _log_one_debug_and_one_info_line() -> None:
    structlog.get_logger("pyhami.test").debug("a debug line")
    structlog.get_logger("pyhami.test").info("an info line")


def test_commands_without_a_verbosity_flag_log_info_on_stderr_not_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run_cli(["version"])
    _log_one_debug_and_one_info_line()
    out, err = capsys.readouterr()
    assert "an info line" in err and "a debug line" not in out + err, (out, err)
    assert "INFO    pyhami.test: an info line" in err, "the one console format"


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        pytest.param(["scheduler"], False, id="scheduler"),
        pytest.param(["scheduler", "-v=4"], True, id="scheduler -v=4"),
        pytest.param(["scheduler", "--debug"], True, id="scheduler --debug"),
        pytest.param(["monitor"], False, id="monitor"),
        pytest.param(["monitor", "-v=5"], True, id="monitor -v=5"),
    ],
)
def test_the_services_show_debug_lines_only_with_v_or_debug(
    argv: list[str],
    shown: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    module = import_module(f"pyhami.{argv[0]}.cli")
    if argv[0] == "scheduler":
        config = tmp_path / "device-config.yaml"
        config.write_text("nvidia:\n  resourceCountName: nvidia.com/gpu\n")
        argv = [*argv, "--device-config-file", str(config)]

    def run_service(_command: str, main: Coroutine[Any, Any, None], **_: Any) -> None:
        main.close()  # the service itself is not what this test is about
        _log_one_debug_and_one_info_line()

    for check in ("check_certificate", "check_port_free", "check_kubeconfig"):
        monkeypatch.setattr(module, check, lambda *_: None, raising=False)
    monkeypatch.setattr(module, "run_service", run_service)
    monkeypatch.setenv("HOOK_PATH", "/h")
    monkeypatch.setenv("NODE_NAME", "n")
    _run_cli(argv)
    out, err = capsys.readouterr()
    assert "an info line" in err
    assert ("a debug line" in err) is shown and "a debug line" not in out, (out, err)
