"""The shared region as HAMi's monitor and ours read it, and its life across processes:
slots never move, exits and SIGKILLs free usage, limits hold for any mix of processes."""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import time
from pathlib import Path

from pyhami.monitor.region import Region

from .conftest import (
    REGION_V1_SIZE,
    GiB,
    Harness,
    MiB,
    Run,
    finish,
    kill,
    read_region,
)


def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def hold(harness: Harness, name: str, *words: str, env: dict[str, str] | None = None
         ) -> subprocess.Popen[str]:
    """Start a process that runs `words`, then holds its allocations until `<name>.go` exists."""
    process = harness.start("ctx", "0", *words, "touch", str(harness.tmp / f"{name}.ready"),
                            "waitfile", str(harness.tmp / f"{name}.go"), env=env)
    wait_for(harness.tmp / f"{name}.ready", process)
    return process


def release(harness: Harness, name: str, process: subprocess.Popen[str]) -> Run:
    (harness.tmp / f"{name}.go").touch()
    return finish(process)


def test_region_has_the_v1_layout(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g", "CUDA_DEVICE_SM_LIMIT": "40",
           "CUDA_TASK_PRIORITY": "0"}
    before = int(time.time())
    holder = hold(vgpu, "a", "alloc", "100m", "launch", "kernel", "1", "1", env=env)
    try:
        raw = vgpu.cache.read_bytes()
        region = read_region(vgpu.cache)
        assert len(raw) >= REGION_V1_SIZE
        assert (region.magic, region.major, region.minor) == (19920718, 1, 2)
        assert region.limit[0] == GiB and region.limit[1] == 0
        assert region.sm_limit[:2] == [40, 40]
        assert region.device_num == 2
        assert region.uuids[0].startswith("GPU-") and region.uuids[0] != region.uuids[1]
        assert (region.priority, region.utilization_switch, region.recent_kernel) == (0, 1, 2)
        assert region.last_kernel_time >= before
        (slot,) = region.live()
        assert (slot.pid, slot.status, slot.total[0], slot.data[0]) == (
            holder.pid, 1, 100 * MiB, 100 * MiB)
        assert struct.unpack_from("<Q", raw, 1856 + 1936)[0] == 0, "HAMi's seqlock word stays 0"
    finally:
        release(vgpu, "a", holder)
    # The exited holder's memory stayed charged until it was gone (the driver frees it only
    # after the destructors); the next process to join reaps the slot.
    vgpu.run("ctx", "0", "alloc", "1m", "free", "0", env=env)
    region = read_region(vgpu.cache)
    assert region.live() == [] and region.used(0) == 0, "exited processes give their slots back"


def test_region_parses_with_our_monitors_reader(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g", "CUDA_DEVICE_SM_LIMIT": "25",
           "STUB_CONTEXT_BYTES": str(100 * MiB)}
    holders = [hold(vgpu, name, "alloc", size, env=env)
               for name, size in (("a", "200m"), ("b", "300m"))]
    try:
        region = Region.open(vgpu.cache)
        try:
            snapshot = region.snapshot()
        finally:
            region.close()
        device = snapshot.devices[0]
        assert device.limit == GiB and device.sm_limit == 25
        assert device.used == 700 * MiB
        assert device.context == 200 * MiB and device.buffer == 500 * MiB
        assert device.uuid == read_region(vgpu.cache).uuids[0][:40]
        assert sorted(p.pid for p in snapshot.processes) == sorted(h.pid for h in holders)
        assert snapshot.recent_kernel == 2 and snapshot.utilization_switch == 1
    finally:
        for name, holder in zip("ab", holders, strict=True):
            release(vgpu, name, holder)


def test_sigkilled_process_frees_its_usage(each_vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
    victim = hold(each_vgpu, "victim", "alloc", "800m", env=env)
    assert each_vgpu.run("ctx", "0", "alloc", "800m", env=env).one("alloc").int("rc") == 2
    kill(victim)
    run = each_vgpu.run("ctx", "0", "alloc", "800m", "meminfo", env=env)
    assert run.one("alloc").int("rc") == 0, "the killed process's 800 MiB came back"
    assert run.one("meminfo").int("free") == 224 * MiB
    assert all(slot.pid != victim.pid for slot in read_region(each_vgpu.cache).live())


def test_fork_child_shares_the_limit_and_gives_back_on_exit(each_vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
    # A dead process's slot is reaped at most once a second per process (the watcher thread
    # and memory queries share that pace), so the parent looks a second after the child exited.
    run = each_vgpu.run("ctx", "0", "alloc", "300m", "fork", "ctx", "0", "alloc", "300m",
                        "meminfo", "alloc", "500m", "endfork", "sleep", "1100", "meminfo",
                        "alloc", "700m", env=env)
    child_allocs = run.named("alloc", child=True)
    assert [a.int("rc") for a in child_allocs] == [0, 2]
    assert run.one("meminfo", child=True).int("free") == 424 * MiB
    assert run.one("fork").int("exit") == 0
    assert run.one("meminfo").int("free") == 724 * MiB, "the child's 300 MiB left with it"
    assert [a.int("rc") for a in run.named("alloc")] == [0, 0]


def test_slots_never_move_when_others_come_and_go(vgpu: Harness) -> None:
    """hami-core.md §8.1: [A dead, B dead, C live] + D joins; C allocates; E must be refused.
    HAMi-core moved C's slot under it, lost C's later usage and let E exceed the limit."""
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g", "STUB_LEDGER": str(vgpu.tmp / "ledger"),
           "STUB_LEDGER_LIMIT": str(GiB)}
    a = hold(vgpu, "a", "alloc", "100m", env=env)
    b = hold(vgpu, "b", "alloc", "100m", env=env)
    c = vgpu.start("ctx", "0", "alloc", "100m", "touch", str(vgpu.tmp / "c.ready"),
                   "waitfile", str(vgpu.tmp / "c.more"), "alloc", "500m",
                   "touch", str(vgpu.tmp / "c.done"), "waitfile", str(vgpu.tmp / "c.go"), env=env)
    wait_for(vgpu.tmp / "c.ready", c)
    release(vgpu, "a", a)
    release(vgpu, "b", b)
    d = hold(vgpu, "d", "alloc", "100m", env=env)
    (vgpu.tmp / "c.more").touch()
    wait_for(vgpu.tmp / "c.done", c)
    run = vgpu.run("ctx", "0", "fill", "100m", env=env)
    assert run.one("fill").int("chunks") == 3, "1 GiB - 700 MiB in use leaves 3 x 100 MiB"
    release(vgpu, "d", d)
    (vgpu.tmp / "c.go").touch()
    finish(c)
    assert read_ledger(vgpu.tmp / "ledger") == (0, 1000 * MiB)


def read_ledger(path: Path) -> tuple[int, int]:
    """(moments the live processes held more than the limit, the peak they held)."""
    violations, peak = struct.unpack_from("<QQ", path.read_bytes(), 0)
    return violations, peak


def test_racing_processes_never_exceed_the_limit(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g", "STUB_LEDGER": str(vgpu.tmp / "ledger"),
           "STUB_LEDGER_LIMIT": str(GiB)}
    racers = [vgpu.start("ctx", "0", "waitfile", str(vgpu.tmp / "start"), "fill", "16m",
                         "touch", str(vgpu.tmp / f"full{n}"), "waitfile", str(vgpu.tmp / "end"),
                         env=env) for n in range(6)]
    (vgpu.tmp / "start").touch()
    for n, racer in enumerate(racers):
        wait_for(vgpu.tmp / f"full{n}", racer)
    (vgpu.tmp / "end").touch()
    chunks = sum(finish(racer).one("fill").int("chunks") for racer in racers)
    assert chunks == 64, "together they got exactly the 1 GiB: no overshoot, no false OOM"
    assert read_ledger(vgpu.tmp / "ledger") == (0, GiB)


def test_random_joins_and_exits_never_exceed_the_limit(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "512m", "STUB_LEDGER": str(vgpu.tmp / "ledger"),
           "STUB_LEDGER_LIMIT": str(512 * MiB)}
    rng = random.Random(6)
    running: list[subprocess.Popen[str]] = []
    for _ in range(40):
        if running and rng.random() < 0.4:
            victim = running.pop(rng.randrange(len(running)))
            victim.send_signal(rng.choice([signal.SIGKILL, signal.SIGTERM]))
            victim.wait()
        words = ["ctx", "0"]
        for _ in range(rng.randrange(1, 4)):
            words += ["alloc", f"{rng.choice([32, 64, 128])}m"]
        running.append(vgpu.start(*words, "sleep", str(rng.randrange(5, 60)), env=env,
                                  capture=False))
        time.sleep(rng.random() * 0.01)
    for process in running:
        process.wait()
    violations, peak = read_ledger(vgpu.tmp / "ledger")
    assert violations == 0 and peak <= 512 * MiB
    assert os.path.getsize(vgpu.cache) >= REGION_V1_SIZE


def test_the_ledger_sees_overshoot_without_libvgpu(vgpu: Harness) -> None:
    """The invariant check above can fail: without the library two processes overshoot."""
    env = {"STUB_LEDGER": str(vgpu.tmp / "ledger"), "STUB_LEDGER_LIMIT": str(GiB)}
    first = vgpu.start("ctx", "0", "alloc", "600m", "touch", str(vgpu.tmp / "a.ready"),
                       "waitfile", str(vgpu.tmp / "a.go"), env=env, preload=False)
    wait_for(vgpu.tmp / "a.ready", first)
    vgpu.run("ctx", "0", "alloc", "600m", env=env, preload=False)
    release(vgpu, "a", first)
    assert read_ledger(vgpu.tmp / "ledger") == (1, 1200 * MiB)


def test_a_process_killed_inside_the_lock_does_not_wedge_the_container(vgpu: Harness) -> None:
    """Kill alloc/free loops at random moments until one dies holding the region lock; the next
    process must take the lock over (robust mutex) and still get the whole limit."""
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g", "LIBCUDA_LOG_LEVEL": "3"}
    rng = random.Random(3)
    for _ in range(60):
        churners = [vgpu.start("ctx", "0", "churn", "1m", env=env) for _ in range(4)]
        for churner in churners:
            assert churner.stdout is not None
            assert [churner.stdout.readline().split()[0] for _ in range(2)] == ["ctx", "churn"]
        time.sleep(rng.random() * 0.003)
        for churner in churners:
            kill(churner)
        run = vgpu.run("ctx", "0", "alloc", "1g", env=env, timeout=10)
        assert run.one("alloc").int("rc") == 0, "the killed loops' usage was freed"
        if "took over the region lock" in run.stderr:
            return
    raise AssertionError("no loop was ever killed inside the lock")
