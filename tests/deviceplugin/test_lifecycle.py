"""Start, restart and configuration reload of the plugin process."""

import asyncio

import pytest

from pyhami.deviceplugin.config import ConfigError, DeviceFilter, VgpuConfig
from pyhami.deviceplugin.service import DevicePlugin

from .conftest import RESOURCE, Node

REGISTER = "hami.io/node-nvidia-register"


async def test_restart_rereads_the_config_and_a_broken_one_keeps_the_last(gpu_node: Node) -> None:
    await gpu_node.start()
    plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 8)
    gpu_node.config = VgpuConfig(device_split_count=2)
    await gpu_node.kubelet.restart()
    again = await gpu_node.kubelet.wait_for_plugin(RESOURCE, registrations=2)
    await again.wait_for_devices(lambda d: len(d) == 4)

    gpu_node.config_error = ConfigError("config.json: not valid JSON")  # breaks while running
    assert gpu_node.plugin is not None
    gpu_node.plugin.request_restart()  # as SIGHUP does
    third = await gpu_node.kubelet.wait_for_plugin(RESOURCE, registrations=3)
    await third.wait_for_devices(lambda d: len(d) == 4)


async def test_a_plugin_started_before_kubelet_registers_once_it_appears(gpu_node: Node) -> None:
    await gpu_node.kubelet.stop()  # kubelet is not up yet
    gpu_node.restart_delay = 600.0  # registers when the socket appears, not after the delay
    await gpu_node.start()
    await asyncio.sleep(0.3)
    assert gpu_node.plugin is not None and gpu_node.plugin.starts == 0
    await gpu_node.kubelet.start()
    plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 8)


async def test_our_socket_removed_means_register_again(gpu_node: Node) -> None:
    await gpu_node.start()
    await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    (gpu_node.kubelet.directory / "nvidia-gpu.sock").unlink()
    again = await gpu_node.kubelet.wait_for_plugin(RESOURCE, registrations=2)
    await again.wait_for_devices(lambda d: len(d) == 8)


async def test_no_gpus_means_no_socket_no_registration_no_annotation(gpu_node: Node) -> None:
    gpu_node.config = VgpuConfig(device_filter=DeviceFilter(indices=frozenset({0, 1})))
    await gpu_node.start()
    await asyncio.sleep(0.3)
    assert gpu_node.kubelet.registrations == []
    assert not (gpu_node.kubelet.directory / "nvidia-gpu.sock").exists()
    assert REGISTER not in gpu_node.node_annotations()


async def test_a_bad_first_config_stops_the_plugin_with_the_reason(gpu_node: Node) -> None:
    gpu_node.config = VgpuConfig(device_split_count=0)
    plugin = DevicePlugin(gpu_node.kube, gpu_node.nvml, gpu_node.options(), gpu_node.load_config)
    with pytest.raises(ConfigError, match=r"deviceSplitCount must be 1\.\.512"):
        await plugin.run(asyncio.Event())


async def test_following_kubelets_choice_rewrites_the_devices(gpu_node: Node) -> None:
    gpu_node.config = VgpuConfig(device_split_count=4, enable_preferred_allocation=True)
    await gpu_node.start()
    plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 8)
    assert plugin.request.options.get_preferred_allocation_available
    a, b = (gpu_node.nvml.device_uuid(i) for i in range(2))
    gpu_node.bind(gpu_node.scheduled_pod("moved", [("main", [(a, 700, 7)])]))
    response = await plugin.allocate([[f"{b}-3"]])  # kubelet picked a replica of the other GPU
    envs = dict(response.container_responses[0].envs)
    assert envs["NVIDIA_VISIBLE_DEVICES"] == b
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "700m"


async def test_nvml_failing_at_start_is_retried(gpu_node: Node) -> None:
    gpu_node.nvml.fail("device_count", times=2)
    await gpu_node.start()
    plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 8)
