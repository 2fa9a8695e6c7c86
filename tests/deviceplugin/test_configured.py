"""What the device-config file and the feature flags change, seen where kubelet and the
scheduler see it: the node annotation, ListAndWatch and the Allocate answer."""

from pyhami.deviceplugin.config import VgpuConfig
from pyhami.deviceplugin.toolkit import ToolkitFeatures
from pyhami.testing import FakeNVML
from pyhami.testing.fake_nvml import a100_80g, gb10, v100_32g

from .conftest import RESOURCE, Node


async def test_scaling_type_prefix_and_preconfigured_memory_reach_the_annotation(
    gpu_node: Node,
) -> None:
    gpu_node.nvml = FakeNVML.with_gpus(a100_80g(), v100_32g(), gb10())
    gpu_node.config = VgpuConfig(
        device_split_count=5,
        device_memory_scaling=1.5,
        device_core_scaling=2.0,
        preconfigured_device_memory=122880,
    )
    await gpu_node.start()
    kubelet_plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    await gpu_node.eventually(lambda: len(gpu_node.registered()) == 3)
    a100, v100, board = gpu_node.registered()
    assert (a100.type, a100.devmem, a100.devcore, a100.count) == (
        "NVIDIA A100-SXM4-80GB",
        122880,  # 81920 MiB x 1.5
        200,
        5,
    )
    assert v100.type == "NVIDIA-Tesla V100-PCIE-32GB", "HAMi prefixes names lacking NVIDIA"
    assert v100.devmem == 49152
    # NVML cannot tell a unified-memory board's size: the configured one, scaled, is used.
    assert (board.type, board.devmem) == ("NVIDIA GB10", 184320)
    devices = await kubelet_plugin.wait_for_devices(lambda d: len(d) == 15)
    assert len({d.ID.rsplit("-", 1)[0] for d in devices}) == 3


async def test_a_board_without_memory_or_preconfigured_size_is_left_out(gpu_node: Node) -> None:
    gpu_node.nvml = FakeNVML.with_gpus(a100_80g(), gb10())
    await gpu_node.start()
    await gpu_node.eventually(lambda: len(gpu_node.registered()) == 1)
    (only,) = gpu_node.registered()
    assert only.id == gpu_node.nvml.device_uuid(0)
    # Still advertised to kubelet, as HAMi does: only the scheduler does not know of it.
    kubelet_plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    devices = await kubelet_plugin.wait_for_devices(lambda d: len(d) == 8)
    assert {d.ID.rsplit("-", 1)[0] for d in devices} == {
        gpu_node.nvml.device_uuid(i) for i in range(2)
    }


async def test_config_and_feature_flags_reach_the_allocate_answer(gpu_node: Node) -> None:
    gpu_node.config = VgpuConfig(
        device_split_count=4,
        device_memory_scaling=2.0,
        lib_cuda_log_level="4",
        disable_core_limit=True,
    )
    gpu_node.toolkit_env = ToolkitFeatures(gdrcopy=True, mofed=True, imex_channels=(0,)).env()
    await gpu_node.start()
    kubelet_plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    await kubelet_plugin.wait_for_devices(lambda d: len(d) == 8)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("tuned", [("main", [(uuid, 100000, 50)])]))
    response = await kubelet_plugin.admit_container(1)
    envs = dict(response.envs)
    envs.pop("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    assert envs == {
        "NVIDIA_VISIBLE_DEVICES": uuid,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "100000m",
        "CUDA_DEVICE_SM_LIMIT": "50",
        "CUDA_OVERSUBSCRIBE": "true",  # memory scaling > 1: more than the card holds
        "LIBCUDA_LOG_LEVEL": "4",
        "GPU_CORE_UTILIZATION_POLICY": "disable",
        "NVIDIA_IMEX_CHANNELS": "0",
        "NVIDIA_GDRCOPY": "enabled",
        "NVIDIA_MOFED": "enabled",
    }


async def test_a_stale_mig_apply_lock_is_removed_at_start(gpu_node: Node) -> None:
    lock = gpu_node.options().mig_apply_lock
    assert lock is not None
    lock.parent.mkdir(parents=True)
    lock.write_text("")  # left by an older plugin: the monitor would stay paused
    await gpu_node.start()
    await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    assert not lock.exists() and lock.parent.is_dir()
