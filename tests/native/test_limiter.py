"""SM limiting, driven by the utilisation the stub NVML reports (a file the test writes).

The stub device has 10 SMs x 2048 threads, so a bucket holds at most CAPACITY blocks and is
refilled every 100 ms; one test launch is GRID blocks."""

from __future__ import annotations

import time

import pytest

from pyhami.monitor.region import Region

from .conftest import Harness, finish, read_region

CAPACITY = 10 * 2048
GRID = 1024
TICK_S = 0.1


def limited(harness: Harness, utilisation: int, policy: str = "force") -> dict[str, str]:
    util_file = harness.tmp / "util"
    util_file.write_text(str(utilisation))
    return {"CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": policy,
            "STUB_UTIL_FILE": str(util_file), "STUB_SM_COUNT": "10"}


def launch_for(harness: Harness, env: dict[str, str], ms: int, how: str = "kernel",
               grid: int = GRID) -> list[int]:
    """Cumulative blocks launched at each 100 ms of the run."""
    run = harness.run("ctx", "0", "launchfor", how, str(ms), str(grid), env=env)
    return [int(value) for value in run.one("launchfor").fields["series"].split(",")]


def last_second(series: list[int]) -> int:
    return series[-1] - series[-11]


# Once 90 % > 30 % is measured the refill rate falls to its floor, 1 % of capacity per tick;
# the margin allows a late tick at a higher rate on a loaded machine.
TRICKLE = 10 * CAPACITY // 100 + CAPACITY // 4


def test_busy_device_throttles_to_a_trickle(each_vgpu: Harness) -> None:
    series = launch_for(each_vgpu, limited(each_vgpu, utilisation=90), 1500)
    assert last_second(series) <= TRICKLE, series
    assert series[-1] <= CAPACITY * (len(series) + 1), "never more than a full bucket per tick"


def test_idle_device_launches_up_to_the_bucket_and_no_more(vgpu: Harness) -> None:
    series = launch_for(vgpu, limited(vgpu, utilisation=0), 1500)
    assert last_second(series) >= 2 * CAPACITY, series
    assert last_second(series) <= 11 * CAPACITY + GRID, "the bucket is bounded"


@pytest.mark.parametrize("how", ["ptsz", "ex", "coop", "graph"])
def test_every_launch_path_is_limited(vgpu: Harness, how: str) -> None:
    env = limited(vgpu, utilisation=90)
    unlimited = launch_for(vgpu, {**env, "GPU_CORE_UTILIZATION_POLICY": "disable"}, 300, how)
    throttled = launch_for(vgpu, env, 1500, how)
    assert last_second(throttled) <= TRICKLE, throttled  # a graph counts as one block
    assert unlimited[-1] > 5 * last_second(throttled), (unlimited, throttled)


def test_disable_policy_never_throttles(vgpu: Harness) -> None:
    series = launch_for(vgpu, limited(vgpu, utilisation=90, policy="disable"), 500)
    assert series[-1] >= 100 * CAPACITY, series


def test_switch_off_from_the_monitor_stops_throttling_but_still_reports_activity(
    vgpu: Harness,
) -> None:
    env = limited(vgpu, utilisation=90, policy="default")
    vgpu.run("ctx", "0", env=env)  # creates the region
    region = Region.open(vgpu.cache)
    try:
        region.write_utilization_switch(0)
        region.write_recent_kernel(0)
        series = launch_for(vgpu, env, 500)
        assert series[-1] >= 100 * CAPACITY, "switch 0: the container is alone on its GPU"
        assert region.feedback().recent_kernel == 2, "HAMi-core latched here (hami-core.md §5.5)"
        region.write_utilization_switch(1)
        assert last_second(launch_for(vgpu, env, 1500)) <= TRICKLE
    finally:
        region.close()


def test_priority_freeze_holds_launches_until_lifted(each_vgpu: Harness) -> None:
    env = limited(each_vgpu, utilisation=0)
    each_vgpu.run("ctx", "0", env=env)
    region = Region.open(each_vgpu.cache)
    try:
        region.write_recent_kernel(-1)
        process = each_vgpu.start("ctx", "0", "launch", "kernel", "1", str(GRID), env=env)
        time.sleep(4 * TICK_S)
        assert process.poll() is None, "a launch waits while recentKernel is -1"
        region.write_recent_kernel(0)
        run = finish(process, timeout=10)
        assert run.one("launch").int("launches") == 1
        assert region.feedback().recent_kernel == 2
    finally:
        region.close()


def test_launches_record_the_last_kernel_time(vgpu: Harness) -> None:
    before = int(time.time())
    vgpu.run("ctx", "0", "launch", "kernel", "3", "1")
    assert read_region(vgpu.cache).last_kernel_time >= before


@pytest.mark.parametrize("sm_limit", ["30", "0"], ids=["limited", "unlimited"])
def test_sm_utilisation_is_reported_per_slot(vgpu: Harness, sm_limit: str) -> None:
    """The monitor's per-container utilisation comes from the slots, limited or not."""
    env = {**limited(vgpu, utilisation=20), "STUB_PID_OFFSET": "7",
           "CUDA_DEVICE_SM_LIMIT": sm_limit}
    process = vgpu.start("ctx", "0", "launchfor", "kernel", "1200", str(GRID),
                         "touch", str(vgpu.tmp / "ran"), "waitfile", str(vgpu.tmp / "go"), env=env)
    try:
        while not (vgpu.tmp / "ran").exists():
            assert process.poll() is None
            time.sleep(0.01)
        (slot,) = read_region(vgpu.cache).live()
        assert slot.hostpid == process.pid + 7
        assert slot.sm_util[0] == 20
    finally:
        (vgpu.tmp / "go").touch()
        finish(process)
