"""Ways to take device memory past the limit that the everyday paths do not cover, each driven
through LD_PRELOAD on the stub driver, which behaves as the real one does here: VMM memory is
freed at its last reference, stream-ordered pools keep freed memory until trimmed, and
stream-ordered allocations land on the stream's (or pool's) device. `held` is what the stub
device really holds."""

from __future__ import annotations

import pytest

from .conftest import GiB, Harness, MiB, Slot, finish, read_region

LIMIT_1G = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}


def rcs(run_lines: list[object], field: str = "rc") -> list[int]:
    return [line.int(field) for line in run_lines]  # type: ignore[attr-defined]


# --- VMM: memory lives until the last reference (handle, mapping, retain) goes ------------------


def test_vmm_memory_stays_charged_while_mapped_after_release(each_vgpu: Harness) -> None:
    """The documented idiom: create, map, release the handle, keep using the mapping. The
    driver frees only at the last unmap, so the charge must stay until then."""
    words: list[str] = ["ctx", "0"]
    for n in range(4):  # handle ids 0, 2, 4, 6; mapping ids 1, 3, 5, 7
        words += ["vmm", "0", "512m", "map", str(2 * n), "free", str(2 * n)]
    run = each_vgpu.run(*words, "held", "0", "meminfo", env=LIMIT_1G)
    assert rcs(run.named("vmm")) == [0, 0, 2, 2]
    assert run.one("held").int("bytes") <= GiB, "the device never holds more than the limit"
    assert run.one("meminfo").int("free") == 0


def test_vmm_memory_is_given_back_at_the_last_unmap(each_vgpu: Harness) -> None:
    run = each_vgpu.run("ctx", "0", "vmm", "0", "512m", "map", "0", "free", "0", "meminfo",
                        "free", "1", "meminfo", "held", "0", env=LIMIT_1G)
    mapped, unmapped = run.named("meminfo")
    assert mapped.int("free") == GiB - 512 * MiB
    assert unmapped.int("free") == GiB
    assert run.one("held").int("bytes") == 0


def test_retained_handle_keeps_the_memory_charged(vgpu: Harness) -> None:
    # create (0), map (1), retain (2), release the retained one, release the original:
    # the mapping still holds the memory; unmapping gives it back.
    run = vgpu.run("ctx", "0", "vmm", "0", "600m", "map", "0", "retain", "1", "free", "2",
                   "free", "0", "alloc", "600m", "free", "1", "alloc", "600m", env=LIMIT_1G)
    assert run.one("retain").int("rc") == 0
    assert rcs(run.named("alloc")) == [2, 0]


# --- stream-ordered pools: the reservation is what the device holds ----------------------------


def test_pool_memory_kept_after_async_free_stays_charged(each_vgpu: Harness) -> None:
    """A pool whose release threshold keeps everything: after cuMemFreeAsync the device still
    holds the memory, so another allocation must not get it."""
    run = each_vgpu.run("ctx", "0", "threshold", str(2 * GiB), "async", "1g", "free", "0",
                        "alloc", "512m", "held", "0", env=LIMIT_1G)
    assert run.one("async").int("rc") == 0
    assert run.one("alloc").int("rc") == 2
    assert run.one("held").int("bytes") <= GiB


def test_pool_memory_is_reused_without_a_second_charge(vgpu: Harness) -> None:
    run = vgpu.run("ctx", "0", "threshold", str(2 * GiB), "async", "1g", "free", "0",
                   "async", "1g", "free", "1", "async", "1g", env=LIMIT_1G)
    assert rcs(run.named("async")) == [0, 0, 0], "the pool's cached memory is already paid for"


def test_trimmed_or_synchronised_pool_memory_is_given_back(vgpu: Harness) -> None:
    run = vgpu.run("ctx", "0", "threshold", str(2 * GiB), "async", "1g", "free", "0",
                   "trim", "0", "alloc", "1g", "free", "1",
                   "threshold", "0", "async", "1g", "free", "2", "sync", "alloc", "1g",
                   env=LIMIT_1G)
    assert rcs(run.named("async")) == [0, 0]
    assert rcs(run.named("alloc")) == [0, 0]


def test_pool_reservation_rounding_is_charged(vgpu: Harness) -> None:
    # The stub's pools grow by 2 MiB granules: 1 byte reserves 2 MiB of the device.
    run = vgpu.run("ctx", "0", "async", "1", "meminfo", "held", "0", env=LIMIT_1G)
    assert run.one("meminfo").int("free") == GiB - 2 * MiB
    assert run.one("held").int("bytes") == 2 * MiB


def test_destroying_a_pool_gives_its_reservation_back(vgpu: Harness) -> None:
    run = vgpu.run("ctx", "0", "mkpool", "0", "threshold", str(2 * GiB), "pool", "1g",
                   "free", "0", "alloc", "1", "destroypool", "alloc", "1g", env=LIMIT_1G)
    assert run.one("pool").int("rc") == 0
    assert rcs(run.named("alloc")) == [2, 0]


# --- the device charged is the pool's or the stream's, never just the current context's --------


def test_pool_of_another_device_is_charged_to_that_device(each_vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_1": "1g"}
    run = each_vgpu.run("ctx", "1", "ctx", "0", "defaultpool", "1", "pool", "600m",
                        "pool", "600m", "held", "1", env=env)
    assert rcs(run.named("pool")) == [0, 2]
    assert run.one("held").int("bytes") <= GiB


def test_created_pool_is_charged_to_its_location(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_1": "1g"}
    run = vgpu.run("ctx", "0", "mkpool", "1", "pool", "600m", "pool", "600m", env=env)
    assert rcs(run.named("pool")) == [0, 2]


def test_stream_of_another_device_is_charged_to_that_device(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_1": "1g"}
    run = vgpu.run("ctx", "1", "stream", "ctx", "0", "async", "600m", "async", "600m",
                   "held", "1", env=env)
    assert rcs(run.named("async")) == [0, 2]


def test_stream_allocation_without_a_current_context_is_charged(each_vgpu: Harness) -> None:
    run = each_vgpu.run("ctx", "0", "stream", "noctx", "async", "1g", "async", "1g",
                        "async", "1g", "async", "1g", "held", "0", env=LIMIT_1G)
    assert rcs(run.named("async")) == [0, 2, 2, 2]
    assert run.one("held").int("bytes") <= GiB


def test_allocation_without_a_context_answers_as_the_driver_does(vgpu: Harness) -> None:
    plain = vgpu.run("alloc", "1m", "async", "1m", preload=False)
    hooked = vgpu.run("alloc", "1m", "async", "1m", env=LIMIT_1G)
    assert rcs(hooked.named("alloc")) == rcs(plain.named("alloc")) == [201]
    assert rcs(hooked.named("async")) == rcs(plain.named("async")) == [201]


# --- paths that were not hooked at all ----------------------------------------------------------


CONTEXT_COST = {"STUB_CONTEXT_BYTES": str(300 * MiB), "STUB_PID_OFFSET": "100000"}


@pytest.mark.parametrize("version", ["1", "2", "3", "4"])
def test_created_contexts_are_charged_and_refused_past_the_limit(vgpu: Harness,
                                                                 version: str) -> None:
    # The primary context (300 MiB) plus two created ones fit 1 GiB; a third does not.
    run = vgpu.run("ctx", "0", "ctxcreate", "0", version, "ctxcreate", "0", version,
                   "ctxcreate", "0", version, "held", "0", env={**LIMIT_1G, **CONTEXT_COST})
    assert rcs(run.named("ctxcreate")) == [0, 0, 2]
    assert run.one("held").int("bytes") <= GiB


def test_destroyed_context_gives_its_memory_back(vgpu: Harness) -> None:
    run = vgpu.run("ctx", "0", "ctxcreate", "0", "2", "ctx", "0", "alloc", "500m", "free", "0",
                   "ctx", "0", "alloc", "500m", env={**LIMIT_1G, **CONTEXT_COST})
    assert rcs(run.named("alloc")) == [2, 0]


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(["v1alloc", "600m"], id="cuMemAlloc"),
        pytest.param(["v1pitch", "600000", "1024"], id="cuMemAllocPitch"),
        pytest.param(["v1array", "600000", "1024"], id="cuArrayCreate"),
        pytest.param(["v1array3d", "60000", "1024", "10"], id="cuArray3DCreate"),
    ],
)
def test_pre_3_2_entry_points_are_charged(each_vgpu: Harness, create: list[str]) -> None:
    """cuGetProcAddress(name, 2000) hands out the unsuffixed entries with 32-bit sizes."""
    run = each_vgpu.run("ctx", "0", *create, *create, "held", "0", "free", "0", *create,
                        env=LIMIT_1G)
    made = [line for line in run.lines if line.name == create[0]]
    assert rcs(made) == [0, 2, 0]
    assert run.one("held").int("bytes") <= GiB


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(["ipc", "600m"], id="cuIpcOpenMemHandle"),
        pytest.param(["poolimport", "600m"], id="cuMemPoolImportPointer"),
        pytest.param(["external", "600m"], id="cuImportExternalMemory"),
        pytest.param(["vmmimport", "600m"], id="cuMemImportFromShareableHandle"),
    ],
)
def test_imports_are_charged_until_released(each_vgpu: Harness, create: list[str]) -> None:
    run = each_vgpu.run("ctx", "0", *create, "alloc", "600m", "free", "0", "alloc", "600m",
                        env=LIMIT_1G)
    assert rcs([line for line in run.lines if line.name == create[0]]) == [0]
    assert rcs(run.named("alloc")) == [2, 0]
    assert run.one("free").int("rc") == 0


def test_import_past_the_limit_is_refused_and_undone(vgpu: Harness) -> None:
    run = vgpu.run("ctx", "0", "alloc", "600m", "ipc", "600m", "held", "0", env=LIMIT_1G)
    assert run.one("ipc").int("rc") == 2


def test_graph_memory_nodes_are_refused_or_charged(each_vgpu: Harness) -> None:
    run = each_vgpu.run("ctx", "0", "graphmem", "0", "2g", "graphmem", "0", "600m",
                        "alloc", "600m", "graphtrim", "0", "alloc", "600m", env=LIMIT_1G)
    too_big, fits = run.named("graphmem")
    assert too_big.int("added") == 2, "a node that cannot fit is refused when it is added"
    assert (fits.int("added"), fits.int("launched")) == (0, 0)
    assert rcs(run.named("alloc")) == [2, 0], "graph memory counts until it is trimmed"


@pytest.mark.parametrize(("limit", "value"), [("heap", "600m"), ("fifo", "600m"),
                                              ("stack", "40000")])
def test_context_limits_that_reserve_memory_are_charged(vgpu: Harness, limit: str,
                                                        value: str) -> None:
    # A stack of 40,000 bytes per thread on 10 SMs x 2048 threads reserves ~780 MiB.
    run = vgpu.run("ctx", "0", "setlimit", limit, value, "alloc", "600m", "held", "0",
                   "setlimit", limit, "1024", "alloc", "600m", env=LIMIT_1G)
    assert rcs(run.named("setlimit")) == [0, 0]
    assert rcs(run.named("alloc")) == [2, 0]


def test_context_limit_past_the_limit_is_refused(vgpu: Harness) -> None:
    run = vgpu.run("ctx", "0", "setlimit", "heap", "2g", "held", "0", env=LIMIT_1G)
    assert run.one("setlimit").int("rc") == 2
    assert run.one("held").int("bytes") < GiB


def test_memory_taken_behind_libvgpus_back_is_reconciled(each_vgpu: Harness) -> None:
    """What NVML says the process holds beyond libvgpu's count (here: the stub driver called
    directly, past the hooks) is charged, and further allocations are refused."""
    run = each_vgpu.run("ctx", "0", "foreignalloc", "600m",
                        "waitfree", str(GiB - 600 * MiB), "5000", "alloc", "600m", "meminfo",
                        env={**LIMIT_1G, "STUB_PID_OFFSET": "7"})
    assert rcs(run.named("alloc")) == [2]
    assert run.one("meminfo").int("free") <= GiB - 600 * MiB


def test_deepbind_library_is_reconciled(vgpu: Harness) -> None:
    """A library loaded with RTLD_DEEPBIND binds to the driver before the preload. (Plain build
    only: the sanitizer runtime refuses RTLD_DEEPBIND.)"""
    run = vgpu.run("ctx", "0", "alloc", "1m", "deepbind", "600m",
                        "waitfree", str(GiB - 600 * MiB), "5000", "alloc", "600m", "meminfo",
                        env={**LIMIT_1G, "STUB_PID_OFFSET": "7"})
    assert run.one("deepbind").int("rc") == 0, "the library's own allocation bypasses the hooks"
    assert rcs(run.named("alloc")) == [0, 2]
    assert run.one("meminfo").int("free") < GiB - 600 * MiB


# --- host pid: told by a probe only this process makes, never guessed from a list diff ---------


def started_slot(harness: Harness, env: dict[str, str]) -> tuple[int, Slot, str]:
    """Start a process that takes a context and waits: its pid, its slot, its stderr."""
    process = harness.start("pid", "ctx", "0", "touch", str(harness.tmp / "ready"),
                            "waitfile", str(harness.tmp / "go"), env=env)
    try:
        while not (harness.tmp / "ready").exists():
            assert process.poll() is None, process.communicate()
        (slot,) = read_region(harness.cache).live()
    finally:
        (harness.tmp / "go").touch()
    run = finish(process)
    return run.one("pid").int("value"), slot, run.stderr


HOST_PID = {**CONTEXT_COST, **LIMIT_1G}


def test_another_containers_new_process_is_not_taken_for_ours(each_vgpu: Harness) -> None:
    """Our context shows up in NVML late; another container's new process (5,000 MiB) shows
    up first. A list diff took its pid and charged its memory to us."""
    pid, slot, _ = started_slot(each_vgpu, {**HOST_PID, "STUB_OWN_FROM": "3",
                                            "STUB_FOREIGN": "4242:5000:2"})
    assert slot.hostpid == pid + 100000
    assert slot.context[0] == 300 * MiB


def test_our_process_never_listed_leaves_the_host_pid_unknown(vgpu: Harness) -> None:
    _, slot, stderr = started_slot(vgpu, {**HOST_PID, "STUB_OWN_FROM": "1000",
                                          "STUB_FOREIGN": "4242:5000:2"})
    assert (slot.hostpid, slot.context[0]) == (0, 0)
    assert "host pid not found" in stderr


def test_two_processes_growing_as_ours_is_refused_as_ambiguous(vgpu: Harness) -> None:
    _, slot, stderr = started_slot(vgpu, {**HOST_PID, "STUB_FOREIGN": "4242:5000:3"})
    assert slot.hostpid == 0
    assert "not guessing" in stderr
