"""`pyhami chart convert-values`: HAMi v2.10 chart values as pyhami chart values."""

import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
import yaml

from pyhami.chart.convert import convert
from pyhami.cli_errors import fail
from pyhami.cli_habits import command_group, yaml_problem

COMMAND = "chart convert-values"
chart_app = command_group("chart", "pyhami's Helm chart: values from HAMi's.")


@chart_app.command("convert-values")
def convert_values(
    hami_values: Annotated[
        Path,
        typer.Argument(metavar="HAMI_VALUES", help="HAMi v2.10 values file, or - for stdin"),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="FILE", help="write the pyhami values here (default: stdout)"
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("-q", "--quiet", help="only the summary line on stderr")
    ] = False,
) -> None:
    """Write pyhami values for a HAMi values file, and report each HAMi key on stderr.

    Each key is mapped (same meaning, the pyhami key named), changed (carried over in another
    shape) or dropped (with why). Only values that differ from HAMi's defaults are written, so
    pyhami's defaults apply to the rest: `helm install -f` the output."""
    source = str(hami_values)
    try:
        text = sys.stdin.read() if source == "-" else hami_values.read_text(encoding="utf-8")
        hami = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as err:
        fail(COMMAND, f"{source}: cannot read: {err}")
    except yaml.YAMLError as err:
        fail(COMMAND, f"{source}: not valid YAML: {yaml_problem(err)}")
    if not isinstance(hami, dict | None):
        fail(COMMAND, f"{source}: expected a mapping of values, got {type(hami).__name__}")
    values, lines = convert(hami or {})
    header = f"# pyhami chart values from HAMi's {source} (pyhami chart convert-values)\n"
    body = header + (yaml.safe_dump(values, sort_keys=False) if values else "{}\n")
    if out is None:
        sys.stdout.write(body)
    else:
        try:
            out.write_text(body, encoding="utf-8")
        except OSError as err:
            fail(COMMAND, f"--out {out}: cannot write: {err}")
    if not quiet:
        for line in lines:
            typer.echo(str(line), err=True)
    counts = Counter(line.verdict.value for line in lines)
    written = sum(line.written for line in lines)
    typer.echo(
        f"{len(lines)} HAMi keys: {counts['mapped']} mapped, {counts['changed']} changed, "
        f"{counts['dropped']} dropped; {written} values differ from HAMi's defaults, written",
        err=True,
    )
