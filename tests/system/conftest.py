"""The built libvgpu, its stub driver and the test driver program, made once per session."""

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native" / "libvgpu"
TARGETS = (
    "build/libvgpu.so",
    "build/stub/libcuda.so.1",
    "build/stub/libnvidia-ml.so.1",
    "build/tests/vgpu_drive",
)


@dataclass(frozen=True, slots=True)
class Native:
    library: Path
    stub_dir: Path
    drive: Path


@pytest.fixture(scope="session")
def native() -> Native:
    done = subprocess.run(
        ["make", "-C", str(NATIVE), f"PYTHON={sys.executable}", *TARGETS],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"make -C native/libvgpu failed:\n{done.stdout}\n{done.stderr}")
    build = NATIVE / "build"
    return Native(build / "libvgpu.so", build / "stub", build / "tests" / "vgpu_drive")
