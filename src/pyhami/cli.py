"""The one `pyhami` command. Each area registers its own sub-command group here."""

import typer

from pyhami.cli_annotations import annotations_app
from pyhami.controlplane.cli import control_plane_app
from pyhami.deviceplugin.cli import device_plugin
from pyhami.monitor.cli import MONITOR_CONTEXT, monitor
from pyhami.scheduler.cli import scheduler
from pyhami.sim import cli as sim_cli
from pyhami.sim.demo.cli import demo

app = typer.Typer(
    name="pyhami",
    help="GPU sharing for Kubernetes, wire-compatible with HAMi v2.10.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Keep `pyhami` a command group even while it has a single sub-command."""


@app.command()
def version() -> None:
    """Print the pyhami version."""
    from pyhami import __version__

    typer.echo(__version__)


app.command()(sim_cli.simulate)
app.command()(sim_cli.explain)
app.command()(demo)
app.command("device-plugin")(device_plugin)
app.command("monitor", context_settings=MONITOR_CONTEXT)(monitor)
app.command("scheduler")(scheduler)
app.add_typer(annotations_app)
app.add_typer(control_plane_app)


def main() -> None:
    app()
