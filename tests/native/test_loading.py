"""Loading through /etc/ld.so.preload, as HAMi's device plugin mounts it. The file is placed by
an overlay on /etc inside a private mount namespace, so the machine's own /etc is untouched."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import Harness, parse


def under_ld_so_preload(harness: Harness, command: list[str], env: dict[str, str]
                        ) -> subprocess.CompletedProcess[str]:
    upper, work = harness.tmp / "upper", harness.tmp / "work"
    upper.mkdir()
    work.mkdir()
    (upper / "ld.so.preload").write_text(f"{harness.native.library}\n")
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
              f" && exec {shlex.join(command)}")
    environment = harness.environment(env, preload=False)
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0 and ("unshare" in done.stderr or "mount" in done.stderr):
        pytest.skip(f"this machine forbids private mount namespaces: {done.stderr.strip()}")
    return done


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
