"""End-to-end scheduling throughput of `pyhami scheduler` at 1,000 nodes, over real sockets.

The FakeKubeAPIServer holds N nodes x 8 GPUs (A100 80 GB, split 10); our scheduler runs with
TLS and its webhook registered; the KubeSchedulerHarness filters and binds every pod through
our extender exactly as kube-scheduler does (NodeNames, bind verb); a device-plugin double
marks bound pods allocated and releases the node lock, as HAMi's plugin does after Allocate.
P pods (1 GPU, 3,000 MiB, 10 % cores) are created at once.

It prints pods/s from the first create to the last bind, p50/p99 of filter and bind latency
as the harness saw them, and — measured in the same run — the scheduler's own handler time
(`FilterBind.filter` / `.bind` from entry to answer, its API calls included; the rest of the
harness's latency is HTTP, TLS and waiting for the shared event loop), the time spent inside
`engine.decide` alone with the ratio end-to-end / engine-only, and the garbage collector's
pauses (a full collection over the caches stalls everything on the loop).

Run from the repository root: `python3 benchmarks/scheduler_throughput.py [--nodes 1000]
[--pods 300]`. Everything shares one event loop (and the CPU) with the API double and the
harness, so the numbers are a lower bound for the scheduler alone.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # not an installed copy

from benchmarks.stats import percentile
from pyhami.testing import KubeSchedulerHarness
from pyhami.testing.scheduler_harness import ExtenderConfig, Result
from tests.scheduler.builders import card as gpu
from tests.scheduler.cluster import (
    SCHEDULER_NAME,
    DevicePluginDouble,
    node_object,
    pod_object,
    running_cluster,
    wait_for,
)

GPUS_PER_NODE = 8

T = TypeVar("T")


def timed(call: Callable[[Any], Awaitable[T]], into: list[float]) -> Callable[[Any], Awaitable[T]]:
    """`call`, appending each call's wall time from entry to answer to `into`."""

    async def wrapper(args: Any) -> T:
        started = time.perf_counter()
        try:
            return await call(args)
        finally:
            into.append(time.perf_counter() - started)

    return wrapper


class GcPauses:
    """Every collection's duration and generation while installed in `gc.callbacks`."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def summary(self) -> str:
        full = [s for g, s in self.pauses if g == 2]
        total = sum(s for _, s in self.pauses)
        longest = max((s for _, s in self.pauses), default=0.0)
        return (
            f"{len(self.pauses)} collections, {total * 1000:.0f} ms in all, longest "
            f"{longest * 1000:.1f} ms; {len(full)} full ({sum(full) * 1000:.0f} ms)"
        )


async def run(nodes: int, pods: int, policy: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp)) as cluster:
            for n in range(nodes):
                cards = [gpu(f"GPU-{n:05d}-{c}", c, mem=81920) for c in range(GPUS_PER_NODE)]
                cluster.api.store.create("nodes", None, node_object(f"node-{n:05d}", cards))
            process = await cluster.scheduler(node_scheduler_policy=policy)
            await wait_for(process.synced.is_set, timeout=120, what="scheduler caches synced")
            cluster.register_webhook(process)
            plugin = DevicePluginDouble(cluster)
            plugin.start()
            url = f"https://127.0.0.1:{process.main_port}"
            harness = KubeSchedulerHarness(
                cluster.client,
                ExtenderConfig.hami_chart(
                    url, ca_pem=cluster.ca, client_certificate=cluster.client_certificate
                ),
                scheduler_name=SCHEDULER_NAME,
                backoff_initial_s=0.01,
                backoff_max_s=0.2,
                record_events=False,
            )
            service = process.service
            handler_filter: list[float] = []
            handler_bind: list[float] = []
            service.filter = timed(service.filter, handler_filter)  # type: ignore[method-assign]
            service.bind = timed(service.bind, handler_bind)  # type: ignore[method-assign]
            gc_pauses = GcPauses()
            gc.callbacks.append(gc_pauses)
            async with harness:
                # In a cluster the harness (kube-scheduler) and the API double are other
                # processes; freeze their start-up heap as the scheduler freezes its own, so
                # that their caches do not make this process's full collections dearer.
                gc.collect()
                gc.freeze()
                print(f"  frozen heap       {gc.get_freeze_count()} objects", flush=True)
                engine_before = process.service.engine_seconds
                started = time.perf_counter()
                await asyncio.gather(
                    *(
                        cluster.create_pod(pod_object(f"p{i:05d}", mem=3000, cores=10))
                        for i in range(pods)
                    )
                )
                await harness.wait_bound_count(pods, timeout_s=600)
                elapsed = time.perf_counter() - started
                engine = process.service.engine_seconds - engine_before
            gc.callbacks.remove(gc_pauses)
            gc.unfreeze()
            await plugin.stop()
            m = harness.metrics
            filters = len(m.filter_latencies_s)
            print(
                f"scheduler_throughput: {nodes} nodes x {GPUS_PER_NODE} GPUs, {pods} pods, "
                f"node policy {policy}"
            )
            print(
                f"  end to end        {pods / elapsed:8.1f} pods/s  ({elapsed:.2f} s, "
                f"{m.attempts} attempts, {m.results[Result.BIND_ERROR]} bind retries)"
            )
            print(
                f"  filter latency    p50 {m.filter_p(0.5) * 1000:7.2f} ms   "
                f"p99 {m.filter_p(0.99) * 1000:7.2f} ms   ({filters} calls)"
            )
            print(
                f"  bind latency      p50 {m.bind_p(0.5) * 1000:7.2f} ms   "
                f"p99 {m.bind_p(0.99) * 1000:7.2f} ms"
            )
            filter_ms = [percentile(handler_filter, q) * 1000 for q in (0.5, 0.99)]
            bind_ms = [percentile(handler_bind, q) * 1000 for q in (0.5, 0.99)]
            print(
                f"  scheduler handler filter p50 {filter_ms[0]:7.2f} ms   "
                f"p99 {filter_ms[1]:7.2f} ms;  bind p50 "
                f"{bind_ms[0]:.2f} ms   p99 {bind_ms[1]:.2f} ms"
            )
            print(
                f"  waiting (harness - handler, mean)  filter "
                f"{(_mean(m.filter_latencies_s) - _mean(handler_filter)) * 1000:.2f} ms   bind "
                f"{(_mean(m.bind_latencies_s) - _mean(handler_bind)) * 1000:.2f} ms"
            )
            print(f"  gc                {gc_pauses.summary()}")
            per_decision = engine / max(filters, 1)
            print(
                f"  engine only       {engine:.3f} s in decide, {per_decision * 1000:.2f} ms "
                f"per filter (mean); filter p50 / engine mean = "
                f"{m.filter_p(0.5) / per_decision if per_decision else float('inf'):.1f}x"
            )
            print(
                f"  ratio             end-to-end time / engine-only time = "
                f"{elapsed / engine if engine else float('inf'):.1f}x"
            )
            if m.filter_latencies_s:
                print(f"  filter mean       {statistics.mean(m.filter_latencies_s) * 1000:.2f} ms")


def _mean(values: list[float]) -> float:
    return statistics.mean(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--node-policy", default="spread", choices=("spread", "binpack"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    asyncio.run(run(args.nodes, args.pods, args.node_policy))


if __name__ == "__main__":
    main()
