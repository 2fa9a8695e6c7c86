"""The `simulate`, `explain` and `top` commands."""

import asyncio
import ssl
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import aiohttp
import typer

from pyhami.cli_errors import kubeconfig_problem, quiet_kubeconfig_search, startup_problem
from pyhami.cli_habits import (
    GPU_POLICY_METAVAR,
    NamespaceOption,
    Output,
    OutputOption,
    as_data,
    parse_gpu_policy,
    qualified_pod,
)
from pyhami.devices.config import DeviceConfigError, NvidiaConfig, parse_device_config
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import EngineConfig, GpuPolicy, NodePolicy
from pyhami.sim.explain import explain as explain_pod
from pyhami.sim.explain import explanation_data, render
from pyhami.sim.inputs import ClusterInput, InputError, cluster_of, read_objects
from pyhami.sim.preemption import WhatIf, simulate_with_preemption, what_if_data, what_if_lines
from pyhami.sim.simulate import as_table, pods_data
from pyhami.sim.simulate import simulate as simulate_pods
from pyhami.sim.top import TopError, View, rows_for, scrape
from pyhami.sim.top import as_table as top_table

FilesOption = Annotated[
    list[Path],
    typer.Option(
        "-f", "--file", metavar="FILE", help="YAML/JSON nodes and pods, - for stdin (repeatable)"
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", metavar="FILE", help="HAMi device-config.yaml (default: chart values)"
    ),
]
NodePolicyOption = Annotated[NodePolicy, typer.Option("--node-policy")]
GpuPolicyOption = Annotated[
    str,
    typer.Option(
        "--gpu-policy",
        parser=parse_gpu_policy,
        metavar=GPU_POLICY_METAVAR,
        help="one policy or a chain, as hami.io/gpu-scheduler-policy takes it",
    ),
]
NowOption = Annotated[
    int | None, typer.Option("--now", help="unix seconds for hami.io/vgpu-time (default: now)")
]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _engine_config(config: Path | None, node_policy: str, gpu_policy: str) -> EngineConfig:
    nvidia = NvidiaConfig()
    if config is not None:
        try:
            nvidia = parse_device_config(config.read_text("utf-8"), source=str(config)).nvidia
        except OSError as err:
            raise _fail(f"{config}: cannot read: {err}") from err
        except DeviceConfigError as err:
            raise _fail(str(err)) from err
    return EngineConfig(
        vendor=NvidiaVendor(nvidia), nvidia=nvidia, node_policy=node_policy, gpu_policy=gpu_policy
    )


def simulate(  # noqa: PLR0917 (typer reads the options from the signature)
    file: FilesOption,
    config: ConfigOption = None,
    node_policy: NodePolicyOption = NodePolicy.BINPACK,
    gpu_policy: GpuPolicyOption = GpuPolicy.SPREAD,
    output: OutputOption = Output.JSON,
    namespace: NamespaceOption = None,
    now: NowOption = None,
    preemption: Annotated[
        bool,
        typer.Option(
            "--preemption",
            help="a pod that fits nowhere evicts lower-priority pods as /preempt would answer",
        ),
    ] = False,
) -> None:
    """Schedule the pending pods of FILEs as the live /filter would, in input order.

    With -n, every pending pod is still decided (they compete for the same cards), and only
    those of that namespace are shown. With --preemption, a pod that fits nowhere gets the
    victims kube-scheduler would delete on our answer, and is placed once they are gone."""
    engine_config = _engine_config(config, node_policy, gpu_policy)
    try:
        cluster = cluster_of(read_objects(file))
    except InputError as err:
        raise _fail(str(err)) from err
    if cluster.finished or cluster.placed_without_record:
        typer.echo(
            f"note: left out {cluster.finished} finished pods (they hold nothing) and "
            f"{cluster.placed_without_record} bound or running pods without a GPU allocation "
            "record (no scheduler decides them again)",
            err=True,
        )
    for node in sorted(cluster.unreadable):
        # Left out as the live scheduler leaves it out, but the input is likely wrong: say so.
        typer.echo(f"warning: node {node} left out: {cluster.unregistered[node]}", err=True)
    moment = int(time.time()) if now is None else now
    what_ifs: dict[str, WhatIf] = {}
    if preemption:
        decisions, what_ifs = simulate_with_preemption(cluster, engine_config)
    else:
        decisions = simulate_pods(cluster, engine_config)
    if namespace is not None:
        decisions = [d for d in decisions if d.namespace == namespace]
    pods = pods_data(decisions, engine_config.vendor.keys, moment)
    for entry in pods:
        found = what_ifs.get(f"{entry['namespace']}/{entry['name']}")
        if found is not None:
            entry["preemption"] = what_if_data(found)
    if output in (Output.JSON, Output.YAML):
        sys.stdout.write(as_data({"pods": pods}, output))
    else:
        sys.stdout.write(
            as_table(decisions, engine_config.vendor.keys, moment, wide=output is Output.WIDE)
        )
        for decision in decisions:
            found = what_ifs.get(f"{decision.namespace}/{decision.name}")
            if found is not None:
                lines = what_if_lines(found)
                sys.stdout.write(f"{decision.namespace}/{decision.name} {lines[0]}\n")
                sys.stdout.write("".join(f"{line}\n" for line in lines[1:]) + "\n")
    errors = [d for d in decisions if d.error]
    for decision in errors:
        typer.echo(f"error: pod {decision.namespace}/{decision.name}: {decision.error}", err=True)
    if errors:
        # A pod that cannot be read is bad input, even though the others were decided.
        raise typer.Exit(2)


def _live_cluster(kubeconfig: str | None) -> ClusterInput:
    """The cluster through the kubeconfig (KUBECONFIG, ~/.kube/config, else in-cluster)."""
    from kubernetes_asyncio.config import ConfigException

    from pyhami.kube import KubeError
    from pyhami.sim.live import read_cluster_objects

    problem = kubeconfig_problem(kubeconfig)
    if problem is not None:
        raise _fail(problem)
    quiet_kubeconfig_search()
    try:
        objects = asyncio.run(read_cluster_objects(kubeconfig))
    except (ConfigException, KubeError, aiohttp.ClientError, OSError, TimeoutError) as err:
        raise _fail(startup_problem(err) or f"cannot read the cluster: {err}") from err
    return cluster_of(objects)


def explain(  # noqa: PLR0917 (typer reads the options from the signature)
    pod: Annotated[
        str, typer.Argument(metavar="POD", help="the pending pod: NAME or NAMESPACE/NAME")
    ],
    file: Annotated[
        list[Path] | None,
        typer.Option(
            "-f",
            "--file",
            metavar="FILE",
            help="YAML/JSON nodes and pods, - for stdin (repeatable); "
            "without it the cluster is read through the kubeconfig",
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            metavar="FILE",
            help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, else in-cluster)",
        ),
    ] = None,
    config: ConfigOption = None,
    node_policy: NodePolicyOption = NodePolicy.BINPACK,
    gpu_policy: GpuPolicyOption = GpuPolicy.SPREAD,
    now: NowOption = None,
    after_pending: Annotated[
        bool,
        typer.Option(
            "--after-pending",
            help="place the pending pods listed before POD first, as simulate does",
        ),
    ] = False,
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show every node and card for one pending pod, and the check that rejected each.

    POD is judged against the existing allocations only, unless --after-pending is given.
    Without -f the cluster is read live through the kubeconfig, as kubectl does."""
    engine_config = _engine_config(config, node_policy, gpu_policy)
    try:
        cluster = cluster_of(read_objects(file)) if file else _live_cluster(kubeconfig)
        explanation = explain_pod(
            cluster,
            engine_config,
            qualified_pod(pod, namespace),
            int(time.time()) if now is None else now,
            after_pending=after_pending,
        )
    except InputError as err:
        raise _fail(str(err)) from err
    if output in (Output.JSON, Output.YAML):
        sys.stdout.write(as_data(explanation_data(explanation), output))
    else:
        sys.stdout.write(render(explanation, wide=output is Output.WIDE))


def top(  # noqa: PLR0917 (typer reads the options from the signature)
    view: Annotated[View, typer.Argument(metavar="nodes|pods|cards", help="what to list")],
    scheduler: Annotated[
        str,
        typer.Option(
            "--scheduler",
            metavar="URL",
            envvar="PYHAMI_SCHEDULER_METRICS",
            help="the scheduler's /metrics (what is allocated)",
        ),
    ],
    monitors: Annotated[
        list[str] | None,
        typer.Option(
            "--monitor",
            metavar="URL",
            envvar="PYHAMI_MONITOR_METRICS",
            help="a node monitor's /metrics (what is used); repeatable",
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
    namespace: NamespaceOption = None,
    watch: Annotated[
        bool, typer.Option("-w", "--watch", help="print again every --interval seconds")
    ] = False,
    interval: Annotated[float, typer.Option("--interval", metavar="SECONDS", min=0.1)] = 2.0,
    times: Annotated[
        int, typer.Option("--times", metavar="N", help="with --watch: stop after N (0: never)")
    ] = 0,
    cacert: Annotated[
        Path | None,
        typer.Option("--cacert", metavar="FILE", help="CA for https URLs (default: system)"),
    ] = None,
) -> None:
    """Allocated against used GPU memory and cores per node, pod or card, like `kubectl top`.

    Allocation comes from the scheduler's /metrics, use from the monitors' (pods without a
    monitor show - as used). `pyhami demo --keep-running` prints this command for its cluster."""
    urls = [scheduler, *(monitors or ())]
    context = None
    if cacert is not None:
        try:
            context = ssl.create_default_context(cafile=str(cacert))
        except (OSError, ssl.SSLError) as err:
            raise _fail(f"--cacert {cacert}: cannot use: {err}") from err
    shown = 0
    while True:
        try:
            samples = asyncio.run(scrape(urls, context))
        except TopError as err:
            raise _fail(str(err)) from err
        rows = rows_for(view, samples, namespace)
        if output in (Output.JSON, Output.YAML):
            sys.stdout.write(as_data({view.value: [asdict(row) for row in rows]}, output))
        else:
            sys.stdout.write(top_table(view, rows, wide=output is Output.WIDE))
        sys.stdout.flush()
        shown += 1
        if not watch or shown == times:
            return
        time.sleep(interval)
        sys.stdout.write("\n")
