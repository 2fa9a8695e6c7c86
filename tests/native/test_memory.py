"""Memory limits: parsing, OOM exactly past the limit, every allocation path, virtualised
queries. Each test runs vgpu_drive (linked against the stub driver) under LD_PRELOAD."""

from __future__ import annotations

import subprocess

import pytest

from .conftest import GiB, Harness, MiB, finish, read_region


@pytest.mark.parametrize(
    ("value", "limit"),
    [
        pytest.param("3000m", 3000 * MiB, id="mebibytes"),
        pytest.param("1g", GiB, id="gibibytes"),
        pytest.param("2G", 2 * GiB, id="upper-case"),
        pytest.param("4096k", 4 * MiB, id="kibibytes"),
        pytest.param("1048577", MiB + 1, id="bytes"),
        pytest.param("0", 0, id="zero-is-unlimited"),
    ],
)
def test_memory_limit_syntax(vgpu: Harness, value: str, limit: int) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT": value}
    run = vgpu.run("ctx", "0", "alloc", str(limit or 15 * GiB), "alloc", "1", env=env)
    allocs = run.named("alloc")
    assert allocs[0].int("rc") == 0, "an allocation of exactly the limit succeeds"
    assert allocs[1].int("rc") == (2 if limit else 0), "one byte more is out of memory"
    assert read_region(vgpu.cache).limit == [limit] * 16


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "abc", id="not-a-number"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "1.5g", id="fraction"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "3T", id="unknown-suffix"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "0x10m", id="hex"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "010m", id="leading-zero"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "-1g", id="negative"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", " 1g", id="space"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "18446744073709551616", id="overflow"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT", "17179869184g", id="overflow-by-suffix"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT_3", "lots", id="per-device"),
        pytest.param("CUDA_DEVICE_SM_LIMIT", "101", id="sm-over-100"),
        pytest.param("CUDA_DEVICE_SM_LIMIT", "30%", id="sm-percent-sign"),
        pytest.param("CUDA_DEVICE_MEMORY_SHARED_CACHE", "relative.cache", id="relative-cache"),
    ],
)
def test_malformed_setting_refuses_every_allocation(vgpu: Harness, key: str, value: str) -> None:
    run = vgpu.run("ctx", "0", "alloc", "1", "meminfo", "nvml", "0", env={key: value})
    assert run.one("alloc").int("rc") == 2, "malformed limits fail closed, never open"
    assert run.one("meminfo").int("free") == 0
    assert run.one("nvml").int("free") == 0
    assert key in run.stderr and value.strip() in run.stderr, run.stderr


def test_per_device_limit_wins_over_the_default(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT": "2g", "CUDA_DEVICE_MEMORY_LIMIT_1": "1g",
           "CUDA_DEVICE_MEMORY_LIMIT_0": "0"}
    run = vgpu.run("ctx", "1", "alloc", "1g", "alloc", "1", "ctx", "0", "alloc", "2g",
                   "alloc", "1", env=env)
    assert [a.int("rc") for a in run.named("alloc")] == [0, 2, 0, 2]
    assert read_region(vgpu.cache).limit[:3] == [2 * GiB, GiB, 2 * GiB]


def test_sm_limit_syntax_reaches_the_region(vgpu: Harness) -> None:
    vgpu.run("ctx", "0", env={"CUDA_DEVICE_SM_LIMIT": "30", "CUDA_DEVICE_SM_LIMIT_2": "55"})
    assert read_region(vgpu.cache).sm_limit[:4] == [30, 30, 55, 30]


def test_out_of_memory_one_byte_past_the_limit(each_vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
    run = each_vgpu.run("ctx", "0", "alloc", str(GiB + 1), "alloc", "512m", "alloc", "512m",
                        "alloc", "1", env=env)
    assert [a.int("rc") for a in run.named("alloc")] == [2, 0, 0, 2]
    assert "out of memory" in run.stderr


def test_freed_memory_can_be_allocated_again(each_vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
    run = each_vgpu.run("ctx", "0", "alloc", "600m", "alloc", "600m", "free", "0",
                        "alloc", "600m", "meminfo", env=env)
    assert [a.int("rc") for a in run.named("alloc")] == [0, 2, 0]
    assert run.one("free").int("rc") == 0
    assert run.one("meminfo").int("free") == GiB - 600 * MiB


# (commands, bytes the object is charged): pitch rows are 512-byte aligned by the stub driver;
# arrays are width*height*depth bytes of one 8-bit channel; a mipmap adds its halved levels.
ALLOCATION_PATHS = [
    pytest.param(["alloc", "100m"], 100 * MiB, id="cuMemAlloc"),
    pytest.param(["managed", "100m"], 100 * MiB, id="cuMemAllocManaged"),
    pytest.param(["async", "100m"], 100 * MiB, id="cuMemAllocAsync"),
    pytest.param(["asyncptsz", "100m"], 100 * MiB, id="cuMemAllocAsync_ptsz"),
    pytest.param(["pool", "100m"], 100 * MiB, id="cuMemAllocFromPoolAsync"),
    pytest.param(["pitch", "1000", "1000"], 1024 * 1000, id="cuMemAllocPitch"),
    pytest.param(["vmm", "0", "100m"], 100 * MiB, id="cuMemCreate"),
    pytest.param(["array", "4096", "1024"], 4 * MiB, id="cuArrayCreate"),
    pytest.param(["array3d", "256", "256", "64"], 4 * MiB, id="cuArray3DCreate"),
    pytest.param(["mipmap", "1024", "1024", "3"], (1024 * 1024 * 21) // 16,
                 id="cuMipmappedArrayCreate"),
]


@pytest.mark.parametrize(("create", "charged"), ALLOCATION_PATHS)
def test_every_allocation_path_is_charged(each_vgpu: Harness, create: list[str],
                                          charged: int) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
    # `sync`: a stream-ordered pool keeps freed memory until synchronisation trims it.
    run = each_vgpu.run("ctx", "0", *create, "meminfo", "alloc", str(GiB - charged + 1),
                        "alloc", str(GiB - charged), "free", "0", "free", "1", "sync", "meminfo",
                        env=env)
    first, last = run.named("meminfo")
    assert first.int("free") == GiB - charged
    allocs = run.named("alloc")
    assert allocs[-2].int("rc") == 2, "the rest of the limit plus one byte is refused"
    assert allocs[-1].int("rc") == 0, "exactly the rest of the limit is granted"
    assert [f.int("rc") for f in run.named("free")] == [0, 0]
    assert last.int("free") == GiB, "freeing gives every byte back"


def test_vmm_create_without_a_context_charges_the_location_device(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_1": "64m"}
    run = vgpu.run("vmm", "1", "64m", "vmm", "1", "1", "free", "0", "vmm", "1", "1", env=env)
    assert [a.int("rc") for a in run.named("vmm")] == [0, 2, 0]


def test_frees_of_unknown_pointers_reach_the_driver(each_vgpu: Harness) -> None:
    run = each_vgpu.run("ctx", "0", "foreignfree", env={"CUDA_DEVICE_MEMORY_LIMIT": "1g"})
    line = run.one("foreignfree")
    assert (line.int("rc"), line.int("forwarded"), line.int("still_allocated")) == (0, 1, 0)


def test_queries_show_the_container_view_consistently(each_vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
    run = each_vgpu.run("ctx", "0", "alloc", "300m", "meminfo", "nvml", "0", "nvml2", "0",
                        "totalmem", "0", "totalmem", "1", "nvml", "1", env=env)
    meminfo, nvml, nvml2 = run.one("meminfo"), run.named("nvml")[0], run.one("nvml2")
    assert (meminfo.int("total"), meminfo.int("free")) == (GiB, GiB - 300 * MiB)
    assert (nvml.int("total"), nvml.int("free"), nvml.int("used")) == (GiB, GiB - 300 * MiB,
                                                                       300 * MiB)
    assert (nvml2.int("total"), nvml2.int("free"), nvml2.int("used"),
            nvml2.int("reserved")) == (GiB, GiB - 300 * MiB, 300 * MiB, 0)
    totals = run.named("totalmem")
    assert totals[0].int("total") == GiB
    assert totals[1].int("total") == 16 * GiB, "a device without a limit shows the real card"
    assert run.named("nvml")[1].int("total") == 16 * GiB


def test_queries_never_fail_or_underflow_past_the_limit(vgpu: Harness) -> None:
    # A context bigger than the limit is charged anyway: it exists.
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "200m", "STUB_CONTEXT_BYTES": str(300 * MiB)}
    run = vgpu.run("ctx", "0", "meminfo", "nvml", "0", "alloc", "1", env=env)
    assert (run.one("meminfo").int("rc"), run.one("meminfo").int("free")) == (0, 0)
    assert run.one("meminfo").int("total") == 200 * MiB
    assert (run.one("nvml").int("free"), run.one("nvml").int("used")) == (0, 200 * MiB)
    assert run.one("alloc").int("rc") == 2


def test_without_limits_nothing_is_changed(vgpu: Harness) -> None:
    words = ["ctx", "0", "alloc", "1g", "meminfo", "nvml", "0", "nvml2", "0", "totalmem", "0"]
    plain, hooked = vgpu.run(*words, preload=False), vgpu.run(*words)
    assert plain.lines == hooked.lines
    assert hooked.stderr == ""


def test_primary_context_is_charged_and_given_back(vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g", "STUB_CONTEXT_BYTES": str(300 * MiB),
           "STUB_PID_OFFSET": "100000"}
    process = vgpu.start("pid", "ctx", "0", "meminfo", "alloc", "724m", "alloc", "1",
                         "touch", str(vgpu.tmp / "ready"), "waitfile", str(vgpu.tmp / "go"),
                         env=env)
    try:
        while not (vgpu.tmp / "ready").exists():
            assert process.poll() is None, process.communicate()
        region = read_region(vgpu.cache)
        (slot,) = region.live()
        assert slot.context[0] == 300 * MiB
        assert slot.data[0] == 724 * MiB
        assert slot.total[0] == GiB
        assert slot.hostpid == slot.pid + 100000, "host pid found from the NVML process list"
    finally:
        (vgpu.tmp / "go").touch()
    run = finish(process)
    assert run.one("meminfo").int("free") == GiB - 300 * MiB
    assert [a.int("rc") for a in run.named("alloc")] == [0, 2]


def test_cuda_ordinals_map_to_nvml_indices_by_uuid(vgpu: Harness) -> None:
    # CUDA device 0 is NVML device 1: the limit and the usage both belong to NVML index 1.
    env = {"STUB_CUDA_ORDER": "1,0", "CUDA_DEVICE_MEMORY_LIMIT_1": "1g"}
    run = vgpu.run("ctx", "0", "alloc", "1g", "alloc", "1", "meminfo", env=env)
    assert [a.int("rc") for a in run.named("alloc")] == [0, 2]
    assert run.one("meminfo").int("total") == GiB


def test_non_cuda_process_is_left_alone(vgpu: Harness) -> None:
    env = vgpu.environment({"CUDA_DEVICE_MEMORY_LIMIT": "1g"}, preload=True)
    done = subprocess.run(["sh", "-c", "echo hello"], env=env, capture_output=True, text=True,
                          check=True)
    assert (done.stdout, done.stderr) == ("hello\n", "")
    assert not vgpu.cache.exists(), "no region for a process that never touches CUDA"


def test_threads_racing_to_the_limit_get_exactly_the_limit(each_vgpu: Harness) -> None:
    run = each_vgpu.run("ctx", "0", "threads", "8", "16m", "meminfo",
                        env={"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"})
    assert run.one("threads").int("chunks") == 64
    assert run.one("meminfo").int("free") == 0


def test_pitch_rounding_past_the_limit_is_refused_and_undone(vgpu: Harness) -> None:
    # 1000 x 1000 fits 1,010,000 bytes, but the driver pads rows to 1024 bytes: 1,024,000.
    run = vgpu.run("ctx", "0", "pitch", "1000", "1000", "alloc", "1010000",
                   env={"CUDA_DEVICE_MEMORY_LIMIT_0": "1010000"})
    assert run.one("pitch").int("rc") == 2
    assert run.one("alloc").int("rc") == 0, "the refused pitch allocation left nothing behind"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param("CUDA_TASK_PRIORITY", "high", id="priority"),
        pytest.param("GPU_CORE_UTILIZATION_POLICY", "sometimes", id="policy"),
        pytest.param("CUDA_OVERSUBSCRIBE", "maybe", id="oversubscribe"),
        pytest.param("LIBCUDA_LOG_LEVEL", "9", id="log-level"),
    ],
)
def test_malformed_non_limit_settings_fall_back_loudly(vgpu: Harness, key: str, value: str) -> None:
    run = vgpu.run("ctx", "0", "alloc", "1g", env={key: value, "CUDA_DEVICE_MEMORY_LIMIT": "2g"})
    assert run.one("alloc").int("rc") == 0, "only limits fail closed"
    assert key in run.stderr and value in run.stderr
    assert read_region(vgpu.cache).priority == 1, "the default priority"


def test_later_processes_use_the_regions_limits(vgpu: Harness) -> None:
    vgpu.run("ctx", "0", env={"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"})
    run = vgpu.run("ctx", "0", "alloc", "2g", "alloc", "1g",
                   env={"CUDA_DEVICE_MEMORY_LIMIT_0": "4g"})
    assert [a.int("rc") for a in run.named("alloc")] == [2, 0]
    assert "using the region's" in run.stderr


def test_device_reset_gives_back_what_the_context_held(each_vgpu: Harness) -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}
    run = each_vgpu.run("ctx", "0", "alloc", "600m", "array", "1024", "1024", "vmm", "0", "100m",
                        "reset", "0", "meminfo", "alloc", "924m", "alloc", "1", env=env)
    assert run.one("reset").int("rc") == 0
    assert run.one("meminfo").int("free") == GiB - 100 * MiB, "only the VMM handle survives"
    assert [a.int("rc") for a in run.named("alloc")] == [0, 0, 2]
