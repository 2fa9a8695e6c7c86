"""The demo's pods at work: each runs a small CUDA program under the real libvgpu.so on the
stub driver, so the monitors measure real use and the closing table shows used against limit.

This needs what the system tests need: a built `native/libvgpu` (libvgpu.so, the stub driver and
its `vgpu_drive` program, from a source checkout) and root with util-linux `unshare` for the
private mount namespaces. Without them the demo still runs and says why usage is not shown.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

import pyhami
from pyhami.model import ContainerView
from pyhami.sim.top import MIB, TopError, scrape
from pyhami.testing.namespace_runtime import NamespaceRuntime
from pyhami.testing.node_agent import StartedContainer

# A workload takes this share of each card's memory limit.
WORKLOAD_SHARE = 0.5
NATIVE_BUILD = Path(pyhami.__file__).resolve().parents[2] / "native" / "libvgpu" / "build"


@dataclass(frozen=True, slots=True)
class NativeBuild:
    library: Path
    stub_dir: Path
    drive: Path


def find_native(build: Path | None = None) -> NativeBuild | str:
    """The built libvgpu, stub driver and workload program; or why the demo cannot use them."""
    if (why := NamespaceRuntime.available()) is not None:
        return why
    build = build or NATIVE_BUILD
    native = NativeBuild(build / "libvgpu.so", build / "stub", build / "tests" / "vgpu_drive")
    needed = (native.library, native.stub_dir / "libcuda.so.1", native.drive)
    if not build.parent.is_dir():
        return "this install has no libvgpu (a checkout builds it: make -C native/libvgpu all)"
    if not all(path.is_file() for path in needed):
        return f"libvgpu is not built in {build} (make -C native/libvgpu all)"
    return native


def _limit_mib(value: str) -> int:
    """CUDA_DEVICE_MEMORY_LIMIT_<i> as the device plugin writes it: `<MiB>m`."""
    return int(value.removesuffix("m")) if value.removesuffix("m").isdigit() else 0


class DemoWorkloads(NamespaceRuntime):
    """The demo has no container images: every container runs, in place of its image, a small
    CUDA program that takes half of its memory limit on each card it was given and stays up."""

    def __init__(self, native: NativeBuild, card_bytes: Mapping[str, int], workdir: Path) -> None:
        super().__init__({"LD_LIBRARY_PATH": str(native.stub_dir)}, workdir / "staging")
        self.native = native
        self.card_bytes = card_bytes  # card uuid -> its memory, as the stub reports it
        self.release = workdir / "release"  # the programs exit once this file exists

    def command(self, spec: ContainerView, container: StartedContainer) -> list[str]:
        steps: list[str] = []
        for index, _ in enumerate(self._cards(container)):
            limit = _limit_mib(container.envs.get(f"CUDA_DEVICE_MEMORY_LIMIT_{index}", ""))
            steps += ["ctx", str(index), "alloc", f"{int(limit * WORKLOAD_SHARE)}m"]
        return [str(self.native.drive), *steps, "waitfile", str(self.release)]

    def environment(self, spec: ContainerView, container: StartedContainer) -> dict[str, str]:
        """The stub driver shows the container its cards, as a GPU container runtime would."""
        env = super().environment(spec, container)
        cards = self._cards(container)
        env["STUB_DEVICE_COUNT"] = str(len(cards))
        env["STUB_UUIDS"] = ",".join(cards)
        env["STUB_DEVICE_MEM"] = str(max((self.card_bytes.get(c, 0) for c in cards), default=0))
        return env

    @staticmethod
    def _cards(container: StartedContainer) -> list[str]:
        visible = container.envs.get("NVIDIA_VISIBLE_DEVICES", "")
        return [uuid for uuid in visible.split(",") if uuid.startswith("GPU-")]

    async def finish(self) -> None:
        """Let every program exit, then stop what still runs."""
        self.release.touch()
        await asyncio.sleep(0.1)
        await self.kill_all()


@dataclass(frozen=True, slots=True)
class PodUsage:
    used_mib: int
    limit_mib: int


async def measured_usage(
    monitor_urls: Iterable[str], pods: Iterable[tuple[str, str]], timeout_s: float = 8.0
) -> dict[tuple[str, str], PodUsage]:
    """Per pod, the memory its processes use and their limit, summed over its cards and
    containers, as the monitors export it; waits until every pod named shows use."""
    wanted = set(pods)
    urls = list(monitor_urls)
    usage: dict[tuple[str, str], PodUsage] = {}
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            samples = await scrape(urls)
        except (TopError, aiohttp.ClientError):
            samples = []
        totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for name, labels, value in samples:
            slot = {"hami_vgpu_memory_used_bytes": 0, "hami_vgpu_memory_limit_bytes": 1}.get(name)
            if slot is not None:
                totals[(labels.get("namespace", ""), labels.get("pod", ""))][slot] += value
        usage = {
            key: PodUsage(round(used / MIB), round(limit / MIB))
            for key, (used, limit) in totals.items()
        }
        shown = {key for key, use in usage.items() if use.used_mib > 0}
        if wanted <= shown or asyncio.get_running_loop().time() > deadline:
            return usage
        await asyncio.sleep(0.2)
