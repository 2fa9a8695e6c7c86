"""The whole plugin on one simulated node: FakeNVML, FakeKubelet and the fake API server."""

import asyncio
import json
from pathlib import Path

import grpc
import grpc.aio
import pytest

from pyhami.deviceplugin.api import HEALTHY, UNHEALTHY
from pyhami.deviceplugin.config import VgpuConfig
from pyhami.protocol import decode_node_devices, decode_pair_scores

from .conftest import NODE, RESOURCE, Node

REGISTER = "hami.io/node-nvidia-register"
SCORE = "hami.io/node-nvidia-score"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
LOCK = "hami.io/mutex.lock"


async def started(node: Node, split: int = 4):
    await node.start()
    plugin = await node.kubelet.wait_for_plugin(RESOURCE)
    await plugin.wait_for_devices(lambda d: len(d) == 2 * split)
    await node.eventually(lambda: REGISTER in node.node_annotations())
    return plugin


async def test_registers_advertises_and_publishes_what_the_scheduler_decodes(
    gpu_node: Node,
) -> None:
    kubelet_plugin = await started(gpu_node)
    uuids = [gpu_node.nvml.device_uuid(i) for i in range(2)]
    assert [d.ID for d in kubelet_plugin.devices] == [f"{u}-{n}" for u in uuids for n in range(4)]
    value = gpu_node.node_annotations()[REGISTER]
    assert value == (
        f'[{{"id":"{uuids[0]}","count":4,"devmem":81920,"devcore":100,'
        f'"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core","health":true}},'
        f'{{"id":"{uuids[1]}","index":1,"count":4,"devmem":81920,"devcore":100,'
        f'"type":"NVIDIA A100-SXM4-80GB","numa":1,"mode":"hami-core","health":true}}]'
    )
    decoded = decode_node_devices(value)
    assert [(d.id, d.index, d.numa, d.health) for d in decoded] == [
        (uuids[0], 0, 0, True),
        (uuids[1], 1, 1, True),
    ]
    assert SCORE not in gpu_node.node_annotations()


async def test_patches_only_on_change_and_repairs_a_deleted_annotation(gpu_node: Node) -> None:
    await started(gpu_node)
    plugin = gpu_node.plugin
    assert plugin is not None and plugin.current is not None
    registrar = plugin.current.registrar
    await gpu_node.eventually(lambda: registrar.patches == 1)  # the first registration
    assert not await registrar.sync_once()  # nothing changed: no patch
    patches = registrar.patches
    gpu_node.api.store.patch(
        "nodes",
        None,
        NODE,
        "application/merge-patch+json",
        {"metadata": {"annotations": {REGISTER: None}}},
    )
    # The store holds the patch before the plugin reads the response, so wait on the counter.
    await gpu_node.eventually(lambda: registrar.patches > patches)
    assert registrar.patches == patches + 1
    assert REGISTER in gpu_node.node_annotations()


async def test_a_failed_patch_is_retried_with_the_new_value(gpu_node: Node) -> None:
    await started(gpu_node)
    gpu_node.api.faults.fail("patch", "nodes", status=500, times=3)
    gpu_node.nvml.fail("device_uuid", index=0)  # no recovery meanwhile
    gpu_node.nvml.inject_xid(0, 79)  # the value changes while patches fail
    await gpu_node.eventually(lambda: not gpu_node.registered()[0].health)


async def test_survives_a_kubelet_restart(gpu_node: Node) -> None:
    await started(gpu_node)
    await gpu_node.kubelet.restart()
    again = await gpu_node.kubelet.wait_for_plugin(RESOURCE, registrations=2)
    devices = await again.wait_for_devices(lambda d: len(d) == 8)
    assert {d.health for d in devices} == {HEALTHY}
    await gpu_node.eventually(lambda: gpu_node.plugin is not None and gpu_node.plugin.starts == 2)
    loops = sorted(t.get_name() for t in asyncio.all_tasks() if not t.done())
    for loop in ("node-registration", "xid-health"):
        assert loops.count(loop) == 1, f"the first instance's {loop} stops with it (HAMi leaks it)"


async def test_xid_marks_unhealthy_in_both_places_and_recovers(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    gpu_node.nvml.fail("device_uuid", index=1)  # the recovery probe fails until healed
    gpu_node.nvml.inject_xid(1, 79)
    await kubelet_plugin.wait_for_devices(lambda d: {x.health for x in d[4:]} == {UNHEALTHY})
    assert {d.health for d in kubelet_plugin.devices[:4]} == {HEALTHY}
    await gpu_node.eventually(lambda: not gpu_node.registered()[1].health)
    gpu_node.nvml.heal()
    # quiet for recovery_after (0.3 s) and NVML answers: healthy again everywhere
    await kubelet_plugin.wait_for_devices(lambda d: {x.health for x in d} == {HEALTHY})
    await gpu_node.eventually(lambda: gpu_node.registered()[1].health)


async def test_nvml_failure_on_one_card_publishes_it_unhealthy_and_keeps_serving(
    gpu_node: Node,
) -> None:
    await started(gpu_node)
    gpu_node.nvml.fail("device_memory", index=0)
    await gpu_node.eventually(lambda: not gpu_node.registered()[0].health)
    devices = gpu_node.registered()
    assert devices[0].devmem == 81920  # last known size, not 0
    assert devices[1].health


async def test_topology_scores_are_published_when_enabled(gpu_node: Node) -> None:
    gpu_node.topology_score = True
    gpu_node.nvml.link(0, 1, nvlinks=2)
    await started(gpu_node)
    await gpu_node.eventually(lambda: SCORE in gpu_node.node_annotations())
    uuids = [gpu_node.nvml.device_uuid(i) for i in range(2)]
    scores = {
        s.uuid: dict(s.scores) for s in decode_pair_scores(gpu_node.node_annotations()[SCORE])
    }
    assert scores == {uuids[0]: {uuids[1]: 210}, uuids[1]: {uuids[0]: 210}}


async def test_filtered_gpus_are_neither_advertised_nor_registered(gpu_node: Node) -> None:
    from pyhami.deviceplugin.config import DeviceFilter

    gpu_node.config = VgpuConfig(
        device_split_count=2, device_filter=DeviceFilter(indices=frozenset({0}))
    )
    await gpu_node.start()
    plugin = await gpu_node.kubelet.wait_for_plugin(RESOURCE)
    devices = await plugin.wait_for_devices(lambda d: len(d) == 2)
    assert {d.ID.rsplit("-", 1)[0] for d in devices} == {gpu_node.nvml.device_uuid(1)}
    await gpu_node.eventually(lambda: REGISTER in gpu_node.node_annotations())
    assert len(json.loads(gpu_node.node_annotations()[REGISTER])) == 1


# ----- Allocate ------------------------------------------------------------------------------


def mounts(response) -> list[tuple[str, str, bool]]:  # type: ignore[no-untyped-def]
    return [(m.container_path, m.host_path, m.read_only) for m in response.mounts]


async def test_allocate_gives_exactly_hamis_env_and_mounts(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(1)
    pod = gpu_node.bind(gpu_node.scheduled_pod("gpu-pod", [("main", [(uuid, 3000, 30)])]))
    response = await kubelet_plugin.admit_container(1)
    assert kubelet_plugin.in_use == {f"{uuid}-0"}  # preferred: a replica of the scheduled GPU
    vgpu = gpu_node.hook / "vgpu"
    envs = dict(response.envs)
    cache = envs.pop("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    assert envs == {
        "NVIDIA_VISIBLE_DEVICES": uuid,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
    }
    assert cache.startswith(f"{vgpu}/") and cache.endswith(".cache")
    cache_dir = vgpu / "containers" / f"{pod['metadata']['uid']}_main"
    region = cache.rsplit("/", 1)[1]
    assert mounts(response) == [
        (str(vgpu), str(cache_dir), True),
        (f"{vgpu}/libvgpu.so", f"{vgpu}/libvgpu.so", True),
        (cache, str(cache_dir / region), False),
        ("/tmp/vgpulock", str(gpu_node.hook / "lock"), False),
        ("/etc/ld.so.preload", f"{vgpu}/ld.so.preload", True),
    ]
    assert cache_dir.is_dir() and oct(cache_dir.stat().st_mode & 0o777) == "0o777"
    # The mount points inside the read-only folder exist before the runtime mounts there.
    assert (cache_dir / "libvgpu.so").is_file()
    assert (cache_dir / region).stat().st_size == 0
    assert oct((cache_dir / region).stat().st_mode & 0o777) == "0o666"
    assert (cache_dir / "limits.env").read_text() == (
        "# written by pyhami device-plugin\n"
        f"CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_SM_LIMIT=30\n"
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE={cache}\n"
        "CUDA_TASK_PRIORITY=1\n"
    )
    notes = gpu_node.pod_annotations("gpu-pod")
    assert notes[TO_ALLOCATE] == ";;"
    assert notes["hami.io/vgpu-devices-allocated"] == f"{uuid},NVIDIA,3000,30:;"
    assert notes["hami.io/bind-phase"] == "success"
    assert LOCK not in gpu_node.node_annotations()


async def test_init_and_multi_container_pods_map_each_container_to_its_entry(
    gpu_node: Node,
) -> None:
    kubelet_plugin = await started(gpu_node)
    a, b = (gpu_node.nvml.device_uuid(i) for i in range(2))
    gpu_node.bind(
        gpu_node.scheduled_pod(
            "multi",
            containers=[
                ("main", [(a, 1000, 10), (b, 1000, 10)]),
                ("sidecar", []),
                ("tail", [(b, 500, 5)]),
            ],
            init=[("setup", [(a, 2000, 20)]), ("no-gpu", [])],
        )
    )
    setup = await kubelet_plugin.admit_container(1)
    assert dict(setup.envs)["NVIDIA_VISIBLE_DEVICES"] == a
    assert dict(setup.envs)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert "_setup" in mounts(setup)[0][1]
    assert gpu_node.pod_annotations("multi")["hami.io/bind-phase"] == "allocating"
    assert gpu_node.node_annotations()[LOCK].endswith(",default,multi")  # more to come
    main = await kubelet_plugin.admit_container(2)
    assert dict(main.envs)["NVIDIA_VISIBLE_DEVICES"] == f"{a},{b}"
    assert [dict(main.envs)[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] for i in range(2)] == ["1000m"] * 2
    assert "_main" in mounts(main)[0][1]
    tail = await kubelet_plugin.admit_container(1)
    assert dict(tail.envs)["CUDA_DEVICE_SM_LIMIT"] == "5"
    assert "_tail" in mounts(tail)[0][1]
    assert gpu_node.pod_annotations("multi")["hami.io/bind-phase"] == "success"
    assert LOCK not in gpu_node.node_annotations()


async def test_a_native_sidecar_and_the_app_container_each_get_their_own_entry(
    gpu_node: Node,
) -> None:
    """kubelet allocates a sidecar (restartPolicy Always) where it stands among the init
    containers; it and the app container on the same card each get their own limit and region."""
    kubelet_plugin = await started(gpu_node)
    a = gpu_node.nvml.device_uuid(0)
    pod = gpu_node.scheduled_pod(
        "with-sidecar",
        containers=[("main", [(a, 3000, 30)])],
        init=[("setup", []), ("proxy", [(a, 1000, 10)])],
    )
    pod["spec"]["initContainers"][1]["restartPolicy"] = "Always"
    gpu_node.bind(pod)
    proxy = await kubelet_plugin.admit_container(1)
    assert dict(proxy.envs)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert dict(proxy.envs)["CUDA_DEVICE_SM_LIMIT"] == "10"
    assert "_proxy" in mounts(proxy)[0][1]
    assert gpu_node.pod_annotations("with-sidecar")["hami.io/bind-phase"] == "allocating"
    main = await kubelet_plugin.admit_container(1)
    assert dict(main.envs)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert "_main" in mounts(main)[0][1]
    assert gpu_node.pod_annotations("with-sidecar")["hami.io/bind-phase"] == "success"
    assert LOCK not in gpu_node.node_annotations()


async def test_a_pods_cuda_disable_control_keeps_the_preload_mount(gpu_node: Node) -> None:
    """A pod author cannot switch libvgpu off: the namespace is not allowed to."""
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(
        gpu_node.scheduled_pod(
            "raw",
            [("main", [(uuid, 100, 0)])],
            env={"main": [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]},
        )
    )
    response = await kubelet_plugin.admit_container(1)
    assert "/etc/ld.so.preload" in [m[0] for m in mounts(response)]


async def allocate_error(kubelet_plugin, ids: list[str]) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await kubelet_plugin.allocate([ids])
    return failure.value


async def test_malformed_annotation_fails_the_pod_and_the_plugin_keeps_serving(
    gpu_node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    bad = gpu_node.scheduled_pod("bad", [("main", [(uuid, 100, 0)])])
    bad["metadata"]["annotations"][TO_ALLOCATE] = f"{uuid},NVIDIA,lots,0:;"
    gpu_node.bind(bad)
    error = await allocate_error(kubelet_plugin, [f"{uuid}-0"])
    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "malformed" in (error.details() or "") and "delete the pod" in (error.details() or "")
    assert any(
        "Allocate refused" in r.getMessage() and "malformed" in r.getMessage()
        for r in caplog.records
    )
    assert gpu_node.pod_annotations("bad")["hami.io/bind-phase"] == "failed"
    assert LOCK not in gpu_node.node_annotations()
    good = gpu_node.bind(gpu_node.scheduled_pod("good", [("main", [(uuid, 100, 0)])]))
    assert good
    response = await kubelet_plugin.admit_container(1)
    assert dict(response.envs)["NVIDIA_VISIBLE_DEVICES"] == uuid


async def test_no_pod_being_bound_is_a_clear_error(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    error = await allocate_error(kubelet_plugin, [f"{gpu_node.nvml.device_uuid(0)}-0"])
    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "no binding pod found on node gpu-node-1" in (error.details() or "")
    assert "schedulerName" in (error.details() or "")


async def test_lock_naming_a_missing_pod_falls_back_to_the_scan(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("real", [("main", [(uuid, 100, 0)])]), lock=False)
    gpu_node.set_lock("2026-08-21T12:00:00Z,default,gone")
    response = await kubelet_plugin.admit_container(1)
    assert dict(response.envs)["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert gpu_node.pod_annotations("real")["hami.io/bind-phase"] == "success"
    # the lock is not this pod's: it stays (the scheduler expires it)
    assert gpu_node.node_annotations()[LOCK].endswith(",default,gone")


async def test_pod_without_our_annotation_is_refused_with_the_reason(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    foreign = gpu_node.scheduled_pod("foreign", [("main", [(uuid, 100, 0)])])
    del foreign["metadata"]["annotations"][TO_ALLOCATE]
    gpu_node.bind(foreign)
    error = await allocate_error(kubelet_plugin, [f"{uuid}-0"])
    assert "not scheduled by pyhami" in (error.details() or "")
    assert gpu_node.pod_annotations("foreign")["hami.io/bind-phase"] == "failed"


async def test_device_count_mismatch_names_both_counts(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("two", [("main", [(uuid, 100, 0)])]))
    error = await allocate_error(kubelet_plugin, [f"{uuid}-0", f"{uuid}-1"])
    assert "device number not matched" in (error.details() or "")
    assert "kubelet allocates 2" in (error.details() or "")


async def test_api_errors_during_allocate_fail_cleanly(gpu_node: Node, tmp_path: Path) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("flaky", [("main", [(uuid, 100, 0)])]))
    gpu_node.api.faults.fail("patch", "pods", status=500, times=1)
    error = await allocate_error(kubelet_plugin, [f"{uuid}-0"])
    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "allocation failed" in (error.details() or "")
    assert gpu_node.pod_annotations("flaky")["hami.io/bind-phase"] == "failed"


async def test_lock_release_retries_a_conflict(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("racy", [("main", [(uuid, 100, 0)])]))
    gpu_node.api.faults.fail("patch", "nodes", status=409, times=1)
    await kubelet_plugin.admit_container(1)
    assert gpu_node.pod_annotations("racy")["hami.io/bind-phase"] == "success"
    assert LOCK not in gpu_node.node_annotations()
    assert gpu_node.api.faults.injected == 1


async def test_asymmetric_links_score_zero_and_warn_on_the_node_once(gpu_node: Node) -> None:
    gpu_node.topology_score = True
    gpu_node.nvml.link(0, 1, nvlinks=2, one_way=True)
    await started(gpu_node)
    await gpu_node.eventually(lambda: SCORE in gpu_node.node_annotations())
    scores = decode_pair_scores(gpu_node.node_annotations()[SCORE])
    assert [dict(s.scores) for s in scores] == [
        {gpu_node.nvml.device_uuid(1): 0},
        {gpu_node.nvml.device_uuid(0): 0},
    ]
    await gpu_node.eventually(lambda: bool(gpu_node.api.store.matching("events")))
    gpu_node.nvml.fail("device_uuid", index=0)  # no recovery meanwhile
    gpu_node.nvml.inject_xid(0, 79)  # another scan, within the hour: no second event
    await gpu_node.eventually(lambda: not gpu_node.registered()[0].health)
    (event,) = [e.body for e in gpu_node.api.store.matching("events")]
    assert (event["reason"], event["type"]) == ("AsymmetricGPUP2PLink", "Warning")
    assert event["involvedObject"] == {"kind": "Node", "name": NODE, "apiVersion": "v1"}
    assert event["metadata"]["namespace"] == "default"
    assert event["source"]["component"] == "hami-device-plugin"


async def test_a_served_pod_still_starting_is_not_taken_for_the_next_one(gpu_node: Node) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("first", [("main", [(uuid, 100, 1)])]), lock=False)
    await kubelet_plugin.admit_container(1)
    assert gpu_node.pod_annotations("first")["hami.io/bind-phase"] == "success"  # still Pending
    gpu_node.bind(gpu_node.scheduled_pod("second", [("main", [(uuid, 200, 2)])]), lock=False)
    response = await kubelet_plugin.admit_container(1)
    assert dict(response.envs)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "200m"
    assert gpu_node.pod_annotations("first")["hami.io/bind-phase"] == "success"
    assert gpu_node.pod_annotations("second")["hami.io/bind-phase"] == "success"
