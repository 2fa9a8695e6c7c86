"""The DRA driver as kubelet sees it: registration, NodePrepareResources and
NodeUnprepareResources over real gRPC on unix sockets, against the fake API server and FakeNVML."""

import json
from pathlib import Path
from typing import Any

import pytest

from pyhami.dra.api import DRA_PLUGIN_SERVICE, DRIVER, PLUGIN_TYPE
from pyhami.dra.checkpoint import CheckpointError
from pyhami.kube import RESOURCE_CLAIMS
from pyhami.protocol import LABEL_VGPU_NODE
from pyhami.testing.dra_kubelet import CdiEdits, cdi_edits

from .conftest import GIB, NODE, Node, result

SECOND_SHARE = "7a0c5c0e-0000-4000-8000-000000000002"


def _spec(node: Node, uid: str) -> dict[str, Any]:
    path = node.state / "cdi" / f"{DRIVER}-{uid}.json"
    return dict(json.loads(path.read_text()))


def _edits(node: Node, uid: str) -> CdiEdits:
    return cdi_edits([node.state / "cdi"], f"{DRIVER}/gpu={uid}")


def _mounts(edits: CdiEdits) -> dict[str, tuple[str, list[str]]]:
    return {m.container_path: (m.host_path, list(m.options)) for m in edits.mounts}


async def test_registers_with_kubelet_as_a_dra_plugin(node: Node) -> None:
    driver = await node.start()
    plugin = await node.plugin()
    assert plugin.info.type == PLUGIN_TYPE
    assert plugin.info.name == DRIVER
    assert list(plugin.info.supported_versions) == [DRA_PLUGIN_SERVICE]
    assert plugin.endpoint == node.state / "plugins" / DRIVER / "dra.sock"
    assert driver.registration is not None and driver.registration.registered is True


async def test_prepare_gives_the_claim_libvgpu_limits_through_cdi(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    claim = node.claim("train", [result("gpu-1", memory="4Gi", cores="30")])
    response = await plugin.prepare([claim])
    answer = response.claims[claim.uid]
    assert answer.error == ""
    [device] = answer.devices
    assert device.device_name == "gpu-1" and device.pool_name == NODE
    assert list(device.request_names) == ["gpu"]
    assert list(device.cdi_device_ids) == [f"{DRIVER}/gpu={claim.uid}"]
    assert device.share_id == "7a0c5c0e-0000-4000-8000-000000000001"

    assert _spec(node, claim.uid)["kind"] == f"{DRIVER}/gpu"
    edits = _edits(node, claim.uid)
    env = edits.env
    gpu1 = node.nvml.device_uuid(1)
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpu1
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == f"{node.vgpu}/{claim.uid}.cache"
    # The monitor's naming: <pod uid>_<container using the claim>.
    pod = node.api.store.get("pods", "default", "pod-train").body
    folder = node.vgpu / "containers" / f"{pod['metadata']['uid']}_main"
    mounts = _mounts(edits)
    assert mounts[str(node.vgpu)] == (str(folder), ["ro", "nosuid", "nodev", "bind"])
    assert mounts[f"{node.vgpu}/{claim.uid}.cache"][0] == str(folder / f"{claim.uid}.cache")
    assert mounts["/etc/ld.so.preload"][0] == f"{node.vgpu}/ld.so.preload"
    assert mounts[f"{node.vgpu}/libvgpu.so"][0] == f"{node.vgpu}/libvgpu.so"
    limits = (folder / "limits.env").read_text().splitlines()
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=4096m" in limits and "CUDA_DEVICE_SM_LIMIT=30" in limits
    assert (folder / f"{claim.uid}.cache").exists()
    assert pod["metadata"]["labels"][LABEL_VGPU_NODE] == NODE


async def test_a_multi_gpu_claim_gets_one_limit_per_gpu(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    claim = node.claim(
        "pair",
        [
            result("gpu-0", memory="10Gi", cores="50", share_id=None),
            result("gpu-1", memory="20Gi", cores="50", share_id=None),
        ],
    )
    answer = (await plugin.prepare([claim])).claims[claim.uid]
    assert answer.error == ""
    assert [d.device_name for d in answer.devices] == ["gpu-0", "gpu-1"]
    assert not answer.devices[0].HasField("share_id")
    env = _edits(node, claim.uid).env
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "20480m"
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"{node.nvml.device_uuid(0)},{node.nvml.device_uuid(1)}"


async def test_prepare_is_idempotent_and_leaves_a_live_region_alone(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    claim = node.claim("again", [result()])
    first = await plugin.prepare([claim])
    pod_uid = node.api.store.get("pods", "default", "pod-again").meta.uid
    region = node.vgpu / "containers" / f"{pod_uid}_main" / f"{claim.uid}.cache"
    region.write_bytes(b"in use by a process")
    second = await plugin.prepare([claim])
    assert second == first
    assert region.read_bytes() == b"in use by a process"


async def test_a_restarted_driver_answers_from_its_checkpoint(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    claim = node.claim("kept", [result()])
    first = await plugin.prepare([claim])
    await node.stop()
    await node.kubelet.wait_for_unregistered(DRIVER)
    # The claim is gone from the API: only the checkpoint can answer now.
    node.api.store.delete(RESOURCE_CLAIMS.plural, "default", "kept")
    await node.start()
    plugin = await node.plugin(registrations=2)
    assert await plugin.prepare([claim]) == first

    await plugin.unprepare([claim])
    assert not (node.state / "cdi" / f"{DRIVER}-{claim.uid}.json").exists()
    pod_uid = node.api.store.get("pods", "default", "pod-kept").meta.uid
    assert not (node.vgpu / "containers" / f"{pod_uid}_main").exists()
    checkpoint = json.loads((node.state / "plugins" / DRIVER / "checkpoint.json").read_text())
    assert checkpoint["claims"] == {}
    again = await plugin.prepare([claim])
    assert "does not exist" in again.claims[claim.uid].error


async def test_unprepare_of_an_unknown_claim_succeeds(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    claim = node.claim("never", [result()])
    response = await plugin.unprepare([claim])
    assert response.claims[claim.uid].error == ""


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{not json", "is not JSON"),
        ('{"version": 9, "claims": {}}', "format version 9"),
        ('{"version": 1, "checksum": "00", "claims": {}}', "fails its checksum"),
    ],
)
async def test_a_bad_checkpoint_stops_the_start_with_its_reason(
    node: Node, content: str, reason: str
) -> None:
    path = node.state / "plugins" / DRIVER / "checkpoint.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(CheckpointError, match=reason) as caught:
        await node.start()
    assert str(path) in str(caught.value)


async def test_an_edited_checkpoint_fails_its_checksum(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    await plugin.prepare([node.claim("edited", [result()])])
    await node.stop()
    path = node.state / "plugins" / DRIVER / "checkpoint.json"
    data = json.loads(path.read_text())
    [entry] = data["claims"].values()
    entry["cache_dir"] = "/etc"  # unprepare would remove this folder
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="checksum"):
        await node.start()


async def test_bad_claims_get_their_own_error_and_the_good_one_is_prepared(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    good = node.claim("good", [result()])
    other = node.claim("other", [result(driver="gpu.example.com")])
    no_memory = node.claim("no-memory", [result(memory=None)])
    too_big = node.claim("too-big", [result(memory="100Gi")])
    too_many_cores = node.claim("cores", [result(cores="150")])
    unknown = node.claim("unknown", [result("gpu-9")])
    foreign = node.claim("foreign", [result(pool="other-node")])
    unallocated = node.claim("pending", [], allocated=False)
    admin = node.claim("admin", [result(admin_access=True)])
    missing = type(good)("default", "missing", "0000")
    claims = [good, other, no_memory, too_big, too_many_cores, unknown, foreign, unallocated, admin]
    response = await plugin.prepare([*claims, missing])
    errors = {c.name: response.claims[c.uid].error for c in [*claims, missing]}
    assert errors["good"] == ""
    assert "no device of driver gpu.pyhami.io" in errors["other"]
    assert "gpu.example.com" in errors["other"]
    assert "no consumedCapacity.memory" in errors["no-memory"]
    assert f"{100 * GIB} bytes" in errors["too-big"] and "85899345920" in errors["too-big"]
    assert "consumed cores 150" in errors["cores"]
    assert "'gpu-9': no such GPU" in errors["unknown"]
    assert "pool 'other-node' is not this node's" in errors["foreign"]
    assert "is not allocated" in errors["pending"]
    assert "admin access is not supported" in errors["admin"]
    assert "does not exist" in errors["missing"]
    assert list(Path(node.state / "cdi").iterdir()) == [
        node.state / "cdi" / f"{DRIVER}-{good.uid}.json"
    ]


async def test_a_claim_whose_uid_changed_is_refused(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    claim = node.claim("recreated", [result()])
    stale = type(claim)(claim.namespace, claim.name, "11111111-2222-3333-4444-555555555555")
    error = (await plugin.prepare([stale])).claims[stale.uid].error
    assert "was deleted and created again" in error


async def test_a_removed_registration_socket_is_opened_again(node: Node) -> None:
    await node.start()
    await node.plugin()
    socket = node.kubelet.registry_dir / f"{DRIVER}-reg.sock"
    socket.unlink()
    await node.kubelet.wait_for_plugin(DRIVER, registrations=2)
    assert socket.exists()


async def test_a_restarted_kubelet_registers_the_driver_again(node: Node) -> None:
    await node.start()
    await node.plugin()
    await node.kubelet.stop()
    await node.kubelet.start()
    plugin = await node.plugin(registrations=2)
    claim = node.claim("after-restart", [result()])
    assert (await plugin.prepare([claim])).claims[claim.uid].error == ""


async def test_two_requests_sharing_one_gpu_add_up_on_it(node: Node) -> None:
    await node.start()
    plugin = await node.plugin()
    claim = node.claim(
        "twice",
        [
            result("gpu-0", request="a", memory="2Gi", cores="10"),
            result("gpu-0", request="b", memory="3Gi", cores="20", share_id=SECOND_SHARE),
        ],
    )
    answer = (await plugin.prepare([claim])).claims[claim.uid]
    assert [list(d.request_names) for d in answer.devices] == [["a"], ["b"]]
    env = _edits(node, claim.uid).env
    assert env["NVIDIA_VISIBLE_DEVICES"] == node.nvml.device_uuid(0)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5120m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert "CUDA_DEVICE_MEMORY_LIMIT_1" not in env
