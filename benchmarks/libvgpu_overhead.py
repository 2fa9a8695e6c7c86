"""Instructions libvgpu adds per cuMemAlloc/cuMemFree pair and per cuLaunchKernel.

Counted with `valgrind --tool=callgrind` (instruction counts, repeatable on a noisy machine)
on `native/libvgpu/build/tests/vgpu_bench` against the stub driver, with and without
LD_PRELOAD=libvgpu.so, in the same run. Only code under `main` is counted (not process start,
not the limiter's watcher thread); each case runs at two iteration counts and the per-call cost
is the difference divided by the extra iterations, so one-time initialisation cancels out.
Target: fewer than 2,000 extra instructions per launch when not throttling.

Run: `python3 benchmarks/libvgpu_overhead.py [--iterations 2000]`.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "native" / "libvgpu"
BUILD = NATIVE / "build"
LAUNCH_TARGET = 2_000


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    operation: str  # "alloc" (one alloc + free pair) or "launch"
    env: dict[str, str]


CASES = [
    Case("alloc+free, no limits", "alloc", {}),
    Case("alloc+free, 8 GiB limit", "alloc", {"CUDA_DEVICE_MEMORY_LIMIT": "8g"}),
    Case("launch, no limits", "launch", {}),
    Case("launch, memory limit only", "launch", {"CUDA_DEVICE_MEMORY_LIMIT": "8g"}),
    # SM-limited and forced on, but the kernels take no time on the stub's simulated GPU: once
    # the limiter has measured that, its budget never runs dry, and what is counted is the cost
    # of the gate itself when it does not throttle.
    Case("launch, SM limit 30 %, not throttling", "launch",
         {"CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "force"}),
]


def build() -> None:
    subprocess.run(["make", "-s", "-C", str(NATIVE), "all"], check=True)


def instructions(operation: str, iterations: int, env: dict[str, str], preload: bool,
                 workdir: Path) -> int:
    # A fresh region per run: limits are fixed by the process that creates it.
    out = Path(tempfile.mkstemp(prefix=f"callgrind.{operation}.", dir=workdir)[1])
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CUDA_", "GPU_CORE", "STUB_", "LD_PRELOAD"))}
    run_env.update(env)
    run_env["LD_LIBRARY_PATH"] = str(BUILD / "stub")
    run_env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{out}.region"
    if preload:
        run_env["LD_PRELOAD"] = str(BUILD / "libvgpu.so")
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--toggle-collect=main", f"--callgrind-out-file={out}",
         str(BUILD / "tests" / "vgpu_bench"), operation, str(iterations)],
        env=run_env, check=True, capture_output=True,
    )
    match = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no instruction total in {out}")
    return int(match.group(1))


def per_call(operation: str, iterations: int, env: dict[str, str], preload: bool,
             workdir: Path) -> float:
    low = instructions(operation, iterations, env, preload, workdir)
    high = instructions(operation, 2 * iterations, env, preload, workdir)
    return (high - low) / iterations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    build()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        baselines = {op: per_call(op, args.iterations, {}, False, workdir)
                     for op in ("alloc", "launch")}
        print(f"{'case':42} {'without':>10} {'with':>10} {'extra':>10} {'ratio':>7}")
        worst_launch = 0.0
        for case in CASES:
            base = baselines[case.operation]
            hooked = per_call(case.operation, args.iterations, case.env, True, workdir)
            extra = hooked - base
            if case.operation == "launch":
                worst_launch = max(worst_launch, extra)
            print(f"{case.name:42} {base:10.0f} {hooked:10.0f} {extra:10.0f} "
                  f"{hooked / base:7.2f}")
    verdict = "met" if worst_launch < LAUNCH_TARGET else "MISSED"
    print(f"\ninstructions per call (callgrind, under main); launch target "
          f"< {LAUNCH_TARGET} extra: {verdict} (worst {worst_launch:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
