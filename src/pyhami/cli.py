"""The one `pyhami` command. Each area registers its own sub-command group here."""

import sys
from collections.abc import Sequence

import typer

# typer (from 0.29) carries its own copy of click; its usage errors are these classes.
from typer._click import exceptions as click_errors

from pyhami.chart.cli import chart_app
from pyhami.cli_annotations import annotations_app
from pyhami.cli_errors import USAGE_EXIT
from pyhami.cli_habits import VersionOption, command_group
from pyhami.controlplane.cli import control_plane_app
from pyhami.deviceplugin.cli import device_plugin
from pyhami.dra.cli import dra_driver
from pyhami.logs import configure_logging
from pyhami.monitor.cli import MONITOR_CONTEXT, monitor
from pyhami.scheduler.cli import scheduler
from pyhami.sim import cli as sim_cli
from pyhami.sim.demo.cli import demo

app = command_group("pyhami", "GPU sharing for Kubernetes, wire-compatible with HAMi v2.10.")


@app.callback()
def _root(version: VersionOption = False) -> None:
    """Keep `pyhami` a command group; `--version` works on it and on every sub-command.

    Every command logs in the one format on stderr at INFO (unconfigured, structlog would print
    debug lines on stdout); the services set the level again from their `-v`/`--debug`.
    """
    del version  # handled by its callback
    configure_logging(debug=False)


@app.command()
def version() -> None:
    """Print the pyhami version."""
    from pyhami import __version__

    typer.echo(__version__)


app.command()(sim_cli.simulate)
app.command()(sim_cli.explain)
app.command()(sim_cli.top)
app.command()(demo)
app.command("device-plugin")(device_plugin)
app.command("dra-driver")(dra_driver)
app.command("monitor", context_settings=MONITOR_CONTEXT)(monitor)
app.command("scheduler")(scheduler)
app.add_typer(annotations_app)
app.add_typer(chart_app)
app.add_typer(control_plane_app)


def main(argv: Sequence[str] | None = None, prog_name: str = "pyhami") -> None:
    """The console script: a usage mistake (unknown flag, bad value) is one line, exit 2."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click_errors.UsageError as err:
        path = err.ctx.command_path if err.ctx is not None else prog_name
        typer.echo(f"{path}: {err.format_message()} (`{path} -h` lists the flags)", err=True)
        sys.exit(USAGE_EXIT)
    except click_errors.ClickException as err:
        typer.echo(f"{prog_name}: {err.format_message()}", err=True)
        sys.exit(err.exit_code)
    except typer.Abort:
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def kubectl_plugin() -> None:
    """`kubectl-pyhami` on the PATH makes `kubectl pyhami explain POD`, `kubectl pyhami top`."""
    main(prog_name="kubectl pyhami")


if __name__ == "__main__":
    main()
