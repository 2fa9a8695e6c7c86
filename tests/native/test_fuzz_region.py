"""libvgpu's region reader under libFuzzer (with ASan and UBSan) for a fixed number of inputs.

The target (`native/libvgpu/fuzz/fuzz_region.c`) lays each input over a region the library
formatted and attaches to it, then claims a slot, charges, refunds, reaps and leaves. The seed
is a region the library wrote while a process held memory in it. Any crash, out-of-bounds
access or undefined behaviour fails the test with libFuzzer's report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BUILD, NATIVE, REGION_V1_SIZE, Harness, MiB, read_region
from .test_region import hold, release

FUZZER = BUILD / "fuzz" / "fuzz_region"
RUNS = 10000
PROCS_AT, SLOT_SIZE, PROC_NUM_AT = 1856, 1960, 2_008_896
# The byte ranges the target takes from its input, in its order (see fuzz_region.c).
WINDOWS = (
    (0, PROCS_AT),
    (PROCS_AT, 4 * SLOT_SIZE),
    (PROC_NUM_AT, REGION_V1_SIZE - PROC_NUM_AT),
    (REGION_V1_SIZE, 8),  # the extension's magic and version
)
EXACT_SIZE = b"\x00"  # the target's first byte: 0 keeps the file at the library's size


def build_fuzzer() -> None:
    done = subprocess.run(["make", "-C", str(NATIVE), f"PYTHON={sys.executable}", "fuzz"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"make -C native/libvgpu fuzz failed (clang with libFuzzer is needed):\n"
                    f"{done.stdout}\n{done.stderr}")


def seed_from(path: Path) -> bytes:
    data = path.read_bytes()
    return EXACT_SIZE + b"".join(data[start:start + length] for start, length in WINDOWS)


def test_the_region_reader_survives_fuzzing(vgpu: Harness, tmp_path: Path) -> None:
    build_fuzzer()
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g", "CUDA_DEVICE_SM_LIMIT": "30"}
    holder = hold(vgpu, "seed", "alloc", "100m", env=env)
    try:
        assert [slot.total[0] for slot in read_region(vgpu.cache).live()] == [100 * MiB]
        seed = seed_from(vgpu.cache)
    finally:
        release(vgpu, "seed", holder)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "library-region").write_bytes(seed)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [str(FUZZER), f"-runs={RUNS}", "-seed=1", f"-max_len={len(seed)}", "-timeout=30",
         "-close_fd_mask=2", f"-artifact_prefix={work}/", str(corpus)],
        env={**os.environ, "TMPDIR": str(work)}, capture_output=True, text=True, timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"the fuzzer found a failure:\n{done.stderr[-6000:]}"
    assert f"Done {RUNS} runs" in done.stderr, done.stderr[-2000:]
