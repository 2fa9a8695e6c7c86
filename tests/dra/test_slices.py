"""The node's ResourceSlice: what it says about each GPU, and how it follows health."""

from dataclasses import replace
from typing import Any

import pytest

from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.health import HealthSettings
from pyhami.deviceplugin.inventory import discover
from pyhami.devices.nvidia.dra_claims import UNHEALTHY_TAINT
from pyhami.dra.api import DRIVER
from pyhami.dra.slices import cuda_semver, read_facts, slice_name
from pyhami.nvml import NvmlError
from pyhami.testing import FakeNVML
from pyhami.testing.fake_nvml import a100_80g, gb10, t4

from .conftest import NODE, Node, eventually

MIB = 1 << 20


def _slice(node: Node) -> dict[str, Any]:
    return node.api.store.get("resourceslices", None, slice_name(NODE)).body


def _devices(node: Node) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in _slice(node)["spec"]["devices"]}


async def test_one_slice_with_every_gpu_shared_by_memory_and_cores(node: Node) -> None:
    await node.start()
    await eventually(
        lambda: (
            node.driver is not None
            and node.driver.publisher is not None
            and node.driver.publisher.published > 0
        )
    )
    found = _slice(node)
    spec = found["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 1}
    node_uid = node.api.store.get("nodes", None, NODE).meta.uid
    assert found["metadata"]["ownerReferences"][0]["uid"] == node_uid
    devices = _devices(node)
    assert sorted(devices) == ["gpu-0", "gpu-1", "gpu-2"]
    gpu0 = devices["gpu-0"]
    assert gpu0["allowMultipleAllocations"] is True
    memory = str(81920 * MIB)
    assert gpu0["capacity"]["memory"] == {
        "value": memory,
        "requestPolicy": {
            "default": memory,
            "validRange": {"min": str(MIB), "max": memory, "step": str(MIB)},
        },
    }
    assert gpu0["capacity"]["cores"]["value"] == "100"
    assert gpu0["capacity"]["cores"]["requestPolicy"]["validRange"] == {
        "min": "0",
        "max": "100",
        "step": "1",
    }
    attributes = gpu0["attributes"]
    assert attributes["uuid"] == {"string": node.nvml.device_uuid(0)}
    assert attributes["index"] == {"int": 0}
    assert attributes["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}
    assert attributes["numaNode"] == {"int": 0}
    assert attributes["pciBusID"] == {"string": node.nvml.device_bus_id(0)}
    assert attributes["driverVersion"] == {"string": "570.86.15"}
    assert attributes["cudaVersion"] == {"version": "12.8.0"}
    assert attributes["migCapable"] == {"bool": True}
    # GPUs 0 and 1 are NVLinked: peers of each other, one domain; GPU 2 has no NVLink.
    assert attributes["nvlinkPeers"] == {"string": node.nvml.device_uuid(1)}
    assert devices["gpu-1"]["attributes"]["nvlinkDomain"] == attributes["nvlinkDomain"]
    assert "nvlinkDomain" not in devices["gpu-2"]["attributes"]
    assert devices["gpu-2"]["attributes"]["numaNode"] == {"int": 1}
    assert "taints" not in gpu0


async def test_an_unhealthy_gpu_is_tainted_until_it_recovers(node: Node) -> None:
    await node.start(replace(node.options, health=HealthSettings(recovery_after=0.3, wait_ms=20)))
    assert node.driver is not None and node.driver.publisher is not None
    publisher = node.driver.publisher
    await eventually(lambda: publisher.published > 0)
    node.nvml.inject_xid(1, 79)
    await eventually(lambda: "taints" in _devices(node)["gpu-1"])
    assert _devices(node)["gpu-1"]["taints"] == [
        {"key": UNHEALTHY_TAINT, "value": "XID-79", "effect": "NoSchedule"}
    ]
    assert "taints" not in _devices(node)["gpu-0"]
    assert _slice(node)["spec"]["pool"]["generation"] == 1
    await eventually(lambda: "taints" not in _devices(node)["gpu-1"])
    assert _slice(node)["spec"]["pool"]["generation"] == 2


def test_a_gpu_without_memory_figures_is_refused_by_name() -> None:
    nvml = FakeNVML.with_gpus(t4(), gb10())
    gpus = discover(nvml, DeviceFilter())
    with pytest.raises(NvmlError, match=r"GPU 1 \(GPU-.*\) does not report its memory"):
        read_facts(nvml, gpus)


def test_a_one_way_nvlink_still_joins_both_gpus() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(), a100_80g())
    nvml.link(1, 2, nvlinks=2, one_way=True)
    facts = read_facts(nvml, discover(nvml, DeviceFilter()))
    assert facts[0].nvlink_domain is None and facts[0].nvlink_peers == ()
    assert facts[1].nvlink_peers == (nvml.device_uuid(2),)
    assert facts[2].nvlink_peers == (nvml.device_uuid(1),)
    assert (
        facts[1].nvlink_domain
        == facts[2].nvlink_domain
        == min(nvml.device_uuid(1), nvml.device_uuid(2))
    )


def test_cuda_version_is_a_semantic_version() -> None:
    assert cuda_semver(12080) == "12.8.0"
    assert cuda_semver(13000) == "13.0.0"
    assert cuda_semver(11040) == "11.4.0"


def test_links_to_an_nvswitch_or_a_hidden_gpu_join_nothing() -> None:
    """Only links between published GPUs make peers; NVML also reports links to NVSwitches and
    to cards the device filter hides, and those must not stop the driver from starting."""
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(), a100_80g())
    nvml.connect_switch(0, nvlinks=2)
    nvml.link(1, 2, nvlinks=2)
    facts = read_facts(nvml, discover(nvml, DeviceFilter(indices=frozenset({2}))))
    assert [(f.nvlink_peers, f.nvlink_domain) for f in facts] == [((), None), ((), None)]
