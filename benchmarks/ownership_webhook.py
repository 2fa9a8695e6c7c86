"""What the ownership webhook costs a pod update: merge patches of a pod through the fake API
server, first with no webhook reviewing updates (the baseline), then in the same run with our
scheduler's `ownership.pyhami.io` webhook reviewing each one over HTTPS, as the chart
registers it (CREATE and UPDATE, no object selector).

Every patch changes one annotation the user owns, so each review is allowed. It prints p50/p99
of each and the ratio with / without. Run from the repository root:
`python3 benchmarks/ownership_webhook.py [--patches 500]`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # not an installed copy

from benchmarks.stats import percentile
from pyhami.sim.demo.cluster import WEBHOOKS
from tests.scheduler.cluster import pod_object, running_cluster, wait_for

OWNERSHIP = next(hook for hook in WEBHOOKS if hook.name == "ownership.pyhami.io")


async def run(patches: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp)) as cluster:
            process = await cluster.scheduler()
            await wait_for(process.synced.is_set, what="scheduler caches synced")
            await cluster.create_pod(pod_object("p"))

            async def patch_times() -> list[float]:
                times = []
                for i in range(patches):
                    body = {"metadata": {"annotations": {"team/build": str(i)}}}
                    started = time.perf_counter()
                    await cluster.client.patch_pod("default", "p", body)
                    times.append(time.perf_counter() - started)
                return times

            await patch_times()  # warm the connections
            baseline = await patch_times()
            cluster.api.admission.register(
                OWNERSHIP.name,
                f"https://127.0.0.1:{process.main_port}{OWNERSHIP.path}",
                ca_bundle=cluster.ca,
                rules=OWNERSHIP.rules,
            )
            await patch_times()
            reviewed = await patch_times()
            calls = [c for c in cluster.api.admission.calls if c.webhook == OWNERSHIP.name]
            assert calls and all(c.error is None for c in calls), "every review answered"
    print(f"ownership_webhook: {patches} merge patches of one pod's own annotation")
    for label, times in (("no update webhook", baseline), ("ownership webhook", reviewed)):
        print(
            f"  {label:<18} p50 {percentile(times, 0.5) * 1000:6.2f} ms   "
            f"p99 {percentile(times, 0.99) * 1000:6.2f} ms"
        )
    ratio = percentile(reviewed, 0.5) / percentile(baseline, 0.5)
    print(f"  ratio (with / without, p50): {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patches", type=int, default=500)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    asyncio.run(run(args.patches))


if __name__ == "__main__":
    main()
