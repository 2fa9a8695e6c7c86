"""One scheduling decision on big clusters: pyhami's incremental ledger vs HAMi's rebuild.

Clusters of 100, 1,000 and 5,000 nodes, each with 8 GPUs (A100 80 GB, split 10) and 8 running
single-GPU pods per node at random sizes. Two pending pods:
- "fits": 1 GPU, 8,000 MiB, 30 % cores — many nodes can take it;
- "none fits": 8 whole GPUs (100 % cores each) — every node is busy, so every node needs its
  reason string;
- "fits+why": the first pod again with `all_reasons=True` (every other node's reason too, as
  the scheduler wants for its events).
For each size and pod it prints p50/p99 of `engine.decide` on the incremental ledger and, in
the same run, of HAMi's method — rebuild every node's usage from every pod, then decide — and
the ratio between the two. Run: `python3 benchmarks/filter_scale.py [--sizes 100,1000,5000]`.
"""

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.stats import percentile
from pyhami import engine
from pyhami.devices.inventory import NodeInventory
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.kube.views import read_pod
from pyhami.model import ContainerDevice, DeviceInfo, NodeName, PodView

ENGINE_CONFIG = engine.EngineConfig(vendor=NvidiaVendor())

GPUS_PER_NODE = 8
PODS_PER_NODE = 8
CARD_MEMORY = 81920


def make_cluster(
    nodes: int, seed: int
) -> tuple[dict[NodeName, NodeInventory], list[engine.PodAllocation]]:
    rng = random.Random(seed)
    inventories: dict[NodeName, NodeInventory] = {}
    pods: list[engine.PodAllocation] = []
    for n in range(nodes):
        name = NodeName(f"node-{n:05d}")
        cards = tuple(
            DeviceInfo(
                id=f"GPU-{n:05d}-{g}",
                index=g,
                count=10,
                devmem=CARD_MEMORY,
                devcore=100,
                type="NVIDIA-A100-SXM4-80GB",
                numa=g // 4,
                mode="hami-core",
                health=True,
            )
            for g in range(GPUS_PER_NODE)
        )
        inventories[name] = NodeInventory(cards)
        for p in range(PODS_PER_NODE):
            card = rng.randrange(GPUS_PER_NODE)
            device = ContainerDevice(
                f"GPU-{n:05d}-{card}", "NVIDIA", rng.randrange(2000, 20000), rng.randrange(5, 40)
            )
            pods.append(
                engine.PodAllocation(
                    key=f"uid-{n}-{p}",
                    namespace="default",
                    name=f"run-{n}-{p}",
                    node=name,
                    containers=((device,),),
                )
            )
    return inventories, pods


def pending_pod(name: str, limits: Mapping[str, str]) -> PodView:
    return read_pod(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": dict(limits)}}]},
        }
    )


FITS = pending_pod(
    "fits", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"}
)
NONE_FITS = pending_pod("none-fits", {"nvidia.com/gpu": "8", "nvidia.com/gpucores": "100"})


def timed(
    run: Callable[[], engine.Decision], repeats: int, clock: Callable[[], float]
) -> tuple[list[float], engine.Decision]:
    samples = []
    decision = run()  # warm-up, and the answer both methods must agree on
    for _ in range(repeats):
        start = clock()
        run()
        samples.append((clock() - start) * 1000)
    return samples, decision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--baseline-repeats", type=int, default=10)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: perf_counter; cpu: this thread's CPU time (on a shared, busy machine "
        "wall time also counts the time spent waiting for a core)",
    )
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    print(f"clock: {args.clock}")
    options: dict[str, Any] = {"config": ENGINE_CONFIG, "quotas": None}
    print(
        f"{'nodes':>6} {'pod':<10} {'engine p50':>11} {'p99':>8} "
        f"{'rebuild p50':>12} {'p99':>9} {'ratio p50':>10} {'ratio p99':>10}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        inventories, pods = make_cluster(size, seed=size)
        ledger = engine.build_ledger(inventories, pods)
        candidates = list(inventories)
        # What a long-running scheduler does once its caches are synced: move the cluster
        # state out of the collector's way, so a full collection does not walk 40,000 cards
        # and pods in the middle of a decision (it is what p99 measured otherwise).
        gc.collect()
        gc.freeze()
        cases = (
            ("fits", FITS, options),
            ("none-fits", NONE_FITS, options),
            ("fits+why", FITS, {**options, "all_reasons": True}),  # every other node's reason
        )
        for label, pod, kwargs in cases:
            plan = engine.plan_pod(pod, ENGINE_CONFIG)  # read once per request, as /filter does
            incremental = partial(engine.decide, plan, candidates, ledger, **kwargs)
            rebuild = partial(_rebuild_then_decide, plan, candidates, inventories, pods, kwargs)
            ours, answer = timed(incremental, args.repeats, clock)
            theirs, baseline_answer = timed(rebuild, args.baseline_repeats, clock)
            if (answer.node, dict(answer.failed_nodes)) != (
                baseline_answer.node,
                dict(baseline_answer.failed_nodes),
            ):
                raise SystemExit(f"{size} {label}: the two methods disagree")
            ours50, ours99 = percentile(ours, 0.5), percentile(ours, 0.99)
            theirs50, theirs99 = percentile(theirs, 0.5), percentile(theirs, 0.99)
            print(
                f"{size:>6} {label:<10} {ours50:>9.2f}ms {ours99:>6.2f}ms "
                f"{theirs50:>10.2f}ms {theirs99:>7.2f}ms "
                f"{theirs50 / ours50:>9.1f}x {theirs99 / ours99:>9.1f}x"
                f"  ({answer.outcome.value}, mean {statistics.fmean(ours):.2f}ms)"
            )


def _rebuild_then_decide(
    plan: engine.PodPlan,
    candidates: list[NodeName],
    inventories: dict[NodeName, NodeInventory],
    pods: list[engine.PodAllocation],
    options: dict[str, Any],
) -> engine.Decision:
    """HAMi's method: every node's usage rebuilt from every pod, then the same decision."""
    fresh = engine.build_ledger(inventories, pods)
    return engine.decide(plan, candidates, fresh, **options)


if __name__ == "__main__":
    main()
