"""Build libvgpu and its stub driver once per session and run the C test programs under it."""

from __future__ import annotations

import mmap
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native" / "libvgpu"
BUILD = NATIVE / "build"
MiB = 1 << 20
GiB = 1 << 30

# Variables libvgpu or the stub read; a test states every one it wants.
_OWN_PREFIXES = ("CUDA_", "GPU_CORE", "LIBCUDA_", "STUB_", "LD_PRELOAD", "ASAN_", "UBSAN_")


@dataclass(frozen=True, slots=True)
class Line:
    """One output line of vgpu_drive: `[child] name key=value ...`."""

    name: str
    fields: dict[str, str]
    child: bool = False

    def int(self, key: str) -> int:
        return int(self.fields[key])


@dataclass(frozen=True, slots=True)
class Run:
    lines: list[Line]
    stderr: str
    returncode: int

    def named(self, name: str, *, child: bool = False) -> list[Line]:
        return [line for line in self.lines if line.name == name and line.child == child]

    def one(self, name: str, *, child: bool = False) -> Line:
        found = self.named(name, child=child)
        assert len(found) == 1, f"expected one {name!r} line, got {self.lines}"
        return found[0]


def parse(stdout: str) -> list[Line]:
    lines = []
    for text in stdout.splitlines():
        words = text.split()
        child = bool(words) and words[0] == "child"
        if child:
            words = words[1:]
        if words:
            pairs = dict(word.split("=", 1) for word in words[1:] if "=" in word)
            lines.append(Line(words[0], pairs, child))
    return lines


@dataclass(frozen=True, slots=True)
class Native:
    """The built artefacts of one flavour (plain, or ASan+UBSan)."""

    flavour: str
    library: Path
    preload: str
    drive: Path = BUILD / "tests" / "vgpu_drive"
    bench: Path = BUILD / "tests" / "vgpu_bench"
    stub_dir: Path = BUILD / "stub"


@dataclass
class Harness:
    """Runs the test programs with a fresh shared region in `tmp`."""

    native: Native
    tmp: Path
    env: dict[str, str | None] = field(default_factory=dict)

    @property
    def cache(self) -> Path:
        return Path(self.env.get("CUDA_DEVICE_MEMORY_SHARED_CACHE") or self.tmp / "region.cache")

    def environment(self, extra: Mapping[str, str | None] | None, preload: bool) -> dict[str, str]:
        env: dict[str, str | None] = {
            k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)}
        env["LD_LIBRARY_PATH"] = str(self.native.stub_dir)
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(self.tmp / "region.cache")
        env["LIBCUDA_LOG_LEVEL"] = "2"
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1:exitcode=98"
        env.update(self.env)
        env.update(extra or {})
        if preload:
            env["LD_PRELOAD"] = self.native.preload
        return {k: v for k, v in env.items() if v is not None}  # None: leave the key out

    def run(self, *words: str, env: Mapping[str, str | None] | None = None, preload: bool = True,
            timeout: float = 60) -> Run:
        done = subprocess.run(
            [str(self.native.drive), *words], env=self.environment(env, preload),
            capture_output=True, text=True, timeout=timeout, check=False,
        )
        assert done.returncode == 0, f"vgpu_drive failed ({done.returncode}): {done.stderr}"
        return Run(parse(done.stdout), done.stderr, done.returncode)

    def start(self, *words: str, env: Mapping[str, str | None] | None = None, preload: bool = True,
              capture: bool = True) -> subprocess.Popen[str]:
        output = subprocess.PIPE if capture else subprocess.DEVNULL
        return subprocess.Popen(
            [str(self.native.drive), *words], env=self.environment(env, preload),
            stdout=output, stderr=output, text=True,
        )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> Run:
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"vgpu_drive failed ({process.returncode}): {stderr}"
    return Run(parse(stdout), stderr, process.returncode)


# HAMi-core's v1.2 region offsets, written out independently of the C headers.
REGION_V1_SIZE = 2_008_952
SLOT_SIZE = 1960
PROCS_AT = 1856


@dataclass(frozen=True, slots=True)
class Slot:
    index: int
    pid: int
    hostpid: int
    status: int
    total: list[int]
    context: list[int]
    data: list[int]
    sm_util: list[int]


@dataclass(frozen=True, slots=True)
class Region:
    size: int
    magic: int
    major: int
    minor: int
    device_num: int
    uuids: list[str]
    limit: list[int]
    sm_limit: list[int]
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int
    slots: list[Slot]

    def live(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.status != 0]

    def used(self, device: int) -> int:
        return sum(slot.total[device] for slot in self.live())


def read_region(path: Path) -> Region:
    data = path.read_bytes()
    magic, major, minor = struct.unpack_from("<iII", data, 0)
    proc_num, switch, recent, priority = struct.unpack_from("<iiii", data, 2_008_896)
    slots = []
    for index in range(max(0, min(proc_num, 1024))):
        at = PROCS_AT + index * SLOT_SIZE
        pid, hostpid = struct.unpack_from("<ii", data, at)
        memory = [struct.unpack_from("<8Q", data, at + 8 + 64 * d) for d in range(16)]
        utils = [struct.unpack_from("<6Q", data, at + 1160 + 48 * d) for d in range(16)]
        slots.append(Slot(
            index, pid, hostpid, struct.unpack_from("<i", data, at + 1928)[0],
            total=[m[4] for m in memory], context=[m[0] for m in memory],
            data=[m[2] for m in memory], sm_util=[u[2] for u in utils],
        ))
    return Region(
        size=len(data), magic=magic, major=major, minor=minor,
        device_num=struct.unpack_from("<Q", data, 56)[0],
        uuids=[data[64 + 96 * i: 64 + 96 * (i + 1)].split(b"\0")[0].decode() for i in range(16)],
        limit=list(struct.unpack_from("<16Q", data, 1600)),
        sm_limit=list(struct.unpack_from("<16Q", data, 1728)),
        proc_num=proc_num, utilization_switch=switch, recent_kernel=recent, priority=priority,
        last_kernel_time=struct.unpack_from("<Q", data, 2_008_912)[0], slots=slots,
    )


def write_region_int32(path: Path, offset: int, value: int) -> None:
    """Write one int32 field as the monitor does (recentKernel, utilizationSwitch)."""
    with path.open("r+b") as file, mmap.mmap(file.fileno(), 0) as view:
        struct.pack_into("<i", view, offset, value)


RECENT_KERNEL_AT = 2_008_904
UTILIZATION_SWITCH_AT = 2_008_900


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.communicate()


def _make() -> None:
    done = subprocess.run(["make", "-C", str(NATIVE), f"PYTHON={sys.executable}", "all"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"make -C native/libvgpu all failed:\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def built() -> dict[str, Native]:
    _make()
    asan_runtime = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                  text=True, check=True).stdout.strip()
    plain = BUILD / "libvgpu.so"
    asan = BUILD / "asan" / "libvgpu.so"
    return {
        "plain": Native("plain", plain, str(plain)),
        # The sanitizer runtime must be the first object loaded.
        "asan": Native("asan", asan, f"{asan_runtime} {asan}"),
    }


@pytest.fixture
def vgpu(built: dict[str, Native], tmp_path: Path) -> Iterator[Harness]:
    """The plain library."""
    yield Harness(built["plain"], tmp_path)


@pytest.fixture(params=["plain", "asan"])
def each_vgpu(request: pytest.FixtureRequest, built: dict[str, Native],
              tmp_path: Path) -> Iterator[Harness]:
    """Both flavours: the same test also runs under AddressSanitizer and UBSan."""
    yield Harness(built[request.param], tmp_path)
