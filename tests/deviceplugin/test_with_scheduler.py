"""A pod scheduled by our scheduler (through the kube-scheduler harness) gets, from Allocate,
exactly the env and mounts HAMi's plugin gives (libvgpu limits, preload, cache) — on the GPU the
scheduler chose."""

from pathlib import Path

from .conftest import NODE, RESOURCE, Node, our_scheduler

DEVICE_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceCoreName: nvidia.com/gpucores
  deviceSplitCount: 4
"""


def gpu_pod(name: str) -> dict[str, object]:
    limits = {RESOURCE: "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


async def test_scheduled_pod_gets_hamis_env_and_mounts(gpu_node: Node, tmp_path: Path) -> None:
    await gpu_node.start()
    kubelet_plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    await kubelet_plugin.wait_for_devices(lambda d: len(d) == 8)
    await gpu_node.eventually(lambda: "hami.io/node-nvidia-register" in gpu_node.node_annotations())
    async with our_scheduler(gpu_node.kube, DEVICE_CONFIG, tmp_path) as harness:
        await gpu_node.kube.create_pod("default", gpu_pod("trainer"))
        outcome = await harness.wait_for("default", "trainer", timeout_s=20)
        assert outcome.node == NODE
        notes = gpu_node.pod_annotations("trainer")
        assert notes["hami.io/bind-phase"] == "allocating"
        assert gpu_node.node_annotations()["hami.io/mutex.lock"].endswith(",default,trainer")
        chosen = notes["hami.io/vgpu-devices-to-allocate"].split(",")[0]

        response = await kubelet_plugin.admit_container(1)

    assert {i.rsplit("-", 1)[0] for i in kubelet_plugin.in_use} == {chosen}
    vgpu = gpu_node.hook / "vgpu"
    envs = dict(response.envs)
    cache = envs.pop("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    assert envs == {
        "NVIDIA_VISIBLE_DEVICES": chosen,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
    }
    assert cache.startswith(f"{vgpu}/") and cache.endswith(".cache")
    uid = gpu_node.pod("trainer")["metadata"]["uid"]
    region = cache.rsplit("/", 1)[1]
    assert [(m.container_path, m.host_path, m.read_only) for m in response.mounts] == [
        (str(vgpu), str(vgpu / "containers" / f"{uid}_main"), True),
        (f"{vgpu}/libvgpu.so", f"{vgpu}/libvgpu.so", True),
        (cache, str(vgpu / "containers" / f"{uid}_main" / region), False),
        ("/tmp/vgpulock", str(gpu_node.hook / "lock"), False),
        ("/etc/ld.so.preload", f"{vgpu}/ld.so.preload", True),
    ]
    assert gpu_node.pod_annotations("trainer")["hami.io/bind-phase"] == "success"
    assert "hami.io/mutex.lock" not in gpu_node.node_annotations()
