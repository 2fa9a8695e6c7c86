"""A region file with impossible counts or values is refused, fail closed, never a crash.

Every process of a container can write its region, and a file may be left by something else.
libvgpu checks what bounds an array or must be a percentage before using it: a region refused
at attach makes every allocation fail (the limits cannot be enforced), and so does one that
turns corrupt under a running process."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import REGION_V1_SIZE, Harness, finish
from .test_limiter import TRICKLE
from .test_region import wait_for

LIMIT = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
PROC_NUM_AT = 2_008_896
DEVICE_NUM_AT = 56
SM_LIMIT_AT = 1728
EXT_AT = REGION_V1_SIZE  # libvgpu's extension: magic "GPU1", version
OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY


def patch(path: Path, offset: int, fmt: str, value: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, struct.pack(fmt, value), offset)
    finally:
        os.close(fd)


def grow(path: Path) -> None:
    os.truncate(path, os.path.getsize(path) + 4096)


CORRUPTIONS = [
    pytest.param(lambda p: patch(p, PROC_NUM_AT, "<i", -3), "process count of -3", id="procs-neg"),
    pytest.param(lambda p: patch(p, PROC_NUM_AT, "<i", 5000), "process count of 5000",
                 id="procs-5000"),
    pytest.param(lambda p: patch(p, PROC_NUM_AT, "<i", 2**31 - 1), "process count of 2147483647",
                 id="procs-max"),
    pytest.param(lambda p: patch(p, DEVICE_NUM_AT, "<Q", 2**64 - 1), "device count of",
                 id="devices-huge"),
    pytest.param(lambda p: patch(p, SM_LIMIT_AT + 8 * 3, "<Q", 1000), "SM limit of 1000 %",
                 id="sm-limit-1000"),
    pytest.param(lambda p: patch(p, EXT_AT, "<I", 0x12345678), "another library",
                 id="extension-magic"),
    pytest.param(lambda p: patch(p, 4, "<I", 7), "another library", id="major-7"),
    pytest.param(grow, "not a libvgpu region", id="longer"),
]


def make_region(harness: Harness) -> None:
    run = harness.run("ctx", "0", "alloc", "1m", "free", "0", env=LIMIT)
    assert run.one("alloc").int("rc") == 0


@pytest.mark.parametrize("corrupt, reason", CORRUPTIONS)
def test_a_corrupt_region_is_refused_at_attach(
    each_vgpu: Harness, corrupt: Callable[[Path], None], reason: str
) -> None:
    make_region(each_vgpu)
    corrupt(each_vgpu.cache)
    before = each_vgpu.cache.read_bytes()
    run = each_vgpu.run("ctx", "0", "alloc", "1m", "meminfo", env=LIMIT)
    assert run.one("alloc").int("rc") == OOM, "fail closed: the limit cannot be enforced"
    assert reason in run.stderr and "refusing to use it" in run.stderr, run.stderr
    assert each_vgpu.cache.read_bytes() == before, "a refused region is left as it was"


@pytest.mark.parametrize("count", [-3, 5000, -(2**31)])
def test_a_region_turning_corrupt_under_a_process_refuses_memory(
    each_vgpu: Harness, count: int
) -> None:
    """The process attached to a sound region (an NVML query); a peer then writes a process count
    outside 0..1024. Claiming a slot used to read and write far outside the mapping."""
    process = each_vgpu.start("nvml", "0", "touch", str(each_vgpu.tmp / "ready"),
                              "waitfile", str(each_vgpu.tmp / "go"),
                              "ctx", "0", "alloc", "1m", "meminfo", "alloc", "2m", env=LIMIT)
    wait_for(each_vgpu.tmp / "ready", process)
    assert os.path.getsize(each_vgpu.cache) == REGION_V1_SIZE + 256
    patch(each_vgpu.cache, PROC_NUM_AT, "<i", count)
    (each_vgpu.tmp / "go").touch()
    run = finish(process)
    assert [line.int("rc") for line in run.named("alloc")] == [OOM, OOM]
    assert run.one("meminfo").int("free") == 0
    assert run.stderr.count(f"process count is {count}, outside 0..1024") == 1, run.stderr


def test_a_region_turning_corrupt_after_the_slot_was_taken_refuses_memory(
    each_vgpu: Harness,
) -> None:
    process = each_vgpu.start("ctx", "0", "alloc", "1m", "touch", str(each_vgpu.tmp / "ready"),
                              "waitfile", str(each_vgpu.tmp / "go"), "alloc", "1m", "meminfo",
                              env=LIMIT)
    wait_for(each_vgpu.tmp / "ready", process)
    patch(each_vgpu.cache, PROC_NUM_AT, "<i", 70000)
    (each_vgpu.tmp / "go").touch()
    run = finish(process)
    assert [line.int("rc") for line in run.named("alloc")] == [0, OOM]
    assert run.one("meminfo").int("free") == 0


def test_huge_slot_counters_do_not_wrap_the_sum(each_vgpu: Harness) -> None:
    """Two slots of 2^63 bytes each sum to 0 in 64 bits: the container's usage must saturate,
    not wrap to nothing and let allocations past the limit."""
    make_region(each_vgpu)
    path = each_vgpu.cache
    patch(path, PROC_NUM_AT, "<i", 2)
    for slot in (1856, 1856 + 1960):
        patch(path, slot, "<i", 1)  # pid 1: alive, so never reaped
        patch(path, slot + 1928, "<i", 1)  # status: running
        patch(path, slot + 8 + 32, "<Q", 2**63)  # used[0].total
    run = each_vgpu.run("ctx", "0", "alloc", "2m", "meminfo", env=LIMIT)
    assert run.one("alloc").int("rc") == OOM
    assert run.one("meminfo").int("free") == 0


LIMIT_AT = 1600  # limit[16], bytes


@pytest.mark.parametrize("raised", [0, 64 << 30], ids=["unlimited", "64g"])
def test_a_peer_raising_the_regions_memory_limit_lifts_nothing(
    each_vgpu: Harness, raised: int
) -> None:
    """Every process of the container can write the region; a process keeps its own limits
    (from the limits file and its environment) and enforces the stricter."""
    process = each_vgpu.start("nvml", "0", "touch", str(each_vgpu.tmp / "ready"),
                              "waitfile", str(each_vgpu.tmp / "go"),
                              "ctx", "0", "alloc", "1g", "alloc", "1", "meminfo", env=LIMIT)
    wait_for(each_vgpu.tmp / "ready", process)
    patch(each_vgpu.cache, LIMIT_AT, "<Q", raised)
    (each_vgpu.tmp / "go").touch()
    run = finish(process)
    assert [line.int("rc") for line in run.named("alloc")] == [0, OOM]
    assert run.one("meminfo").int("total") == 1 << 30


def test_a_process_joining_a_region_with_looser_sm_limits_keeps_its_own(vgpu: Harness) -> None:
    make_region(vgpu)
    patch(vgpu.cache, SM_LIMIT_AT, "<Q", 100)  # a peer lifted device 0's SM limit
    util_file = vgpu.tmp / "util"
    util_file.write_text("90")
    env = {**LIMIT, "CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "force",
           "STUB_UTIL_FILE": str(util_file), "STUB_SM_COUNT": "10"}
    run = vgpu.run("ctx", "0", "launchfor", "kernel", "1500", "1024", env=env)
    series = [int(value) for value in run.one("launchfor").fields["series"].split(",")]
    assert series[-1] - series[-11] <= TRICKLE, series
