"""SM limiting. The first tests drive it with a utilisation the stub NVML reports from a file
the test writes (the stub device has 10 SMs x 2048 threads; one test launch is GRID blocks);
the last ones with the stub's simulated GPU, where kernels take real lengths of time and NVML
reports what ran, in sample periods, as on a real card."""

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


# --- the limit, with real kernel lengths on the simulated GPU ----------------------------------

SCENARIOS = [  # (launch path, grid in multiples of the SM count or blocks, kernel microseconds)
    pytest.param("kernel", 0, 50, id="short-50us"),
    pytest.param("kernel", 4, 10_000, id="long-10ms"),
    pytest.param("coop", 1, 5_000, id="cooperative-5ms"),
    pytest.param("graph", 4, 10_000, id="graph-10x1ms"),
]


def simulated(harness: Harness, how: str, sms: int, grid_per_sm: int, kernel_us: int,
              run_ms: int, measure_from_ms: int, nvml_period_ms: int = 167) -> float:
    """Percent of [measure_from_ms, run_ms] the stub's GPU was busy with our kernels, as its
    own clock tells, under a 30 % limit (policy force)."""
    grid = grid_per_sm * sms if grid_per_sm else 64
    env = {"CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "force",
           "STUB_SM_COUNT": str(sms), "STUB_PID_OFFSET": "5",
           "STUB_NVML_PERIOD_MS": str(nvml_period_ms)}
    run = harness.run("ctx", "0", "simulate", how, str(run_ms), str(grid), str(kernel_us),
                      str(measure_from_ms), env=env)
    return float(run.one("simulate").fields["util"])


@pytest.mark.parametrize("sms", [10, 132, 188])
@pytest.mark.parametrize(("how", "grid_per_sm", "kernel_us"), SCENARIOS)
def test_limit_holds_for_real_kernel_lengths(vgpu: Harness, how: str, grid_per_sm: int,
                                             kernel_us: int, sms: int) -> None:
    """Launches spend device time at each kernel's learned duration, so the limit holds for
    short, long, cooperative and graph kernels alike, whatever the SM count."""
    utilisation = simulated(vgpu, how, sms, grid_per_sm, kernel_us, 3000, 1500)
    assert 25 <= utilisation <= 35, utilisation


@pytest.mark.parametrize(("how", "grid_per_sm", "kernel_us"), SCENARIOS[:2])
def test_limit_holds_between_slow_nvml_samples(vgpu: Harness, how: str, grid_per_sm: int,
                                               kernel_us: int) -> None:
    """NVML samples once a second: between samples the last measurement stands (a tick without
    a sample once read as 0 % and opened the gate)."""
    utilisation = simulated(vgpu, how, 132, grid_per_sm, kernel_us, 6000, 3000,
                            nvml_period_ms=1000)
    assert 25 <= utilisation <= 35, utilisation


def test_processes_of_one_container_share_the_limit(vgpu: Harness) -> None:
    """Two processes on one card (a shared simulated GPU) under the container's 30 %: each
    scales its budget by its share of the container's measured utilisation."""
    env = {"CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "force",
           "STUB_PID_OFFSET": "5", "STUB_GPU_FILE": str(vgpu.tmp / "gpu")}
    words = ["ctx", "0", "simulate", "kernel", "4000", "40", "10000", "2000"]
    processes = [vgpu.start(*words, env=env) for _ in range(2)]
    # Each reports the whole card's busy share over its last two seconds.
    for run in [finish(process) for process in processes]:
        utilisation = float(run.one("simulate").fields["util"])
        assert 25 <= utilisation <= 35, utilisation
