"""One `/metrics` scrape of a node with 100 GPU containers: pyhami's reads vs a whole-file copy.

Every container has a v1 shared region (2 MB, two live processes on one of 8 GPUs) and a pod
labelled to the node with its allocation annotation; NVML is FakeNVML with 8 cards. It prints
the median and p95 of a whole scrape (collect + text exposition), the time per container, and
in the same run the same scrape done the naive way — every region file opened again and copied
whole on each scrape, instead of kept open and read only where it is in use (header, tail, live
slots) — with the ratio between the two.
Run: `python3 benchmarks/monitor_scrape.py [--containers 100] [--scrapes 30]`.
"""

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyhami.kube import SystemClock
from pyhami.kube.views import read_pod
from pyhami.monitor.metrics import MonitorCollector, monitor_registry
from pyhami.monitor.pods import MonitoredPod, pod_view
from pyhami.monitor.region import Region
from pyhami.monitor.sanity import SanityAlarms
from pyhami.monitor.scan import RegionDirectory
from pyhami.nvml import RunningProcess
from pyhami.testing import FakeNVML
from pyhami.testing.fake_nvml import a100_80g
from tests.monitor.builders import NODE, pod_object
from tests.monitor.regionfile import Mem, Proc, RegionSpec, uuid_of, write_region

MIB = 1 << 20
GPUS = 8


class Pods:
    def __init__(self, views: list[MonitoredPod]) -> None:
        self.views = views

    def pods(self) -> list[MonitoredPod]:
        return self.views


def build_node(root: Path, containers: int) -> Pods:
    views = []
    for n in range(containers):
        uid = f"{n:08d}-0000-4000-8000-{n:012d}"
        gpu = uuid_of(n % GPUS)
        write_region(
            root / f"{uid}_main" / f"{n}.cache",
            RegionSpec(
                uuids=(gpu,),
                limits=(8000 * MIB,),
                sm_limits=(30,),
                procs=(
                    Proc(
                        pid=7, hostpid=1000 + n, used={0: Mem(300, 20, 4000, 4320)}, sm_util={0: 10}
                    ),
                    Proc(
                        pid=8, hostpid=5000 + n, used={0: Mem(300, 20, 1000, 1320)}, sm_util={0: 5}
                    ),
                ),
                last_kernel_time=int(time.time()) - 3,
            ),
        )
        views.append(
            pod_view(read_pod(pod_object(f"pod-{n}", uid, allocated=f"{gpu},NVIDIA,8000,30:;")))
        )
    return Pods(views)


class RereadingRegions(RegionDirectory):
    """The baseline: each scrape opens every region file again and copies all of it."""

    def __init__(self, kept: RegionDirectory) -> None:
        super().__init__(kept.root, kept.grace_seconds)
        self._kept = kept

    def reread(self) -> None:
        for key, kept in self._kept.loaded.items():
            old = self.loaded.pop(key, None)
            if old is not None:
                old.close()
            self.loaded[key] = Region.open(kept.path)
            with kept.path.open("rb") as whole:
                whole.read()


def time_scrapes(scrape: Callable[[], bytes], scrapes: int) -> list[float]:
    scrape()  # warm up
    times = []
    for _ in range(scrapes):
        start = time.perf_counter()
        scrape()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    nvml = FakeNVML.with_gpus(*(a100_80g(uuid=uuid_of(g)) for g in range(GPUS)))
    for gpu in range(GPUS):  # every region's host pids run on its card: no sanity alarms
        pids = [base + n for n in range(gpu, args.containers, GPUS) for base in (1000, 5000)]
        nvml.set_usage(gpu, processes=tuple(RunningProcess(pid, 0) for pid in pids))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pods = build_node(root, args.containers)
        kept = RegionDirectory(root, grace_seconds=300)
        kept.update({view.uid for view in pods.views}, now=time.time())
        assert len(kept.loaded) == args.containers

        def registry_over(regions: RegionDirectory) -> Callable[[], bytes]:
            collector = MonitorCollector(
                node=NODE,
                pods=pods,
                regions=regions,
                open_nvml=nvml.open,
                alarms=SanityAlarms(),
                clock=SystemClock(),
            )
            registry = monitor_registry(collector)
            return lambda: generate_latest(registry)

        ours = registry_over(kept)
        rereading = RereadingRegions(kept)
        naive_registry = registry_over(rereading)

        def naive() -> bytes:
            rereading.reread()
            return naive_registry()

        assert ours().count(b"hami_vgpu_memory_used_bytes{") == args.containers
        ours_t = time_scrapes(ours, args.scrapes)
        naive_t = time_scrapes(naive, args.scrapes)
        rereading.close()
        kept.close()

    def row(label: str, times: list[float]) -> float:
        median = statistics.median(times)
        p95 = sorted(times)[int(0.95 * (len(times) - 1))]
        print(
            f"{label:<34} median {median * 1e3:7.2f} ms  p95 {p95 * 1e3:7.2f} ms  "
            f"per container {median / args.containers * 1e6:7.1f} us"
        )
        return median

    print(f"scrape of {args.containers} containers, {GPUS} GPUs, {args.scrapes} scrapes each")
    mine = row("pyhami (kept open, read in use)", ours_t)
    base = row("baseline (re-read every file)", naive_t)
    print(f"ratio baseline / pyhami: {base / mine:.1f}x")
    print(f"target: a scrape under 100 ms -> {'met' if mine < 0.1 else 'NOT met'}")


if __name__ == "__main__":
    main()
