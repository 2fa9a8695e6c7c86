"""Allocate through the whole device plugin vs the API round trips it cannot avoid.

A node with 8 FakeNVML GPUs (split 10) runs the real plugin: FakeKubelet admits one container
per pod over gRPC (GetPreferredAllocation + Allocate), the plugin finds the pod through the node
lock on the fake API server, writes the cache directory and limits file, patches the pod and
releases the lock. In the same run the baseline does only the API calls that path must make
(GET node, GET pod, PATCH pod twice, GET node twice, PATCH node) plus one empty gRPC call. It
prints p50/p95 of both and their ratio, i.e. what our logic costs over the floor.
Run: `python3 benchmarks/deviceplugin_allocate.py [--pods 60]`.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.stats import percentile
from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.api import api_pb2
from pyhami.deviceplugin.config import VgpuConfig
from pyhami.deviceplugin.service import DevicePlugin, PluginOptions
from pyhami.kube import KubeClient
from pyhami.testing import FakeKubeAPIServer, FakeKubelet, FakeNVML
from pyhami.testing.fake_nvml import a100_80g
from tests.deviceplugin.conftest import NODE, RESOURCE, lock_value, scheduled_pod

GPUS = 8
SPLIT = 10


async def main(pods: int) -> None:
    hook = Path(tempfile.mkdtemp(prefix="dp-bench-"))
    (hook / "vgpu").mkdir()
    async with FakeKubeAPIServer() as api, FakeKubelet() as kubelet:
        api.store.create("nodes", None, {"metadata": {"name": NODE}})
        kube = KubeClient(api.configuration())
        nvml = FakeNVML.with_gpus(*(a100_80g() for _ in range(GPUS)))
        options = PluginOptions(
            node_name=NODE,
            plugin_dir=kubelet.directory,
            kubelet_socket=kubelet.socket,
            settings=AllocationSettings(
                hook_path=PurePosixPath(hook), vgpu_lock_dir=PurePosixPath(hook / "lock")
            ),
            mig_apply_lock=hook / "hami" / "hami-mig-apply.lock",
        )
        config = VgpuConfig(device_split_count=SPLIT)
        plugin = DevicePlugin(kube, nvml, options, lambda: config)
        stop = asyncio.Event()
        task = asyncio.create_task(plugin.run(stop))
        connection = await kubelet.wait_for_plugin(RESOURCE)
        await connection.wait_for_devices(lambda d: len(d) == GPUS * SPLIT)

        allocate: list[float] = []
        floor: list[float] = []
        for n in range(pods):
            uuid = nvml.device_uuid(n % GPUS)
            name = f"pod-{n}"
            api.store.create("pods", "default", scheduled_pod(name, [("main", [(uuid, 1000, 10)])]))
            lock = {"metadata": {"annotations": {"hami.io/mutex.lock": lock_value(name)}}}
            api.store.patch("nodes", None, NODE, "application/merge-patch+json", lock)
            connection.in_use.clear()
            started = time.perf_counter()
            await connection.admit_container(1)
            allocate.append(time.perf_counter() - started)

            started = time.perf_counter()
            await kube.get_node(NODE)
            await kube.get_pod("default", name)
            await kube.patch_pod("default", name, {"metadata": {"annotations": {"a": "1"}}})
            await kube.patch_pod("default", name, {"metadata": {"annotations": {"b": "1"}}})
            await kube.get_node(NODE)
            node = await kube.get_node(NODE)
            body = {
                "metadata": {
                    "annotations": {"bench": str(n)},
                    "resourceVersion": node["metadata"]["resourceVersion"],
                }
            }
            await kube.patch_node(NODE, body)
            await connection.stub.PreStartContainer(api_pb2.PreStartContainerRequest())
            floor.append(time.perf_counter() - started)

        stop.set()
        await task
        await kube.close()
    ours, base = statistics.median(allocate), statistics.median(floor)
    print(f"pods admitted: {pods} (1 container, 1 GPU each; {GPUS} GPUs x {SPLIT})")
    print(
        f"Allocate path   p50 {ours * 1e3:7.2f} ms   p95 {percentile(allocate, 0.95) * 1e3:7.2f} ms"
    )
    print(f"API-call floor  p50 {base * 1e3:7.2f} ms   p95 {percentile(floor, 0.95) * 1e3:7.2f} ms")
    print(f"ratio (Allocate / floor, p50): {ours / base:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=60)
    asyncio.run(main(parser.parse_args().pods))
