"""`pyhami demo`: start the demo cluster, submit the example pods, show what became of them.

The cluster's modules (every service of pyhami) are imported when the command runs, not when
`pyhami` starts, so the other commands do not pay for them."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer import echo

from pyhami.cli_errors import fail
from pyhami.kube.manifests import PodManifest
from pyhami.logs import configure_logging
from pyhami.sim.demo.pods import DemoObject, PodFileError, load_pods
from pyhami.sim.demo.report import outcome_table, progress_line, summary_line
from pyhami.sim.demo.settings import DemoSettings

if TYPE_CHECKING:
    from pyhami.controlplane import BuiltBinaries
    from pyhami.sim.demo.cluster import DemoCluster


def _endpoints(cluster: DemoCluster, pods: list[DemoObject]) -> str:
    ca = cluster.workdir / "ca.crt"
    ca.write_bytes(cluster.ca_pem)
    client = cluster.client_certificate
    last = [obj for obj in pods if isinstance(obj, PodManifest)][-1]
    if cluster.real is not None:
        kubectl = f"{cluster.real.kubectl} --kubeconfig={cluster.real.admin_kubeconfig}"
        access = [
            f"  admin kubeconfig   {cluster.real.admin_kubeconfig}",
            f"  pods               {kubectl} get pods -A -o wide",
        ]
    else:
        access = [f"  pods               curl -s {cluster.api.url}/api/v1/pods"]
    lines = [
        "",
        "The cluster keeps running (Ctrl-C stops it):",
        *access,
        f"  explain            curl -s --cacert {ca} --cert {client.cert_file} "
        f"--key {client.key_file} "
        f"'{cluster.scheduler_url}/explain?pod={last.namespace}/{last.name}'",
        f"  scheduler metrics  curl -s {cluster.scheduler_metrics_url}",
    ]
    monitor_urls = _monitor_urls(cluster)
    lines.extend(f"  monitor {name:<10} curl -s {url}" for name, url in monitor_urls.items())
    monitors = " ".join(f"--monitor {url}" for url in monitor_urls.values())
    scheduler = f"--scheduler {cluster.scheduler_metrics_url}"
    lines.append(f"  top                pyhami top pods {scheduler} {monitors}")
    return "\n".join(lines)


def _monitor_urls(cluster: DemoCluster) -> dict[str, str]:
    """Each node's monitor, device-plugin and DRA nodes alike."""
    urls = {node.name: node.metrics_url for node in cluster.nodes}
    urls.update((node.name, node.metrics_url) for node in cluster.dra_nodes)
    return urls


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


async def run_demo(
    settings: DemoSettings,
    pods: list[DemoObject],
    keep_running: bool,
    kubernetes: BuiltBinaries | None = None,
) -> int:
    """The whole demo; returns how many pods ended neither Running nor unschedulable, plus how
    many requests of our components the API server refused. With `kubernetes`, on Kubernetes'
    own control plane built from those binaries, our components under the chart's RBAC."""
    from pyhami.sim.demo.cluster import DemoCluster
    from pyhami.sim.demo.run import submit_all
    from pyhami.sim.demo.usage import DemoWorkloads, find_native, measured_usage

    started = time.monotonic()
    plane = "Kubernetes' own control plane" if kubernetes is not None else "no Kubernetes"
    echo(f"Starting a {settings.nodes}-node demo cluster on localhost ({plane}, no GPU):")
    count = sum(isinstance(obj, PodManifest) for obj in pods)
    native = find_native()
    if not isinstance(native, str):
        settings = replace(settings, libvgpu=native.library)
    cluster = DemoCluster(settings, progress=lambda line: echo(f"  {line}"), kubernetes=kubernetes)
    workloads = None
    if not isinstance(native, str):
        card_bytes = {
            gpu.uuid: (gpu.memory_total_mib or 0) << 20
            for cards in [*settings.node_cards(), *settings.dra_node_cards()]
            for gpu in cards
        }
        workloads = cluster.runtime = DemoWorkloads(native, card_bytes, cluster.workdir)
    async with cluster:
        try:
            echo(f"Ready in {time.monotonic() - started:.1f}s. Submitting {count} pods in order:")
            results = await submit_all(cluster, pods, lambda r: echo(progress_line(r)), echo)
            usage = None
            if workloads is not None:
                echo("Measuring what the pods use (their programs run under libvgpu) ...")
                running = [(r.namespace, r.name) for r in results if r.ok and r.cards]
                usage = await measured_usage(_monitor_urls(cluster).values(), running)
            echo("")
            echo(outcome_table(results, usage))
            if isinstance(native, str):
                echo(f"Use is not shown (the pods run no programs): {native}.")
            echo(summary_line(results, time.monotonic() - started))
            refused = cluster.refused_requests()
            if refused:
                echo("The API server refused these requests (the chart's RBAC lacks them):")
                echo("\n".join(f"  {line}" for line in refused))
            if keep_running:
                echo(_endpoints(cluster, pods))
                await _wait_for_signal()
        finally:
            if workloads is not None:
                await workloads.finish()
    return sum(1 for r in results if r.phase not in ("Running", "Pending")) + len(refused)


class ControlPlane(enum.StrEnum):
    EMBEDDED = "embedded"
    REAL = "real"


class NodeMode(enum.StrEnum):
    """What serves the GPU nodes: the device plugin, pyhami's DRA driver, or half and half."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"
    MIXED = "mixed"


def node_split(mode: NodeMode, nodes: int) -> tuple[int, int]:
    """(device-plugin nodes, DRA nodes) for `nodes` GPU nodes; mixed: half run DRA, rounded down
    but at least one."""
    if mode is NodeMode.DRA:
        return 0, nodes
    if mode is NodeMode.MIXED:
        dra = max(1, nodes // 2)
        return max(1, nodes - dra), dra
    return nodes, 0


def _built_kubernetes() -> BuiltBinaries:
    """The pinned release's binaries, built first when they are not (progress on stdout)."""
    from pyhami.controlplane import BuildError, build_control_plane

    try:
        return build_control_plane(progress=lambda line: echo(f"  control-plane build: {line}"))
    except BuildError as err:
        fail("demo", str(err))


def demo(
    nodes: Annotated[int, typer.Option("--nodes", help="simulated GPU nodes (1-64)")] = 3,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs per node (1-16)")] = 4,
    pods: Annotated[
        Path | None,
        typer.Option(
            "--pods",
            metavar="FILE",
            help="YAML file of pods to submit, - for stdin (default: the examples)",
        ),
    ] = None,
    *,
    keep_running: Annotated[
        bool, typer.Option("--keep-running", help="leave the cluster up and print its URLs")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="show the services' logs")] = False,
    namespace: Annotated[
        str,
        typer.Option("-n", "--namespace", metavar="NAMESPACE", help="for the pods that name none"),
    ] = "default",
    control_plane: Annotated[
        ControlPlane,
        typer.Option(
            "--control-plane",
            help="embedded: an API server double and a kube-scheduler harness (no Go needed); "
            "real: Kubernetes' own binaries (built by `pyhami control-plane build` on first use)",
        ),
    ] = ControlPlane.EMBEDDED,
    mode: Annotated[
        NodeMode,
        typer.Option(
            "--mode",
            help="device-plugin: every node runs the device plugin; dra: every node runs the DRA "
            "driver (kube-scheduler allocates claims; the webhook translates HAMi-style pods); "
            "mixed: half the nodes each (dra and mixed need --control-plane real)",
        ),
    ] = NodeMode.DEVICE_PLUGIN,
) -> None:
    """Run the whole pyhami system on localhost with simulated GPU nodes and example pods.

    Exit status: 0 when every pod ran or was explained as unschedulable, 1 when one was refused
    or failed (or, on the real control plane, a request of a component was), 2 for bad options,
    an unusable pod file, or Kubernetes' binaries that cannot be built (`--control-plane real`).
    """
    try:
        if mode is not NodeMode.DEVICE_PLUGIN and control_plane is not ControlPlane.REAL:
            raise ValueError(f"--mode {mode} needs --control-plane real (kube-scheduler's DRA)")
        plugin_nodes, dra_nodes = node_split(mode, nodes)
        settings = DemoSettings(nodes=plugin_nodes, gpus=gpus, dra_nodes=dra_nodes)
        pod_list = load_pods(pods, namespace)
    except (ValueError, PodFileError) as err:
        fail("demo", str(err))
    # The services log as they would in a cluster; the demo shows only its own lines.
    configure_logging(debug=False)
    if not verbose:
        logging.getLogger().setLevel(logging.CRITICAL)
    kubernetes = _built_kubernetes() if control_plane is ControlPlane.REAL else None
    with contextlib.suppress(KeyboardInterrupt):
        failed = asyncio.run(run_demo(settings, pod_list, keep_running, kubernetes))
        if failed:
            raise typer.Exit(1)
