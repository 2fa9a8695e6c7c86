"""Scheduler memory, /filter latency and lines of src/: two pyhami trees, in the same run.

For the baseline tree (`--baseline-src DIR`) and the candidate (`--src DIR`, this checkout's
src/ by default), each scheduler runs from its own tree's code in a process of its own
(`benchmarks/footprint_worker.py`: the scheduler service as `pyhami scheduler` builds it, its
informers fed over HTTP by an embedded FakeKubeAPIServer that this process serves, one per tree,
both filled alike): `--nodes` Nodes of 8 A100 80 GB cards split 10 ways, registered as the device
plugin registers them, and `--pods` GPU pods (1 GPU, 3,000 MiB, 10 % cores) bound across them,
annotated as the scheduler's filter and bind and the device plugin's Allocate leave them. Then:

1. memory once its caches are synced, after a garbage collection: the growth of the process's
   RSS from just before its informers start, in a run that traces nothing, and in a second run
   tracemalloc's current and peak traced memory;
2. /filter latency: `--filters` pending GPU pods, each posted in turn to the extender's /filter
   endpoint over HTTPS on loopback with every node's name (nodeCacheCapable, as kube-scheduler
   calls it), timed from request to answer here (the pod's annotation patch on the API double
   included); `--streams` such streams per tree, baseline and candidate taking turns, p50/p99
   per stream and the median of the streams compared;
3. non-blank lines of the tree's Python files.

Noise: for latency, the larger spread (max - min) / median across one tree's streams; for
memory, 2 %; lines are exact. The last line says whether any measure of the candidate is worse
than the baseline's by more than its noise. Run from the repository root: `python3
benchmarks/scheduler_footprint.py --baseline-src ../old/src [--src src] [--nodes 1000]
[--pods 10000] [--filters 500] [--streams 3] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # not an installed copy

from benchmarks.gpu_cluster import (
    GPU_POD_LIMITS,
    GPUS_PER_NODE,
    POD_GPU_CORES,
    POD_GPU_MIB,
    TOLERATE_ALL,
    card_id,
    node_object,
)
from benchmarks.prometheus_text import samples
from benchmarks.stats import percentile
from pyhami.model import ContainerDevice
from pyhami.protocol import (
    KEY_BIND_PHASE,
    KEY_BIND_TIME,
    KEY_NVIDIA_ALLOCATED,
    KEY_NVIDIA_TO_ALLOCATE,
    KEY_VGPU_NODE,
    KEY_VGPU_TIME,
    BindPhase,
    encode_pod_single_device,
)
from pyhami.sim.demo.cluster import DEVICE_CONFIG, SCHEDULER_NAME
from pyhami.testing import FakeKubeAPIServer
from pyhami.testing.certs import ServingFiles, write_serving_certificate

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "footprint_worker.py"
NAMESPACE = "default"
MEMORY_NOISE = 0.02
SYNC_TIMEOUT_S = 600.0
# Before a stream, the scheduler's pod informer takes the new pods' ADDED events, so that
# they are not handled in the middle of the timed requests.
SETTLE_S = 1.0
QUICK = {"nodes": 20, "pods": 100, "filters": 10}
MIB = 1024 * 1024


def gpu_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"bench": "footprint"}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "tolerations": TOLERATE_ALL,
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": dict(GPU_POD_LIMITS)}}
            ],
        },
    }


def bound_pod(index: int, nodes: int, stamp: str) -> dict[str, Any]:
    """Pod `index`, spread round-robin over nodes and their cards, as it is once running."""
    node_index, card = index % nodes, (index // nodes) % GPUS_PER_NODE
    node = f"bench-node-{node_index:05d}"
    device = ContainerDevice(card_id(node_index, card), "NVIDIA", POD_GPU_MIB, POD_GPU_CORES)
    pod = gpu_pod(f"running-{index:05d}")
    pod["metadata"]["annotations"] = {
        KEY_VGPU_NODE: node,
        KEY_VGPU_TIME: stamp,
        KEY_NVIDIA_TO_ALLOCATE: encode_pod_single_device(((),)),  # emptied by Allocate
        KEY_NVIDIA_ALLOCATED: encode_pod_single_device(((device,),)),
        KEY_BIND_PHASE: BindPhase.SUCCESS.value,
        KEY_BIND_TIME: stamp,
    }
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    return pod


def source_lines(source: Path) -> int:
    return sum(
        1 for path in source.rglob("*.py") for line in path.read_text().splitlines() if line.strip()
    )


@dataclass
class Tree:
    label: str
    source: Path
    api: FakeKubeAPIServer
    workdir: Path
    memory: dict[str, float] = field(default_factory=dict)
    main_port: int = 0
    streams: list[list[float]] = field(default_factory=list)

    def config(self, tls: ServingFiles, *, trace: bool) -> Path:
        path = self.workdir / ("trace.json" if trace else "serve.json")
        settings = {
            "device_config_file": str(self.workdir.parent / "device-config.yaml"),
            "http_bind": "127.0.0.1:0",
            "metrics_bind_address": "127.0.0.1:0",
            "cert_file": str(tls.cert_file),
            "key_file": str(tls.key_file),
            "extender_client_ca": str(tls.ca_file),
            "scheduler_name": SCHEDULER_NAME,
        }
        kubeconfig = self.api.write_kubeconfig(self.workdir / "kubeconfig")
        config = {"trace": trace, "kubeconfig": str(kubeconfig), "settings": settings}
        path.write_text(json.dumps(config))
        return path


async def start_worker(
    tree: Tree, tls: ServingFiles, *, trace: bool
) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    """The tree's scheduler in a fresh process, and the report it prints once synced."""
    log = tree.workdir / ("trace.log" if trace else "serve.log")
    with log.open("wb") as errors:
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            str(tree.source),
            str(tree.config(tls, trace=trace)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    assert worker.stdout is not None
    try:
        line = await asyncio.wait_for(worker.stdout.readline(), SYNC_TIMEOUT_S)
    except TimeoutError:
        line = b""
    if not line:
        worker.kill()
        await worker.wait()
        raise SystemExit(
            f"{tree.label} scheduler ({tree.source}) did not sync:\n{log.read_text()[-3000:]}"
        )
    return worker, json.loads(line)


async def check_charged(tree: Tree, http: aiohttp.ClientSession, port: int, pods: int) -> None:
    """The scheduler's ledger holds every bound pod: its GPUs' share counts add up to them."""
    async with http.get(f"http://127.0.0.1:{port}/metrics") as answer:
        text = await answer.text()
    shares = sum(v for (name, _), v in samples(text).items() if name == "hami_gpu_shared_count")
    if shares != pods:
        raise SystemExit(f"{tree.label} scheduler charges {shares:g} of the {pods} bound pods")


async def stop_worker(worker: asyncio.subprocess.Process) -> None:
    assert worker.stdin is not None
    worker.stdin.close()
    await worker.wait()


async def filter_stream(
    tree: Tree, http: aiohttp.ClientSession, node_names: list[str], name: str, count: int
) -> list[float]:
    """Seconds from request to answer of each /filter call for `count` new pending pods."""
    pods = [
        tree.api.store.create("pods", NAMESPACE, gpu_pod(f"{name}-{i:05d}")).body
        for i in range(count)
    ]
    await asyncio.sleep(SETTLE_S)
    url = f"https://127.0.0.1:{tree.main_port}/filter"
    latencies = []
    for pod in pods:
        body = json.dumps({"Pod": pod, "NodeNames": node_names}).encode()
        started = time.perf_counter()
        async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            answer = await r.json()
        latencies.append(time.perf_counter() - started)
        if r.status != 200 or answer.get("Error") or len(answer.get("NodeNames") or ()) != 1:
            raise SystemExit(f"{tree.label} /filter {pod['metadata']['name']}: {r.status} {answer}")
    return latencies


@contextlib.asynccontextmanager
async def api_double(nodes: int, pods: int) -> AsyncIterator[FakeKubeAPIServer]:
    async with FakeKubeAPIServer() as api:
        stamp = str(int(time.time()))
        for i in range(nodes):
            api.store.create("nodes", None, node_object(f"bench-node-{i:05d}", i))
        for i in range(pods):
            api.store.create("pods", NAMESPACE, bound_pod(i, nodes, stamp))
        yield api


@dataclass
class Measure:
    name: str
    baseline: float
    candidate: float
    noise: float
    unit: str

    @property
    def ratio(self) -> float:
        return self.candidate / self.baseline if self.baseline else float("inf")

    @property
    def worse(self) -> bool:
        return self.ratio > 1 + self.noise


def spread(values: Sequence[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def measures(baseline: Tree, candidate: Tree) -> list[Measure]:
    found = [
        Measure(title, baseline.memory[key] / MIB, candidate.memory[key] / MIB, MEMORY_NOISE, "MiB")
        for key, title in (
            ("rss_growth", "memory: RSS growth"),
            ("traced_current", "memory: tracemalloc current"),
            ("traced_peak", "memory: tracemalloc peak"),
        )
    ]
    for fraction, title in ((0.5, "/filter p50"), (0.99, "/filter p99")):
        per_stream = [
            [1000 * percentile(stream, fraction) for stream in tree.streams]
            for tree in (baseline, candidate)
        ]
        noise = max(spread(values) for values in per_stream)
        medians = [statistics.median(values) for values in per_stream]
        found.append(Measure(title, medians[0], medians[1], noise, "ms"))
    lines = [source_lines(tree.source) for tree in (baseline, candidate)]
    found.append(Measure("src lines (non-blank .py)", lines[0], lines[1], 0.0, "lines"))
    return found


def report(args: argparse.Namespace, baseline: Tree, candidate: Tree) -> None:
    print(
        f"scheduler_footprint: {args.nodes} nodes x {GPUS_PER_NODE} GPUs, {args.pods} GPU pods "
        f"bound; /filter over HTTPS on loopback, {args.streams} streams of {args.filters} "
        "pending pods per tree, taking turns"
    )
    for tree in (baseline, candidate):
        print(f"{tree.label:>9}: {tree.source} (caches synced in {tree.memory['sync_s']:.1f} s)")
        for fraction in (0.5, 0.99):
            values = ", ".join(
                f"{1000 * percentile(stream, fraction):.2f}" for stream in tree.streams
            )
            print(f"           /filter p{round(100 * fraction)} per stream (ms): {values}")
    print(f"{'measure':<30} {'baseline':>12} {'candidate':>12} {'ratio':>7} {'noise':>7}")
    found = measures(baseline, candidate)
    for m in found:
        print(
            f"{m.name:<30} {m.baseline:>12.2f} {m.candidate:>12.2f} {m.ratio:>7.3f} "
            f"{100 * m.noise:>6.1f}%  {m.unit}{'  WORSE' if m.worse else ''}"
        )
    worse = [m.name for m in found if m.worse]
    if worse:
        print(f"verdict: worse than the baseline by more than noise: {', '.join(worse)}")
    else:
        print("verdict: no measure worse than the baseline by more than noise")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="pyhami-footprint-") as tmp:
        workdir = Path(tmp)
        tls = write_serving_certificate(workdir)
        (workdir / "device-config.yaml").write_text(DEVICE_CONFIG)
        trusted = tls.client_certificate().load_into(
            ssl.create_default_context(cadata=tls.ca_pem.decode())
        )
        node_names = [f"bench-node-{i:05d}" for i in range(args.nodes)]
        async with (
            api_double(args.nodes, args.pods) as baseline_api,
            api_double(args.nodes, args.pods) as candidate_api,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as http,
        ):
            trees = []
            for label, source, api in (
                ("baseline", args.baseline_src, baseline_api),
                ("candidate", args.src, candidate_api),
            ):
                (workdir / label).mkdir()
                trees.append(Tree(label, source, api, workdir / label))
            for tree in trees:  # one at a time: the traced sync is slow and CPU-bound
                worker, traced = await start_worker(tree, tls, trace=True)
                await worker.wait()
                tree.memory.update(traced)
            workers = []
            for tree in trees:
                worker, served = await start_worker(tree, tls, trace=False)
                workers.append(worker)
                tree.memory.update(served)
                tree.main_port = int(served["main_port"])
                await check_charged(tree, http, int(served["metrics_port"]), args.pods)
            for tree in trees:  # the TLS handshake and first-call costs, untimed
                await filter_stream(tree, http, node_names, "warm-up", 1)
            for stream in range(args.streams):
                for tree in trees:
                    name = f"pending-{stream}"
                    tree.streams.append(
                        await filter_stream(tree, http, node_names, name, args.filters)
                    )
            for worker in workers:
                await stop_worker(worker)
        report(args, *trees)


def source_tree(value: str) -> Path:
    path = Path(value).resolve()
    if not (path / "pyhami" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{value} is not a src/ folder holding pyhami/")
    return path


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive count")
    return number


def stream_count(value: str) -> int:
    number = int(value)
    if number < 2:
        raise argparse.ArgumentTypeError(f"{value}: at least 2 streams, to measure the noise")
    return number


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", type=source_tree, required=True)
    parser.add_argument("--src", type=source_tree, default=ROOT / "src")
    parser.add_argument("--nodes", type=positive, default=1000)
    parser.add_argument("--pods", type=positive, default=10000)
    parser.add_argument("--filters", type=positive, default=500, help="pending pods per stream")
    parser.add_argument("--streams", type=stream_count, default=3, help="filter streams per tree")
    parser.add_argument(
        "--quick", action="store_true", help=f"a small cluster for a smoke test: {QUICK}"
    )
    arguments = parser.parse_args()
    if arguments.quick:
        vars(arguments).update(QUICK)
    asyncio.run(main(arguments))
