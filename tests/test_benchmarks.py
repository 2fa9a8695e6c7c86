"""The benchmarks that compare two trees run end to end on a small cluster (timings unchecked)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"(\d+\.\d+)"
MEASURES = (
    "memory: RSS growth",
    "memory: tracemalloc current",
    "memory: tracemalloc peak",
    "/filter p50",
    "/filter p99",
    "src lines (non-blank .py)",
)


def test_scheduler_footprint_quick_prints_every_measure_for_both_trees() -> None:
    source = ROOT / "src"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scheduler_footprint.py"),
            "--quick",
            f"--baseline-src={source}",
            f"--src={source}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for label in ("baseline", "candidate"):
        assert f"{label:>9}: {source} (caches synced in" in result.stdout
    assert len([line for line in lines if "per stream (ms): " in line]) == 4  # p50, p99 x 2
    rows = {}
    for line in lines:
        row = re.fullmatch(
            rf"(.+?)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}%\s+(MiB|ms|lines)(  WORSE)?", line
        )
        if row:
            rows[row[1]] = row.groups()[1:]
    assert sorted(rows) == sorted(MEASURES)
    baseline_lines, candidate_lines, ratio, noise, _unit, worse = rows["src lines (non-blank .py)"]
    assert baseline_lines == candidate_lines and float(baseline_lines) > 1000
    assert (ratio, noise, worse) == ("1.000", "0.0", None)
    assert lines[-1].startswith("verdict: ")
