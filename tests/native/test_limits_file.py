"""limits.env beside the region file: used when the environment lacks a key (README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import GiB, Harness, read_region


def write_limits(harness: Harness, text: str) -> Path:
    path = harness.tmp / "limits.env"
    path.write_text(text)
    return path


def test_file_supplies_missing_limits(vgpu: Harness) -> None:
    write_limits(vgpu, "# written by the device plugin\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\n\n"
                       "CUDA_DEVICE_SM_LIMIT=30\nCUDA_TASK_PRIORITY=0\n")
    run = vgpu.run("ctx", "0", "alloc", "1g", "alloc", "1")
    assert [a.int("rc") for a in run.named("alloc")] == [0, 2]
    region = read_region(vgpu.cache)
    assert (region.limit[0], region.sm_limit[0], region.priority) == (GiB, 30, 0)


def test_environment_wins_over_the_file(vgpu: Harness) -> None:
    write_limits(vgpu, "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n")
    run = vgpu.run("ctx", "0", "alloc", "2g", "alloc", "1",
                   env={"CUDA_DEVICE_MEMORY_LIMIT_0": "2g"})
    assert [a.int("rc") for a in run.named("alloc")] == [0, 2]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT_0=lots\n", id="bad-value"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT_0 1g\n", id="no-equals"),
        pytest.param("CUDA_DEVICE_MEMORY_LIMIT_0 = 1g\n", id="spaces"),
        pytest.param("=1g\n", id="no-key"),
        pytest.param("X=" + "9" * 5000 + "\n", id="line-too-long"),
    ],
)
def test_malformed_file_fails_closed(vgpu: Harness, text: str) -> None:
    path = write_limits(vgpu, text)
    run = vgpu.run("ctx", "0", "alloc", "1")
    assert run.one("alloc").int("rc") == 2
    assert str(path) in run.stderr or "CUDA_DEVICE_MEMORY_LIMIT_0" in run.stderr, run.stderr


def test_unreadable_file_fails_closed(vgpu: Harness) -> None:
    (vgpu.tmp / "limits.env").mkdir()  # exists but cannot be read as a file
    run = vgpu.run("ctx", "0", "alloc", "1")
    assert run.one("alloc").int("rc") == 2
    assert "limits.env" in run.stderr
