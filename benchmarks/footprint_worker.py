"""One pyhami tree's scheduler for `benchmarks/scheduler_footprint.py`, in a process of its own.

Run as `python3 benchmarks/footprint_worker.py SRC CONFIG`: only SRC's pyhami is imported; the
scheduler service is built as `pyhami scheduler` builds it (the scheduler process on a client
made from a kubeconfig) against the API server CONFIG names, and once its caches are synced it
prints one JSON line: its memory, the seconds to sync, its extender's and metrics' ports. With
`trace` in CONFIG it traces Python allocations (tracemalloc) from before its informers start,
reports the traced memory and exits; otherwise it reports its RSS growth and serves until stdin
closes.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import logging
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

# Public entry points the scheduler service is built from, in each spelling a tree may use
# (the first one a tree has is taken), so that trees from before and after a rename compare.
ENTRY_POINTS = {
    "settings": (("pyhami.scheduler.settings", "SchedulerSettings"),),
    "device_config": (("pyhami.scheduler.runtime", "load_device_config"),),
    "process": (("pyhami.scheduler.runtime", "SchedulerProcess"),),
    "client": (("pyhami.kube", "KubeClient"),),
}


def entry_point(role: str) -> Any:
    missing = []
    for module, name in ENTRY_POINTS[role]:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as err:
            missing.append(f"{module}.{name}: {err}")
    raise SystemExit(f"this pyhami has no {role} entry point ({'; '.join(missing)})")


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmRSS line")


async def run(config: dict[str, Any]) -> None:
    trace = bool(config["trace"])
    settings = entry_point("settings")(**config["settings"])
    device_config = entry_point("device_config")(settings.device_config_file)
    client_type = entry_point("client")
    async with await client_type.from_kubeconfig(config["kubeconfig"]) as client:
        process = entry_point("process")(settings, client, device_config)
        gc.collect()
        rss_before = rss_bytes()
        if trace:
            tracemalloc.start()
        started = time.perf_counter()
        await process.start()
        try:
            await process.synced.wait()
            report: dict[str, Any] = {
                "sync_s": time.perf_counter() - started,
                "main_port": process.main_port,
                "metrics_port": process.metrics_port,
            }
            gc.collect()
            if trace:
                report["traced_current"], report["traced_peak"] = tracemalloc.get_traced_memory()
                tracemalloc.stop()
            else:
                # tracemalloc's own tables would count in RSS: this run traces nothing
                report["rss_growth"] = rss_bytes() - rss_before
            print(json.dumps(report), flush=True)
            if not trace:
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        finally:
            await process.stop()


def main() -> None:
    source, config_file = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    sys.path.insert(0, str(source))
    import pyhami

    if not Path(pyhami.__file__).resolve().is_relative_to(source):
        raise SystemExit(f"imported pyhami from {pyhami.__file__}, not from {source}")
    import structlog

    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    asyncio.run(run(json.loads(config_file.read_text())))


if __name__ == "__main__":
    main()
