"""`pyhami control-plane build`: Kubernetes' binaries for the real-control-plane tests and demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pyhami.cli_errors import fail
from pyhami.cli_habits import command_group
from pyhami.controlplane.build import BuildError, build_control_plane, default_cache_root
from pyhami.controlplane.versions import KUBERNETES_VERSION

control_plane_app = command_group(
    "control-plane",
    "Kubernetes' own control plane (built from its Go modules) for tests and the demo.",
)


@control_plane_app.command()
def build(
    kubernetes_version: Annotated[
        str, typer.Option("--kubernetes-version", help="a Kubernetes release, like v1.37.2")
    ] = KUBERNETES_VERSION,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="folder of the builds, one sub-folder per version "
            "(default $PYHAMI_CACHE/control-plane or ~/.cache/pyhami/control-plane)",
        ),
    ] = None,
) -> None:
    """Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd with Go,
    or reuse them when built already; the last line printed is their folder.

    Exit status 2 when Go is missing or a module cannot be fetched (one line says which)."""
    try:
        built = build_control_plane(
            kubernetes_version, cache_dir or default_cache_root(), progress=typer.echo
        )
    except BuildError as err:
        fail("control-plane build", str(err))
    typer.echo(str(built.bin_dir))
