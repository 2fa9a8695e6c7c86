"""Dynamic MIG end to end: a MIG-mode plugin on FakeNVML, its FakeKubelet and the API double."""

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from pyhami.deviceplugin.config import DeviceFilter, VgpuConfig
from pyhami.deviceplugin.inventory import discover
from pyhami.deviceplugin.mig import MigManager
from pyhami.deviceplugin.service import DevicePlugin
from pyhami.devices.config import MigAllowlistEntry
from pyhami.kube.views import read_pod
from pyhami.model import MigAllocation, MigPlacement
from pyhami.protocol import decode_mig_allocations, decode_node_devices, encode_mig_allocations
from pyhami.testing import FakeNVML
from pyhami.testing.fake_nvml import a100_80g, h100_80g

from .conftest import NODE, RESOURCE, Node, our_scheduler

ALLOWLIST = (
    MigAllowlistEntry(models=("A100",), profiles=("1g.10gb", "1g.20gb", "2g.20gb", "7g.80gb")),
    MigAllowlistEntry(models=("H100",), profiles=("1g.10gb", "1g.10gb+me", "1g.20gb")),
)
MIG_CONFIG = VgpuConfig(operating_mode="mig", mig_profile_allowlist=ALLOWLIST)
KEY = "hami.io/vgpu-mig-allocations"


def mig_node(node: Node, nvml: FakeNVML) -> Node:
    node.nvml = nvml
    node.config = MIG_CONFIG
    return node


async def start(node: Node) -> DevicePlugin:
    """Like `Node.start`, with a fast reconciler."""
    options = replace(node.options(), mig_reconcile_interval=0.05)
    node.plugin = DevicePlugin(node.kube, node.nvml, options, node.load_config)
    node._stop = asyncio.Event()
    node._task = asyncio.create_task(node.plugin.run(node._stop), name="mig-plugin")
    return node.plugin


def reserved_pod(
    name: str, gpu_uuid: str, reservations: list[tuple[int, str, int, int]]
) -> dict[str, Any]:
    """A pod as the scheduler leaves it: one container per (container, profile, start, size)."""
    containers = sorted({c for c, *_ in reservations})
    pod = Node.scheduled_pod(name, [(f"c{c}", [(gpu_uuid, 10000, 100)]) for c in containers])
    allocations = [
        MigAllocation(c, 0, gpu_uuid, profile, MigPlacement(start, size))
        for c, profile, start, size in reservations
    ]
    pod["metadata"]["annotations"][KEY] = encode_mig_allocations(allocations)
    return pod


async def serving(node: Node) -> Any:
    """Registered, published, and kubelet has its first device list (admission needs it)."""
    plugin = await node.kubelet.wait_for_plugin(RESOURCE)
    await node.eventually(lambda: "hami.io/node-nvidia-register" in node.node_annotations())
    await plugin.wait_for_devices(lambda devices: len(devices) > 0)
    return plugin


async def test_registration_publishes_distinct_profiles_and_kubelet_agrees(gpu_node: Node) -> None:
    # One card starts with MIG off: the plugin enables it at start, as the GPU is idle.
    node = mig_node(gpu_node, FakeNVML.with_gpus(h100_80g(), a100_80g(mig=True, numa=1)))
    await start(node)
    kubelet_plugin = await serving(node)
    devices = decode_node_devices(node.node_annotations()["hami.io/node-nvidia-register"])
    h100, a100 = devices
    assert node.nvml.mig_mode(0).current
    assert (h100.mode, h100.devcore, h100.count) == ("mig", 100, 7)
    profiles = {p.name: p for p in h100.mig_profiles}
    assert list(profiles) == ["1g.10gb", "1g.10gb+me", "1g.20gb"]
    assert profiles["1g.20gb"].memory_mb == 20096 > profiles["1g.10gb"].memory_mb
    assert profiles["1g.20gb"].placements == tuple(MigPlacement(s, 2) for s in (0, 2, 4, 6))
    assert profiles["1g.10gb"].core == 13  # ceil(16 SMs x 100 / 132)
    assert {p.name for p in a100.mig_profiles} == {"1g.10gb", "1g.20gb", "2g.20gb", "7g.80gb"}
    assert a100.devmem == 81920
    # ListAndWatch offers as many replicas per GPU as the annotation's count.
    await kubelet_plugin.wait_for_devices(lambda d: len(d) == h100.count + a100.count)


async def test_allocate_creates_the_reserved_instance_and_records_it(gpu_node: Node) -> None:
    node = mig_node(gpu_node, FakeNVML.with_gpus(a100_80g(mig=True)))
    await start(node)
    kubelet_plugin = await serving(node)
    gpu = node.nvml.device_uuid(0)
    node.bind(reserved_pod("two", gpu, [(0, "1g.20gb", 6, 2), (1, "2g.20gb", 0, 2)]))

    first = await kubelet_plugin.admit_container(1)
    second = await kubelet_plugin.admit_container(1)

    live = {gi.placement: gi for gi in node.nvml.gpu_instances(0)}
    assert set(live) == {MigPlacement(6, 2), MigPlacement(0, 2)}
    assert live[MigPlacement(6, 2)].profile_id == 15  # 1g.20gb, not the 1g.10gb base (19)
    recorded = decode_mig_allocations(node.pod_annotations("two")[KEY])
    by_container = {a.container_index: a for a in recorded}
    assert all(a.runtime_ready for a in recorded)  # the second container's patch did not 409
    devices = {d.uuid: d for d in node.nvml.mig_devices(0)}
    for response, container in ((first, 0), (second, 1)):
        mig_uuid = dict(response.envs)["NVIDIA_VISIBLE_DEVICES"]
        assert dict(response.envs) == {"NVIDIA_VISIBLE_DEVICES": mig_uuid}
        assert list(response.mounts) == []
        assert by_container[container].mig_uuid == mig_uuid
        assert devices[mig_uuid].gpu_instance_id == by_container[container].gpu_instance_id
    assert node.pod_annotations("two")["hami.io/bind-phase"] == "success"
    assert "hami.io/mutex.lock" not in node.node_annotations()

    # Deleting the pod makes the reconciler destroy both instances.
    node.api.store.delete("pods", "default", "two")
    await node.eventually(lambda: node.nvml.gpu_instances(0) == ())
    assert node.nvml.mig_devices(0) == ()


async def test_stale_resource_version_is_retried_not_lost(gpu_node: Node) -> None:
    node = mig_node(gpu_node, FakeNVML.with_gpus(a100_80g(mig=True)))
    plugin = await start(node)
    await serving(node)
    gpu = node.nvml.device_uuid(0)
    stale = node.bind(reserved_pod("racy", gpu, [(0, "1g.10gb", 0, 1)]), lock=False)
    assert plugin.current is not None and plugin.current.mig is not None
    pods = plugin.current.mig
    await asyncio.to_thread(
        pods.manager.realise_all, decode_mig_allocations(stale["metadata"]["annotations"][KEY])
    )
    # Someone else writes the pod after we read it: our resourceVersion is now stale.
    node.api.store.patch(
        "pods",
        "default",
        "racy",
        "application/merge-patch+json",
        {"metadata": {"labels": {"touched": "yes"}}},
    )
    await pods.record_identity(read_pod(stale))
    (recorded,) = decode_mig_allocations(node.pod_annotations("racy")[KEY])
    assert recorded.runtime_ready and node.pod("racy")["metadata"]["labels"]["touched"] == "yes"


async def test_restart_adopts_live_instances_and_cleans_idle_gpus(gpu_node: Node) -> None:
    nvml = FakeNVML.with_gpus(a100_80g(mig=True), a100_80g(mig=True, numa=1))
    node = mig_node(gpu_node, nvml)
    # A leftover instance on card 1, which no pod uses: cleaned at start.
    stray = nvml.create_gpu_instance(1, 14, MigPlacement(2, 2))  # 2g.20gb
    nvml.create_compute_instance(1, stray.id, 1)
    await start(node)
    kubelet_plugin = await serving(node)
    assert nvml.gpu_instances(1) == ()
    gpu = nvml.device_uuid(0)
    node.bind(reserved_pod("keeper", gpu, [(0, "7g.80gb", 0, 8)]))
    response = await kubelet_plugin.admit_container(1)
    mig_uuid = dict(response.envs)["NVIDIA_VISIBLE_DEVICES"]
    # A second pod whose reservation never got its identity: adoption skips it and goes on.
    half = reserved_pod("half", gpu, [(0, "1g.10gb", 3, 1)])
    node.api.store.create("pods", "default", half)

    await node.stop()
    plugin = await start(node)
    await node.eventually(lambda: plugin.current is not None)
    assert plugin.current is not None and plugin.current.mig is not None
    manager = plugin.current.mig.manager
    adopted = [manager.known(key) for key in manager.tracked]
    assert [r.mig_uuid for r in adopted if r is not None] == [mig_uuid]
    assert [d.uuid for d in nvml.mig_devices(0)] == [mig_uuid]

    node.api.store.delete("pods", "default", "keeper")
    await node.eventually(lambda: nvml.gpu_instances(0) == ())


async def test_nvml_failure_mid_create_rolls_back_and_plugin_keeps_serving(gpu_node: Node) -> None:
    node = mig_node(gpu_node, FakeNVML.with_gpus(a100_80g(mig=True)))
    await start(node)
    kubelet_plugin = await serving(node)
    gpu = node.nvml.device_uuid(0)
    node.bind(reserved_pod("unlucky", gpu, [(0, "2g.20gb", 2, 2)]))
    node.nvml.fail("create_compute_instance", index=0, times=1)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await kubelet_plugin.allocate([[kubelet_plugin.healthy_ids()[0]]])
    details = failure.value.details() or ""
    assert "compute instance for 2g.20gb at start=2 failed" in details
    assert "injected failure" in details
    assert node.nvml.gpu_instances(0) == ()  # the GI made before the failure is gone
    assert node.pod_annotations("unlucky")["hami.io/bind-phase"] == "failed"

    node.bind(reserved_pod("lucky", gpu, [(0, "2g.20gb", 2, 2)]))
    response = await kubelet_plugin.admit_container(1)
    assert dict(response.envs)["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not json", "malformed"),
        (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"","profile":"1g.10gb",'
            '"placement":{"start":0,"size":1}}]',
            "incomplete",
        ),
    ],
)
async def test_bad_reservation_value_is_a_clear_error(
    gpu_node: Node, value: str, expected: str
) -> None:
    node = mig_node(gpu_node, FakeNVML.with_gpus(a100_80g(mig=True)))
    await start(node)
    kubelet_plugin = await serving(node)
    pod = reserved_pod("broken", node.nvml.device_uuid(0), [(0, "1g.10gb", 0, 1)])
    pod["metadata"]["annotations"][KEY] = value
    node.bind(pod)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await kubelet_plugin.allocate([[kubelet_plugin.healthy_ids()[0]]])
    details = failure.value.details() or ""
    assert KEY in details and expected in details and "delete the pod" in details
    assert node.nvml.gpu_instances(0) == ()


async def test_reservation_for_a_placement_nvml_does_not_offer_is_refused(gpu_node: Node) -> None:
    node = mig_node(gpu_node, FakeNVML.with_gpus(a100_80g(mig=True)))
    await start(node)
    kubelet_plugin = await serving(node)
    node.bind(reserved_pod("odd", node.nvml.device_uuid(0), [(0, "2g.20gb", 1, 2)]))
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await kubelet_plugin.allocate([[kubelet_plugin.healthy_ids()[0]]])
    assert "placement start=1 size=2 is not one NVML offers" in (failure.value.details() or "")
    assert node.pod_annotations("odd")["hami.io/bind-phase"] == "failed"
    assert node.nvml.gpu_instances(0) == ()


SCHEDULER_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceCoreName: nvidia.com/gpucores
  migProfileAllowlist:
    - models: ["A100"]
      profiles: ["1g.10gb", "1g.20gb", "2g.20gb", "7g.80gb"]
"""


async def test_pod_scheduled_by_our_scheduler_gets_its_mig_instance(
    gpu_node: Node, tmp_path: Path
) -> None:
    node = mig_node(gpu_node, FakeNVML.with_gpus(a100_80g(mig=True)))
    await start(node)
    kubelet_plugin = await serving(node)
    limits = {RESOURCE: "1", "nvidia.com/gpumem": "15000"}
    pod = {
        "metadata": {"name": "infer", "namespace": "default"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }
    async with our_scheduler(node.kube, SCHEDULER_CONFIG, tmp_path) as harness:
        await node.kube.create_pod("default", pod)
        outcome = await harness.wait_for("default", "infer", timeout_s=20)
        assert outcome.node == NODE
        response = await kubelet_plugin.admit_container(1)

    (reservation,) = decode_mig_allocations(node.pod_annotations("infer")[KEY])
    assert reservation.profile == "1g.20gb"  # the smallest profile holding 15000 MiB
    mig_uuid = dict(response.envs)["NVIDIA_VISIBLE_DEVICES"]
    assert dict(response.envs) == {"NVIDIA_VISIBLE_DEVICES": mig_uuid}
    assert reservation.mig_uuid == mig_uuid and mig_uuid.startswith("MIG-")
    (instance,) = node.nvml.gpu_instances(0)
    assert (
        instance.placement == reservation.placement and instance.id == reservation.gpu_instance_id
    )
    (device,) = node.nvml.mig_devices(0)
    assert (device.uuid, device.compute_instance_id) == (mig_uuid, reservation.compute_instance_id)
    assert node.pod_annotations("infer")["hami.io/bind-phase"] == "success"
    assert "hami.io/mutex.lock" not in node.node_annotations()


def test_a_complete_publication_is_kept_and_a_partial_one_is_asked_again() -> None:
    """Profiles and placements are fixed while the plugin runs: once all are published, later
    scans need no NVML; a card still in non-MIG mode (nothing to list yet) is asked again."""
    nvml = FakeNVML.with_gpus(a100_80g(mig=True), h100_80g())
    a100, h100 = discover(nvml, DeviceFilter())
    manager = MigManager(nvml, (a100, h100), ALLOWLIST)
    first = manager.publish(a100)
    assert [p.name for p in first] == list(ALLOWLIST[0].profiles)
    nvml.fail("gpu_instance_placements")
    nvml.fail("gpu_instance_profile")
    assert manager.publish(a100) == first
    assert manager.publish(h100) == (), "MIG mode off: no profile to list"
    assert manager.capacities == {a100.uuid: 7, h100.uuid: 0}

    nvml.heal()
    nvml.set_mig_mode(1, True)
    assert [p.name for p in manager.publish(h100)] == list(ALLOWLIST[1].profiles)
    assert manager.capacities[h100.uuid] == 7


async def test_kubelet_hears_of_instances_published_after_start(gpu_node: Node) -> None:
    """NVML cannot list the placements at start (the card gets count 0, no device for
    kubelet); once a later scan publishes them, kubelet's list follows the annotation."""
    nvml = FakeNVML.with_gpus(a100_80g(mig=True))
    node = mig_node(gpu_node, nvml)
    nvml.fail("gpu_instance_placements")
    await start(node)
    kubelet_plugin = await node.kubelet.wait_for_plugin(RESOURCE)
    await node.eventually(lambda: kubelet_plugin.updates >= 1)
    assert kubelet_plugin.devices == (), "nothing published yet: kubelet is offered no device"
    nvml.heal()
    await node.eventually(lambda: node.registered() != [])
    (card,) = node.registered()
    assert card.count == 7
    devices = await kubelet_plugin.wait_for_devices(lambda devices: len(devices) == card.count)
    assert {device.ID.rsplit("-", 1)[0] for device in devices} == {card.id}


async def test_mig_containers_get_the_toolkit_features_too(gpu_node: Node) -> None:
    node = mig_node(gpu_node, FakeNVML.with_gpus(a100_80g(mig=True)))
    node.toolkit_env = (("NVIDIA_GDS", "enabled"),)
    await start(node)
    kubelet_plugin = await serving(node)
    node.bind(reserved_pod("gds", node.nvml.device_uuid(0), [(0, "1g.10gb", 0, 1)]))
    response = await kubelet_plugin.admit_container(1)
    (instance,) = node.nvml.mig_devices(0)
    assert dict(response.envs) == {"NVIDIA_VISIBLE_DEVICES": instance.uuid, "NVIDIA_GDS": "enabled"}
