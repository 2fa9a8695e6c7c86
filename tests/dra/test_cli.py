"""`pyhami dra-driver` refuses bad flags before it touches NVML or the API."""

import pytest
from typer.testing import CliRunner

from pyhami.cli import app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "set --node-name or NODE_NAME"),
        (["--node-name", "n1", "--hook-path", "/usr/local hami"], "must not contain whitespace"),
    ],
)
def test_bad_flags_are_refused_with_the_flag_named(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["dra-driver", *args], env={"NODE_NAME": ""})
    assert result.exit_code == 2
    assert message in result.output


def test_it_is_listed_among_the_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert "dra-driver" in result.output
