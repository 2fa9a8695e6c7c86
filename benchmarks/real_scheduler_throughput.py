"""GPU pods/s through Kubernetes' own kube-scheduler and pyhami's extender, against plain pods.

What runs: the real control plane (`pyhami control-plane build`: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler); `pyhami scheduler` as its own process (optionally
under py-spy), kube-scheduler's extender over HTTPS with a client certificate; N Nodes of 8
A100 80 GB cards, registered only (Node objects with the device plugin's register annotation
and capacity, made through the admin client). In place of each node's device plugin a double
does what HAMi's plugin does once Allocate is done: bind-phase `success` and the node lock
released (no container runs: a pod is only scheduled and bound).

Phases, one after another in the same run, M pods each, created at once (a few dozen creates
in flight): GPU pods (1 GPU, 3,000 MiB, 10 % cores) with node policy spread, the same with
binpack (the pod annotation `hami.io/node-scheduler-policy`), and plain pods (no GPU) through
kube-scheduler's default profile. Per phase: the CPU each process used per pod (the
machine's cores are shared by all of them: where the API server is the bottleneck, API calls
per pod set the rate), pods/s from the first create to the last pod
bound (the pod's nodeName seen by a watch), kube-scheduler's own
`scheduler_scheduling_algorithm_duration_seconds` (its whole filter step, our /filter round
trip included: kube-scheduler 1.37 has no extender-specific histogram, and its Bind
extension-point histogram does not cover an extender's bind) and our side's /filter and /bind
histograms (pyhami_scheduler_filter_duration_seconds / _bind_), p50/p99 interpolated in the
buckets of the phase's delta; bind failures as our scheduler counted them. The closing lines
give GPU pods/s against the plain-pod rate.

Run from the repository root: `python3 benchmarks/real_scheduler_throughput.py [--nodes 200]
[--pods 400] [--policies spread,binpack] [--profile out.txt] [--scheduler-src DIR]`
(`--policies` picks the GPU phases, `--scheduler-src` runs the pyhami scheduler from another
checkout's src/, to compare two versions under the same harness).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # not an installed copy

from benchmarks.gpu_cluster import GPU_POD_LIMITS, GPUS_PER_NODE, TOLERATE_ALL, node_object
from benchmarks.prometheus_text import counter, histogram, quantile, samples
from pyhami.controlplane import KUBERNETES_VERSION, default_cache_root, find_built
from pyhami.kube import NODES, PODS, EventHandlers, Informer, KubeClient
from pyhami.sim.demo.cluster import DEVICE_CONFIG, SCHEDULER_NAME, SCHEDULER_USER
from pyhami.testing.certs import write_serving_certificate
from pyhami.testing.real_cluster import RealControlPlane, free_port
from pyhami.testing.scheduler_harness import ExtenderConfig
from tests.scheduler.cluster import DevicePluginDouble

ROOT = Path(__file__).resolve().parents[1]
CREATES_IN_FLIGHT = 32
KEY_NODE_POLICY = "hami.io/node-scheduler-policy"
PHASE_TIMEOUT_S = 900.0


def pod_object(name: str, phase: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda-sample"}
    annotations: dict[str, str] = {}
    scheduler = "default-scheduler"
    if phase != "plain":
        container["resources"] = {"limits": dict(GPU_POD_LIMITS)}
        annotations[KEY_NODE_POLICY] = phase
        scheduler = SCHEDULER_NAME
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": phase}, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "tolerations": TOLERATE_ALL,
            "containers": [container],
        },
    }


def answer_name(labels: str) -> str:
    """`{outcome="bound",verb="bind"}` as `bind:bound`."""
    found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
    return f"{found.get('verb', '')}:{found.get('outcome', '')}"


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


# ----- the run ------------------------------------------------------------------------------------


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and its waited-for children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS


def cpu_of(processes: Mapping[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in processes.items()}


@dataclass
class Phase:
    name: str
    pods: int
    seconds: float = 0.0
    create_seconds: float = 0.0
    lines: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        return self.pods / self.seconds if self.seconds else 0.0


class Scrapers:
    def __init__(self, kube_scheduler_url: str, ours_url: str, cert: tuple[str, str]) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.load_cert_chain(*cert)
        self._context = context
        self.kube_scheduler_url = kube_scheduler_url
        self.ours_url = ours_url

    async def both(self) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
        async with aiohttp.ClientSession() as session:
            async with session.get(self.kube_scheduler_url, ssl=self._context) as answer:
                theirs = await answer.text()
                if answer.status != 200:
                    raise RuntimeError(f"kube-scheduler /metrics: {answer.status} {theirs[:200]}")
            async with session.get(self.ours_url) as answer:
                ours = await answer.text()
        return samples(theirs), samples(ours)


async def run_phase(
    admin: KubeClient,
    phase: Phase,
    namespace: str,
    scrapers: Scrapers,
    processes: Mapping[str, int],
) -> Phase:
    bound: dict[str, float] = {}
    done = asyncio.Event()

    def seen(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if (pod.get("spec") or {}).get("nodeName") and name not in bound:
            bound[name] = time.perf_counter()
            if len(bound) == phase.pods:
                done.set()

    informer = Informer(
        admin, PODS, namespace=namespace, label_selector=f"bench={phase.name}", name="bench/pods"
    )
    informer.add_handlers(EventHandlers(on_add=seen, on_update=lambda _old, new: seen(new)))
    informer.start()
    await informer.wait_synced(30)
    theirs_before, ours_before = await scrapers.both()
    cpu_before = cpu_of(processes)
    slots = asyncio.Semaphore(CREATES_IN_FLIGHT)

    async def create(i: int) -> None:
        async with slots:
            await admin.create_pod(namespace, pod_object(f"{phase.name}-{i:05d}", phase.name))

    started = time.perf_counter()
    await asyncio.gather(*(create(i) for i in range(phase.pods)))
    phase.create_seconds = time.perf_counter() - started
    try:
        await asyncio.wait_for(done.wait(), PHASE_TIMEOUT_S)
    except TimeoutError:
        print(f"  {phase.name}: only {len(bound)} of {phase.pods} bound in {PHASE_TIMEOUT_S}s")
    phase.seconds = (max(bound.values()) if bound else time.perf_counter()) - started
    await informer.stop()
    cpu = {k: v - cpu_before[k] for k, v in cpu_of(processes).items()}
    theirs_after, ours_after = await scrapers.both()
    algorithm = histogram(
        theirs_before, theirs_after, "scheduler_scheduling_algorithm_duration_seconds"
    )
    attempts = counter(theirs_before, theirs_after, "scheduler_schedule_attempts_total")
    lines = [
        f"{phase.name:>8}: {phase.rate:7.1f} pods/s ({len(bound)}/{phase.pods} bound in "
        f"{phase.seconds:.1f} s; creating them took {phase.create_seconds:.1f} s)",
        f"          kube-scheduler: scheduling algorithm (filter step) p50 "
        f"{ms(quantile(algorithm, 0.5))} p99 {ms(quantile(algorithm, 0.99))}; attempts "
        + ", ".join(f"{re.sub(r'[{}]', '', k)}={v:g}" for k, v in sorted(attempts.items())),
    ]
    lines.append(
        "          CPU ms per pod: "
        + ", ".join(f"{name} {1000 * used / phase.pods:.1f}" for name, used in cpu.items())
        + f" (all {1000 * sum(cpu.values()) / phase.pods:.1f})"
    )
    if phase.name != "plain":
        ours_filter = histogram(
            ours_before, ours_after, "pyhami_scheduler_filter_duration_seconds", 'path="live"'
        )
        ours_bind = histogram(ours_before, ours_after, "pyhami_scheduler_bind_duration_seconds")
        binds = counter(ours_before, ours_after, "pyhami_scheduler_decisions_total")
        lines.append(
            f"          pyhami: /filter p50 {ms(quantile(ours_filter, 0.5))} p99 "
            f"{ms(quantile(ours_filter, 0.99))}; /bind p50 {ms(quantile(ours_bind, 0.5))} p99 "
            f"{ms(quantile(ours_bind, 0.99))}; answers "
            + ", ".join(f"{answer_name(k)}={v:g}" for k, v in sorted(binds.items()))
        )
    phase.lines = tuple(lines)
    for line in lines:
        print(line, flush=True)
    return phase


async def wait_http(url: str, context: ssl.SSLContext | None, timeout_s: float = 60) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(url, ssl=context) as answer,
                ):
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)


async def wait_scheduler_nodes(metrics_url: str, nodes: int, timeout_s: float = 300) -> None:
    """Until our scheduler's metrics name every benchmark node (its ledger has them all)."""
    async with asyncio.timeout(timeout_s):
        while True:
            async with aiohttp.ClientSession() as session, session.get(metrics_url) as answer:
                text = await answer.text()
            if len(set(re.findall(r"bench-node-\d{5}", text))) >= nodes:
                return
            await asyncio.sleep(0.5)


def top_of_profile(raw: Path, entries: int = 15) -> list[str]:
    """py-spy's raw (collapsed) stacks: the functions with the most samples on the stack
    (inclusive) and where the samples end (self)."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = [re.sub(r" \((.*/)?", " (", f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    out = [f"{total} samples; self (where the time is spent):"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(entries)]
    out.append("inclusive (on the stack):")
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(entries * 2)]
    return out


async def main(args: argparse.Namespace) -> None:
    binaries = find_built(KUBERNETES_VERSION, default_cache_root())
    if binaries is None:
        sys.exit(f"no built control plane for {KUBERNETES_VERSION}: run pyhami control-plane build")
    workdir = Path(tempfile.mkdtemp(prefix="pyhami-bench-", dir="/tmp"))
    source = Path(args.scheduler_src).resolve() if args.scheduler_src else ROOT / "src"
    async with RealControlPlane(binaries, workdir / "k8s") as plane:
        print(f"control plane up in {plane.started_in_s:.1f} s", flush=True)
        await plane.grant("cluster-admin", SCHEDULER_USER)
        admin = await plane.client(plane.admin_kubeconfig)
        tls = write_serving_certificate(workdir, datetime.now(UTC))
        config_file = workdir / "device-config.yaml"
        config_file.write_text(DEVICE_CONFIG)
        main_port, metrics_port = free_port(), free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(source),
            "KUBECONFIG": str(await plane.kubeconfig_of(SCHEDULER_USER)),
        }
        command = [
            sys.executable, "-m", "pyhami.cli", "scheduler",
            f"--device-config-file={config_file}",
            f"--http_bind=127.0.0.1:{main_port}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--cert_file={tls.cert_file}", f"--key_file={tls.key_file}",
            f"--extender-client-ca={tls.ca_file}",
            f"--scheduler-name={SCHEDULER_NAME}",
            "--log-format=json",
        ]  # fmt: skip
        log_file = (workdir / "scheduler.log").open("wb")
        scheduler = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=log_file, stderr=asyncio.subprocess.STDOUT
        )
        profiler: asyncio.subprocess.Process | None = None
        try:
            client_context = ssl.create_default_context(cafile=str(tls.ca_file))
            client_cert = tls.client_certificate()
            client_context.load_cert_chain(str(client_cert.cert_file), str(client_cert.key_file))
            await wait_http(f"https://127.0.0.1:{main_port}/healthz", client_context)
            started = time.perf_counter()
            slots = asyncio.Semaphore(CREATES_IN_FLIGHT)

            async def create_node(i: int) -> None:
                async with slots:
                    await admin.create(NODES, node_object(f"bench-node-{i:05d}", i))

            await asyncio.gather(*(create_node(i) for i in range(args.nodes)))
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            await wait_scheduler_nodes(metrics_url, args.nodes)
            print(
                f"{args.nodes} nodes x {GPUS_PER_NODE} GPUs registered and in the scheduler's "
                f"ledger in {time.perf_counter() - started:.1f} s",
                flush=True,
            )
            await plane.start_kube_scheduler(
                ExtenderConfig.hami_chart(
                    f"https://127.0.0.1:{main_port}",
                    ca_pem=tls.ca_pem,
                    client_certificate=client_cert,
                )
            )
            plugin = DevicePluginDouble(SimpleNamespace(client=admin))  # type: ignore[arg-type]
            plugin.start()
            admin_config = yaml.safe_load(plane.admin_kubeconfig.read_text())
            user = admin_config["users"][0]["user"]
            scrapers = Scrapers(
                f"https://127.0.0.1:{plane.ports.scheduler}/metrics",
                metrics_url,
                (user["client-certificate"], user["client-key"]),
            )
            await scrapers.both()  # fails early when kube-scheduler's metrics are refused
            if args.profile:
                profiler = await asyncio.create_subprocess_exec(
                    "py-spy", "record", "--pid", str(scheduler.pid), "--format", "raw",
                    "--rate", "200", "-o", str(Path(args.profile).resolve()),
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                )  # fmt: skip
            print(
                f"{args.pods} pods per phase, created {CREATES_IN_FLIGHT} at a time; "
                f"pyhami scheduler from {source}",
                flush=True,
            )
            processes = {
                **plane.processes(),
                "pyhami-scheduler": scheduler.pid,
                "benchmark": os.getpid(),
            }
            phases = [
                await run_phase(admin, Phase(name, args.pods), "default", scrapers, processes)
                for name in (*args.policies.split(","), "plain")
            ]
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                await profiler.wait()
                profiler = None
            await plugin.stop()
            plain = phases[-1].rate
            for phase in phases[:-1]:
                ratio = phase.rate / plain if plain else 0.0
                print(
                    f"ratio {phase.name}: {phase.rate:.1f} GPU pods/s / {plain:.1f} plain pods/s "
                    f"= {ratio:.2f} (targets: >= 100 GPU pods/s, >= 0.5 x plain)",
                    flush=True,
                )
            if args.profile:
                print("\n".join(top_of_profile(Path(args.profile))))
            if args.json:
                Path(args.json).write_text(
                    json.dumps({p.name: {"rate": p.rate, "lines": p.lines} for p in phases})
                )
        finally:
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                await profiler.wait()
            scheduler.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(scheduler.wait(), 15)
            except TimeoutError:
                scheduler.kill()
                await scheduler.wait()
            log_file.close()
            if args.keep_logs:
                print(f"logs kept under {workdir}")
    if not args.keep_logs:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


def policies(value: str) -> str:
    names = value.split(",")
    unknown = [name for name in names if name not in ("spread", "binpack")]
    if unknown or not value:
        raise argparse.ArgumentTypeError(f"unknown node policy {unknown}: spread, binpack")
    return value


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument(
        "--policies",
        default="spread,binpack",
        type=policies,
        help="node policies to run, comma-separated (the plain-pod phase always runs last)",
    )
    parser.add_argument("--profile", help="py-spy raw profile of the pyhami scheduler here")
    parser.add_argument("--scheduler-src", help="src/ of the pyhami to run as the scheduler")
    parser.add_argument("--json", help="write the phases' rates here")
    parser.add_argument("--keep-logs", action="store_true")
    asyncio.run(main(parser.parse_args()))
