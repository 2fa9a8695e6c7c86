import pytest
from typer.testing import CliRunner

from pyhami import __version__
from pyhami.cli import app


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == __version__


@pytest.mark.parametrize(
    ("value", "message"),
    [("=lots", 'parsing "lots": invalid syntax'), ("=-1", "-1 is negative"), ("=", 'parsing ""')],
)
def test_a_bad_klog_verbosity_is_refused_with_the_flag_named(value: str, message: str) -> None:
    result = CliRunner().invoke(app, ["device-plugin", f"-v{value}"])
    assert result.exit_code == 2
    assert "-v" in result.output
    assert message in result.output
