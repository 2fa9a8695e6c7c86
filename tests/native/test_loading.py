"""Loading through /etc/ld.so.preload, as HAMi's device plugin mounts it. The file is placed by
an overlay on /etc inside a private mount namespace, so the machine's own /etc is untouched."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from .conftest import Harness, parse, read_region


def in_mount_namespace(harness: Harness, overlays: dict[str, Path], command: list[str],
                       env: Mapping[str, str | None], preload: bool = False
                       ) -> subprocess.CompletedProcess[str]:
    """Run `command` with each directory in `overlays` overlaid by the given upper directory,
    in a private mount namespace (the machine's own directories are untouched)."""
    mounts = []
    for n, (target, upper) in enumerate(overlays.items()):
        work = harness.tmp / f"overlay-work-{n}"
        work.mkdir()
        mounts.append(f"mount -t overlay overlay -o lowerdir={target},upperdir={upper},"
                      f"workdir={work} {target}")
    script = " && ".join([*mounts, f"exec {shlex.join(command)}"])
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          env=harness.environment(env, preload=preload), capture_output=True,
                          text=True, check=False)
    if done.returncode != 0 and ("unshare" in done.stderr or "mount" in done.stderr):
        pytest.skip(f"this machine forbids private mount namespaces: {done.stderr.strip()}")
    return done


def under_ld_so_preload(harness: Harness, command: list[str], env: Mapping[str, str | None]
                        ) -> subprocess.CompletedProcess[str]:
    upper = harness.tmp / "etc"
    upper.mkdir()
    (upper / "ld.so.preload").write_text(f"{harness.native.library}\n")
    return in_mount_namespace(harness, {"/etc": upper}, command, env)


@pytest.fixture
def plain_only(vgpu: Harness) -> Harness:
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    return vgpu


def test_ld_so_preload_enforces_the_limit(plain_only: Harness) -> None:
    done = under_ld_so_preload(
        plain_only, [str(plain_only.native.drive), "ctx", "0", "alloc", "1g", "alloc", "1"],
        {"CUDA_DEVICE_MEMORY_LIMIT": "1g"},
    )
    assert done.returncode == 0, done.stderr
    assert [line.int("rc") for line in parse(done.stdout) if line.name == "alloc"] == [0, 2]
    assert not Path("/etc/ld.so.preload").exists() or (
        str(plain_only.native.library) not in Path("/etc/ld.so.preload").read_text()
    ), "the machine's /etc was not touched"


def test_ld_so_preload_leaves_other_programs_alone(plain_only: Harness) -> None:
    done = under_ld_so_preload(plain_only, ["sh", "-c", "echo hello; ls / >/dev/null"],
                               {"CUDA_DEVICE_MEMORY_LIMIT": "1g"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello\n", "")
    assert not plain_only.cache.exists()


def test_a_process_without_any_cuda_environment_gets_the_device_plugins_limits(
    plain_only: Harness,
) -> None:
    """The escape HAMi-core left open: `env -i` (or a login shell) drops the variables and the
    process saw the whole card. The device plugin's limits.env in /usr/local/vgpu closes it."""
    from pyhami.deviceplugin.allocation import AllocationSettings, limits_text
    from pyhami.kube.views import read_container

    upper = plain_only.tmp / "usr-local"
    (upper / "vgpu").mkdir(parents=True)
    cache = "/usr/local/vgpu/0b7a-region.cache"
    (upper / "vgpu" / "limits.env").write_text(limits_text(
        {"CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_SM_LIMIT": "30",
         "CUDA_DEVICE_MEMORY_SHARED_CACHE": cache},
        read_container({"resources": {"limits": {"nvidia.com/priority": "0"}}}, init=False),
        AllocationSettings(),
        may_control=False,
    ))
    drive = [str(plain_only.native.drive), "ctx", "0", "alloc", "1000m", "alloc", "1"]
    done = in_mount_namespace(plain_only, {"/usr/local": upper}, drive,
                              {"CUDA_DEVICE_MEMORY_SHARED_CACHE": None}, preload=True)
    assert done.returncode == 0, done.stderr
    assert [line.int("rc") for line in parse(done.stdout) if line.name == "alloc"] == [0, 2]
    region = read_region(upper / "vgpu" / "0b7a-region.cache")
    assert (region.limit[0], region.sm_limit[0], region.priority) == (1000 << 20, 30, 0)
