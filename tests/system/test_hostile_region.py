"""A hostile container against the node's monitor, on the demo's stack with real processes.

Next to a victim pod that allocates under libvgpu, an attacker pod (a shell in its own mount
namespace, with exactly the mounts Allocate gave it) works on its own cache directory: it tries
to link a region name to the victim's region (the folder is mounted read-only, so it cannot),
then writes a region claiming 2^62 bytes in use into its own region file, then truncates and
rewrites that file in a loop. Throughout, the monitor must keep answering, never publish the
victim's usage or an impossible number under the attacker's pod, and say why. (A link that does
get into a region folder is refused by the monitor's scan: tests/monitor/test_scan.py.)"""

import asyncio
import shlex
import struct
from pathlib import Path

import aiohttp

from pyhami.sim.demo.cluster import DemoCluster
from pyhami.testing.namespace_runtime import NamespaceRuntime

from . import test_whole_system as whole
from .conftest import Native

cluster = whole.cluster  # the demo stack, one 80 GiB card, with the namespace runtime
MiB = whole.MiB
ATTACKER_MIB = 1000
ABSURD = 1 << 62  # bytes claimed by one slot
SLOT0_USED_TOTAL = 1856 + 8 + 32  # procs[0].used[0].total in the v1 layout


def attacker(script: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mallory", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["/bin/sh", "-c", script],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(ATTACKER_MIB)}
                    },
                }
            ]
        },
    }


def attack_script(inside: Path, victim_region: Path, lying: Path, honest: Path, work: Path) -> str:
    """Run in the attacker's container: `inside` is its cache directory as it sees it."""
    q = {name: shlex.quote(str(path)) for name, path in {
        "link": inside / "a.cache", "victim": victim_region, "lying": lying, "honest": honest,
        "work": work,
    }.items()}  # fmt: skip
    relative_victim = shlex.quote(f"../{victim_region.parent.name}/{victim_region.name}")
    region = '"$CUDA_DEVICE_MEMORY_SHARED_CACHE"'  # its own region file, the one writable name
    return "\n".join([
        "set -e",
        f"if ln -s {relative_victim} {q['link']}; then touch {q['work']}/linked;"
        f" else touch {q['work']}/link-refused; fi",
        f"until [ -e {q['work']}/go-lying ]; do sleep 0.05; done",
        f"cat {q['lying']} > {region}",
        f"touch {q['work']}/lying",
        f"until [ -e {q['work']}/go-shrinking ]; do sleep 0.05; done",
        f"while [ ! -e {q['work']}/stop ]; do",
        f"  truncate -s 100 {region}",
        f"  cat {q['honest']} > {region}",
        "done",
        f"touch {q['work']}/stopped",
        "exec sleep 1000",
    ])  # fmt: skip


async def appears(path: Path, timeout_s: float = 20) -> None:
    async with asyncio.timeout(timeout_s):
        while not path.exists():
            await asyncio.sleep(0.02)


def mallory(metrics: whole.Metrics, name: str) -> list[float]:
    return whole.pod_samples(metrics, name, "mallory")


async def test_a_hostile_container_cannot_crash_or_fool_the_monitor(
    cluster: tuple[DemoCluster, NamespaceRuntime], native: Native, tmp_path: Path
) -> None:
    demo, runtime = cluster
    node = demo.nodes[0]
    await demo.client.create_pod("default", whole.trainer(native.drive, tmp_path / "release"))
    await node.agent.wait_started("default", "trainer", timeout_s=20)
    await runtime.wait_output("trainer", "main", "meminfo", timeout_s=20)
    victim_uid = (await demo.client.get_pod("default", "trainer"))["metadata"]["uid"]
    victim_dir = node.hook / "vgpu" / "containers" / f"{victim_uid}_main"
    (victim_region,) = [p for p in victim_dir.iterdir() if p.suffix == ".cache"]
    honest = victim_region.read_bytes()  # a sound region, 3000 MiB in use
    lying = bytearray(honest)
    struct.pack_into("<Q", lying, SLOT0_USED_TOTAL, ABSURD)
    (tmp_path / "lying.cache").write_bytes(lying)
    (tmp_path / "honest.cache").write_bytes(honest)
    work = tmp_path / "attack"
    work.mkdir()

    script = attack_script(
        node.hook / "vgpu", victim_region, tmp_path / "lying.cache", tmp_path / "honest.cache", work
    )
    await demo.client.create_pod("default", attacker(script))
    await node.agent.wait_started("default", "mallory", timeout_s=20)
    used, limit = "hami_vgpu_memory_used_bytes", "hami_vgpu_memory_limit_bytes"
    async with aiohttp.ClientSession() as http:
        # 1. No link to the victim's region can be made: the region folder is read-only.
        await appears(work / "link-refused")
        assert not (work / "linked").exists()
        metrics = await whole.eventually_scraped(
            http,
            node.metrics_url,
            lambda m: whole.pod_samples(m, used, "trainer") == [whole.LIMIT_MIB * MiB],
        )
        assert mallory(metrics, used) == [0] and mallory(metrics, limit) == [ATTACKER_MIB * MiB]

        # 2. 2^62 bytes in use on an 80 GiB card: refused, counted, never exported.
        (work / "go-lying").touch()
        await appears(work / "lying")
        metrics = await whole.eventually_scraped(
            http,
            node.metrics_url,
            lambda m: any(
                labels["kind"] == "above_physical" and value >= 1
                for labels, value in m["pyhami_monitor_sanity_alarms"]
            ),
        )
        assert mallory(metrics, used) == [0]
        assert max(value for _, value in metrics[used]) <= whole.CARD_MIB * MiB

        # 3. The file shrinks and regrows under the monitor: every scrape and health check
        # answers, and the attacker's series are its allocation's or its honest region's.
        (work / "go-shrinking").touch()
        healthz = node.metrics_url.replace("/metrics", "/healthz")
        for _ in range(40):
            metrics = await whole.scrape(http, node.metrics_url)
            assert mallory(metrics, used)[0] in (0, whole.LIMIT_MIB * MiB)
            async with http.get(healthz) as response:
                assert response.status == 200, await response.text()
        (work / "stop").touch()
        await appears(work / "stopped")
        metrics = await whole.scrape(http, node.metrics_url)
        assert whole.pod_samples(metrics, used, "trainer") == [whole.LIMIT_MIB * MiB]
