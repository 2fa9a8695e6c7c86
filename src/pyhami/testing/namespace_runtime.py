"""A container runtime for the system tests and the demo: the pod's command as a real process,
with the env and the mounts kubelet got from Allocate, in a private mount namespace.

Mounts are applied like containerd does: sorted by container path depth (so the per-container
cache directory lands on `<hook>/vgpu` before the library file on top of it, whose empty mount
point appears in the cache directory, the placeholder the monitor knows), bind, remount
read-only where asked. Two mounts point at machine-wide paths (`/etc/ld.so.preload`,
`/tmp/vgpulock`); binding those would change the test machine, so the preload file's content
goes to LD_PRELOAD instead (the same loading mechanism) and libvgpu, which has no use for the
lock directory, runs without it. The environment is exactly: the container spec's `env`, then
Allocate's envs, then LD_PRELOAD and the stub driver's settings.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pyhami.model import ContainerView, PodView
from pyhami.testing.node_agent import ContainerMount, StartedContainer

# Container paths that exist on every machine: never bound here.
MACHINE_PATHS = (PurePosixPath("/etc"), PurePosixPath("/tmp/vgpulock"))


def _machine_wide(mount: ContainerMount) -> bool:
    path = PurePosixPath(mount.container_path)
    return any(path == p or p in path.parents for p in MACHINE_PATHS)


def mount_script(mounts: tuple[ContainerMount, ...], staging: Path) -> list[str]:
    """Shell lines applying `mounts` as the runtime would (minus the machine-wide ones).

    Every source is bound to `staging` first: a runtime resolves host paths on the host, so a
    source must not be hidden by an earlier mount (the library under `<hook>/vgpu` is, once the
    cache directory covers `<hook>/vgpu`)."""
    used = [m for m in mounts if not _machine_wide(m)]
    lines = []
    for number, mount in enumerate(used):
        stage = shlex.quote(str(staging / str(number)))
        is_dir = os.path.isdir(mount.host_path)
        lines.append(f"mkdir -p {stage}" if is_dir else f": > {stage}")
        lines.append(f"mount --bind {shlex.quote(mount.host_path)} {stage}")
    by_depth = sorted(
        enumerate(used), key=lambda n_m: len(PurePosixPath(n_m[1].container_path).parts)
    )
    for number, mount in by_depth:
        target = shlex.quote(mount.container_path)
        is_dir = os.path.isdir(mount.host_path)
        lines.append(f"mkdir -p {target}" if is_dir else f"[ -e {target} ] || : > {target}")
        lines.append(f"mount --bind {shlex.quote(str(staging / str(number)))} {target}")
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    return lines


def preload_of(mounts: tuple[ContainerMount, ...]) -> str:
    for mount in mounts:
        if mount.container_path == "/etc/ld.so.preload":
            return " ".join(Path(mount.host_path).read_text().split())
    return ""


@dataclass
class Process:
    pod: str
    container: StartedContainer
    env: dict[str, str]
    handle: asyncio.subprocess.Process
    output: list[str] = field(default_factory=list)


class NamespaceRuntime:
    """Runs each started container's `command` + `args`; `stop` sends SIGTERM, as kubelet does."""

    def __init__(self, driver_env: dict[str, str], staging: Path) -> None:
        self.driver_env = driver_env
        self.staging = staging
        self.processes: dict[tuple[str, str], Process] = {}
        self.exited: dict[tuple[str, str], int] = {}
        self._readers: set[asyncio.Task[None]] = set()
        self._execs = 0

    @staticmethod
    def available() -> str | None:
        """Why this machine cannot run it, or None."""
        if shutil.which("unshare") is None:
            return "util-linux unshare is not installed"
        if os.geteuid() != 0:
            return "private mount namespaces need root here"
        return None

    def command(self, spec: ContainerView, container: StartedContainer) -> list[str]:
        """What runs: the container's `command` and `args`."""
        del container
        return list(spec.command)

    def environment(self, spec: ContainerView, container: StartedContainer) -> dict[str, str]:
        env = {name: "" if value is None else str(value) for name, value in spec.env}
        env.update(container.envs)
        env["LD_PRELOAD"] = preload_of(container.mounts)
        env.update(self.driver_env)
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        return env

    async def _spawn(
        self, staging: Path, container: StartedContainer, env: dict[str, str], command: list[str]
    ) -> asyncio.subprocess.Process:
        staging.mkdir(parents=True)
        script = " && ".join([*mount_script(container.mounts, staging), 'exec env -i "$@"'])
        words = [f"{k}={v}" for k, v in env.items()]
        return await asyncio.create_subprocess_exec(
            "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            *words, *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip

    async def start(self, pod: PodView, container: StartedContainer) -> None:
        spec = next(c for c in pod.all_containers if c.name == container.name)
        command = self.command(spec, container)
        env = self.environment(spec, container)
        staging = self.staging / f"{pod.uid}_{container.name}"
        handle = await self._spawn(staging, container, env, command)
        key = (pod.name, container.name)
        process = Process(pod.name, container, env, handle)
        self.processes[key] = process
        reader = asyncio.create_task(self._read(key, process))
        self._readers.add(reader)
        reader.add_done_callback(self._readers.discard)

    async def exec(
        self, pod: str, container: str, command: list[str], *, unset: tuple[str, ...] = ()
    ) -> list[str]:
        """A second process in the container (`kubectl exec`), its env without `unset`; its
        output once it exits."""
        running = self.processes[(pod, container)]
        env = {k: v for k, v in running.env.items() if k not in unset}
        self._execs += 1
        staging = self.staging / f"exec-{self._execs}"
        handle = await self._spawn(staging, running.container, env, command)
        stdout, _ = await asyncio.wait_for(handle.communicate(), 30)
        assert handle.returncode == 0, stdout.decode(errors="replace")
        return stdout.decode(errors="replace").splitlines()

    async def _read(self, key: tuple[str, str], process: Process) -> None:
        assert process.handle.stdout is not None
        async for line in process.handle.stdout:
            process.output.append(line.decode(errors="replace").rstrip("\n"))
        self.exited[key] = await process.handle.wait()

    async def stop(self, pod: PodView, container: StartedContainer) -> None:
        process = self.processes.get((pod.name, container.name))
        if process is None or process.handle.returncode is not None:
            return
        process.handle.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.handle.wait(), 10)

    async def kill_all(self) -> None:
        """SIGKILL what still runs (a test's pods outlive the cluster, as after a kubelet stop)."""
        for process in self.processes.values():
            if process.handle.returncode is None:
                process.handle.kill()
                await asyncio.wait_for(process.handle.wait(), 10)

    async def wait_output(
        self, pod: str, container: str, word: str, timeout_s: float = 10
    ) -> list[str]:
        """The process's lines once one starts with `word` (its output so far otherwise)."""
        async with asyncio.timeout(timeout_s):
            while True:
                process = self.processes.get((pod, container))
                if process is not None:
                    if any(line.split(" ", 1)[0] == word for line in process.output):
                        return list(process.output)
                    if (pod, container) in self.exited:
                        raise AssertionError(f"{pod}/{container} exited: {process.output}")
                await asyncio.sleep(0.02)
