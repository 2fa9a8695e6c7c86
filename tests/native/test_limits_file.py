"""limits.env: the device plugin's file in /usr/local/vgpu wins; the environment and a file
beside a region the environment names can only make limits stricter (README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from .conftest import GiB, Harness, Line, parse, read_region
from .test_loading import in_mount_namespace


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


@pytest.mark.parametrize(("asked", "granted"), [("2g", GiB), ("512m", GiB // 2)],
                         ids=["higher-ignored", "lower-kept"])
def test_environment_only_lowers_the_file(vgpu: Harness, asked: str, granted: int) -> None:
    write_limits(vgpu, "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n")
    run = vgpu.run("ctx", "0", "alloc", str(granted), "alloc", "1",
                   env={"CUDA_DEVICE_MEMORY_LIMIT_0": asked})
    assert [a.int("rc") for a in run.named("alloc")] == [0, 2]


PLUGIN_REGION = "/usr/local/vgpu/0b7a-region.cache"


def with_plugin_file(harness: Harness, text: str, words: list[str],
                     env: Mapping[str, str | None]) -> tuple[list[Line], str, Path]:
    """Run vgpu_drive with `text` as /usr/local/vgpu/limits.env (an overlay in a private mount
    namespace): the lines, stderr, and the overlay's vgpu folder."""
    upper = harness.tmp / "usr-local"
    (upper / "vgpu").mkdir(parents=True)
    (upper / "vgpu" / "limits.env").write_text(text)
    done = in_mount_namespace(harness, {"/usr/local": upper},
                              [str(harness.native.drive), *words], env, preload=True)
    assert done.returncode == 0, done.stderr
    return parse(done.stdout), done.stderr, upper / "vgpu"


PLUGIN_FILE = ("CUDA_DEVICE_MEMORY_LIMIT_0=1g\nCUDA_DEVICE_SM_LIMIT=30\nCUDA_TASK_PRIORITY=1\n"
               f"GPU_CORE_UTILIZATION_POLICY=default\nCUDA_DEVICE_MEMORY_SHARED_CACHE={PLUGIN_REGION}\n")


def test_pod_set_limit_above_the_plugins_is_ignored(vgpu: Harness) -> None:
    lines, stderr, folder = with_plugin_file(
        vgpu, PLUGIN_FILE, ["ctx", "0", "alloc", "1g", "alloc", "1"],
        {"CUDA_DEVICE_MEMORY_LIMIT_0": "4g", "CUDA_DEVICE_SM_LIMIT": "100",
         "GPU_CORE_UTILIZATION_POLICY": "disable", "CUDA_TASK_PRIORITY": "0",
         "CUDA_DEVICE_MEMORY_SHARED_CACHE": None})
    assert [line.int("rc") for line in lines if line.name == "alloc"] == [0, 2]
    assert "CUDA_DEVICE_MEMORY_LIMIT" in stderr and "ignored" in stderr, stderr
    region = read_region(folder / "0b7a-region.cache")
    assert (region.limit[0], region.sm_limit[0], region.priority) == (GiB, 30, 1)


def test_cleared_environment_with_a_chosen_region_keeps_the_plugins_limits(vgpu: Harness) -> None:
    """`env -i CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/mine.cache app`: neither the lost
    environment nor a private region (a fresh count) escapes the device plugin's limits."""
    mine = vgpu.tmp / "mine.cache"
    lines, stderr, folder = with_plugin_file(
        vgpu, PLUGIN_FILE, ["ctx", "0", "alloc", "1g", "alloc", "1"],
        {"CUDA_DEVICE_MEMORY_SHARED_CACHE": str(mine)})
    assert [line.int("rc") for line in lines if line.name == "alloc"] == [0, 2]
    assert not mine.exists(), "the container's region is used, not one of the process's choice"
    assert read_region(folder / "0b7a-region.cache").limit[0] == GiB
    assert "ignored" in stderr


def test_environment_may_tighten_the_plugins_limits(vgpu: Harness) -> None:
    lines, _, folder = with_plugin_file(
        vgpu, PLUGIN_FILE, ["ctx", "0", "alloc", "512m", "alloc", "1"],
        {"CUDA_DEVICE_MEMORY_LIMIT": "512m", "CUDA_DEVICE_SM_LIMIT": "20",
         "CUDA_DEVICE_MEMORY_SHARED_CACHE": None})
    assert [line.int("rc") for line in lines if line.name == "alloc"] == [0, 2]
    region = read_region(folder / "0b7a-region.cache")
    assert (region.limit[0], region.sm_limit[0]) == (GiB // 2, 20)


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
