"""The built libvgpu, its stub driver and the test driver program, for tests that run a real
process under libvgpu (`make` in the checkout's native/libvgpu, which is quick once built)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TARGETS = (
    "build/libvgpu.so",
    "build/stub/libcuda.so.1",
    "build/stub/libnvidia-ml.so.1",
    "build/tests/vgpu_drive",
)


class NativeBuildError(Exception):
    """make failed; the message holds its output."""


@dataclass(frozen=True, slots=True)
class Native:
    library: Path
    stub_dir: Path
    drive: Path


def build_native(native_dir: Path) -> Native:
    """Build (or find up to date) the targets in `native_dir` (native/libvgpu)."""
    done = subprocess.run(
        ["make", "-C", str(native_dir), f"PYTHON={sys.executable}", *TARGETS],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise NativeBuildError(f"make -C {native_dir} failed:\n{done.stdout}\n{done.stderr}")
    build = native_dir / "build"
    return Native(build / "libvgpu.so", build / "stub", build / "tests" / "vgpu_drive")
