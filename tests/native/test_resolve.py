"""Interception: only hooks are exported; dlsym and cuGetProcAddress hand out hooks only where
the driver's own answer is a hooked entry, so versions and per-thread-stream variants survive."""

from __future__ import annotations

import re
import subprocess

import pytest

from .conftest import NATIVE, Harness


def hooked_names() -> set[str]:
    header = (NATIVE / "src" / "vgpu_hooks.h").read_text()
    names: set[str] = set()
    for macro in ("VGPU_CUDA_HOOKED", "VGPU_NVML_HOOKED"):
        body = re.search(rf"#define {macro}\(X\)(.*?)\n\n", header, re.S)
        assert body is not None, macro
        names |= set(re.findall(r"X\((\w+)\)", body.group(1)))
    return names


def test_exports_exactly_the_hooks(vgpu: Harness) -> None:
    done = subprocess.run(["nm", "-D", "--defined-only", str(vgpu.native.library)],
                          capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in done.stdout.splitlines() if line.strip()}
    script = re.sub(r"/\*.*?\*/", "", (NATIVE / "libvgpu.map").read_text(), flags=re.S)
    version_script = set(re.findall(r"\b(\w+);", script))
    assert exported == hooked_names() | {"dlsym"}
    assert version_script - {"local"} == exported


QUERIES = [
    ("gpa", "cuMemAlloc", "12000", "0"),
    ("gpa", "cuMemFree", "12000", "0"),
    ("gpa", "cuMemGetInfo", "12000", "0"),
    ("gpa", "cuMemPrefetchAsync", "12000", "0"),  # legacy ABI below 12.2 ...
    ("gpa", "cuMemPrefetchAsync", "12020", "0"),  # ... CUmemLocation ABI from 12.2
    ("gpa", "cuMemAdvise", "11080", "0"),
    ("gpa", "cuLaunchKernel", "12000", "0"),
    ("gpa", "cuLaunchKernel", "12000", "2"),  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
    ("gpa", "cuLaunchKernelEx", "12000", "2"),
    ("gpa", "cuLaunchCooperativeKernel", "12000", "2"),
    ("gpa", "cuGraphLaunch", "12000", "2"),
    ("gpa", "cuMemAllocAsync", "12000", "2"),
    ("gpa", "cuMemFreeAsync", "12000", "1"),
    ("gpa", "cuMemAllocAsync", "11000", "0"),  # not in 11.0: VERSION_NOT_SUFFICIENT
    ("gpa", "cuNoSuchThing", "12000", "0"),
    ("gpa", "cuGetProcAddress", "12000", "0"),
    ("gpa", "cuGetProcAddress", "11030", "0"),
    ("gpa", "cuDeviceGetUuid", "12000", "0"),
    ("gpa1", "cuDevicePrimaryCtxRelease", "12000", "0"),
    ("gpa1", "cuLaunchKernel", "12000", "2"),
]


def test_cuGetProcAddress_returns_the_drivers_symbols(each_vgpu: Harness) -> None:
    words = [word for query in QUERIES for word in query]
    plain = each_vgpu.run(*words, preload=False)
    hooked = each_vgpu.run(*words)
    hooks = hooked_names()
    for query, without, with_ in zip(QUERIES, plain.lines, hooked.lines, strict=True):
        assert without.fields["name"] == with_.fields["name"], query
        assert without.fields["status"] == with_.fields["status"], query
        assert with_.fields["lib"] == ("libvgpu.so" if with_.fields["name"] in hooks
                                       else without.fields["lib"]), query
    names = [line.fields["name"] for line in hooked.lines]
    assert names[3:5] == ["cuMemPrefetchAsync", "cuMemPrefetchAsync_v2"]
    assert names[7] == "cuLaunchKernel_ptsz"


def test_hooked_entries_through_cuGetProcAddress_are_enforced(vgpu: Harness) -> None:
    run = vgpu.run("ctx", "0", "launch", "ptsz", "3", "10", "asyncptsz", "2g",
                   env={"CUDA_DEVICE_MEMORY_LIMIT": "1g"})
    launch = run.one("launch")
    assert (launch.int("launches"), launch.int("ptsz")) == (3, 3), "ptsz stays ptsz"
    assert run.one("asyncptsz").int("rc") == 2


@pytest.mark.parametrize(
    ("handle", "symbol", "lib"),
    [
        pytest.param("libcuda.so.1", "cuMemAlloc_v2", "libvgpu.so", id="driver-handle-hooked"),
        pytest.param("libcuda.so.1", "cuInit", "libcuda.so.1", id="driver-handle-not-hooked"),
        pytest.param("default", "cuMemFree_v2", "libvgpu.so", id="default"),
        pytest.param("libnvidia-ml.so.1", "nvmlDeviceGetMemoryInfo_v2", "libvgpu.so",
                     id="nvml-handle"),
        pytest.param("next", "puts", "libc.so.6", id="next-from-the-program"),
        pytest.param("next", "cuMemAlloc_v2", "libvgpu.so", id="next-after-the-program"),
    ],
)
def test_dlsym_resolves_like_the_loader_but_hands_out_hooks(each_vgpu: Harness, handle: str,
                                                            symbol: str, lib: str) -> None:
    if each_vgpu.native.flavour == "asan" and symbol == "puts":
        lib = "libasan.so"  # preloaded before libvgpu, it is "next" after the program
    run = each_vgpu.run("dlsym", handle, symbol, "dlsym", handle, symbol)
    first, second = run.named("dlsym")
    assert (first.fields["name"], first.fields["lib"]) == (symbol, lib)
    assert first == second, "the same answer every time (HAMi-core returned NULL the 2nd time)"
