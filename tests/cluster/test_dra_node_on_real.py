"""The DRA driver's node side against Kubernetes' own kube-apiserver: the ResourceSlice it
publishes validates there (consumable capacity with request policies, device taints), follows
health, and a claim allocated in the real API's format is prepared through the kubelet double."""

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import Any

from pyhami.controlplane import BuiltBinaries
from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.health import HealthSettings
from pyhami.devices.nvidia.dra_claims import UNHEALTHY_TAINT
from pyhami.devices.quantity import parse_quantity
from pyhami.dra.api import DRIVER
from pyhami.dra.service import DraDriver, DriverOptions
from pyhami.dra.slices import slice_name
from pyhami.kube import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, KubeClient
from pyhami.testing import FakeNVML
from pyhami.testing.dra_kubelet import ClaimRef, DRAKubelet
from pyhami.testing.fake_nvml import a100_80g
from pyhami.testing.real_cluster import RealControlPlane

NODE = "dra-node-1"
GIB = 1 << 30


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.1)


async def _devices(admin: KubeClient) -> dict[str, dict[str, Any]]:
    found = await admin.get(RESOURCE_SLICES, slice_name(NODE))
    return {d["name"]: d for d in found["spec"]["devices"]}


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "trainer"},
        "spec": {
            "nodeName": NODE,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "train"}],
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def _claim() -> dict[str, Any]:
    request = {
        "deviceClassName": DRIVER,
        "capacity": {"requests": {"memory": "4Gi", "cores": "30"}},
    }
    return {
        "metadata": {"name": "train"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def _allocation(pod: dict[str, Any]) -> dict[str, Any]:
    """The status kube-scheduler writes for a shared device (consumed capacity, a share id)."""
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": NODE,
        "device": "gpu-1",
        "shareID": "3f1d2c4b-5a69-4788-9abc-def012345678",
        "consumedCapacity": {"memory": "4Gi", "cores": "30"},
    }
    return {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        ],
    }


async def test_slice_validates_follows_health_and_a_real_claim_is_prepared(
    kubernetes: BuiltBinaries, tmp_path: Path
) -> None:
    state = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    hook = tmp_path / "hook"
    (hook / "vgpu").mkdir(parents=True)
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(numa=1))
    nvml.link(0, 1, nvlinks=4)
    stop = asyncio.Event()
    try:
        async with RealControlPlane(kubernetes) as plane, DRAKubelet() as kubelet:
            admin = await plane.client(plane.admin_kubeconfig)
            await admin.create(NODES, {"metadata": {"name": NODE}})
            options = DriverOptions(
                node_name=NODE,
                plugins_dir=state / "plugins",
                registry_dir=kubelet.registry_dir,
                cdi_dir=state / "cdi",
                settings=AllocationSettings(hook_path=PurePosixPath(hook)),
                health=HealthSettings(recovery_after=1.0, wait_ms=50),
                retry_interval=0.2,
            )
            driver = DraDriver(admin, nvml, options)
            task = asyncio.create_task(driver.run(stop))
            try:
                plugin = await kubelet.wait_for_plugin(DRIVER, timeout=20)

                async def published() -> bool:
                    return driver.publisher is not None and driver.publisher.published > 0

                await _until(published)

                # The slice as kube-apiserver stored it: nothing dropped by a disabled gate.
                devices = await _devices(admin)
                gpu1 = devices["gpu-1"]
                assert gpu1["allowMultipleAllocations"] is True
                memory = gpu1["capacity"]["memory"]
                assert parse_quantity(memory["value"]) == 80 * GIB
                policy = memory["requestPolicy"]
                assert parse_quantity(policy["default"]) == 80 * GIB
                assert parse_quantity(policy["validRange"]["step"]) == 1 << 20
                assert parse_quantity(gpu1["capacity"]["cores"]["value"]) == 100
                attributes = gpu1["attributes"]
                assert attributes["nvlinkDomain"] == devices["gpu-0"]["attributes"]["nvlinkDomain"]
                assert attributes["cudaVersion"] == {"version": "12.8.0"}

                # Unhealthy: tainted (kube-apiserver stamps the time); recovered: untainted.
                nvml.inject_xid(1, 79)

                async def tainted() -> bool:
                    return "taints" in (await _devices(admin))["gpu-1"]

                await _until(tainted)
                [taint] = (await _devices(admin))["gpu-1"]["taints"]
                assert taint["key"] == UNHEALTHY_TAINT and taint["effect"] == "NoSchedule"
                assert "timeAdded" in taint

                async def untainted() -> bool:
                    return not await tainted()

                await _until(untainted)

                # A claim allocated in the real API's format, prepared as kubelet would.
                pod = await admin.create(PODS, _pod(), "default")
                claim = await admin.create(RESOURCE_CLAIMS, _claim(), "default")
                claim["status"] = _allocation(pod)
                claim = await admin.replace(
                    RESOURCE_CLAIMS, "train", claim, "default", subresource="status"
                )
                ref = ClaimRef("default", "train", claim["metadata"]["uid"])
                answer = (await plugin.prepare([ref])).claims[ref.uid]
                assert answer.error == ""
                assert list(answer.devices[0].cdi_device_ids) == [f"{DRIVER}/gpu={ref.uid}"]
                spec = json.loads((state / "cdi" / f"{DRIVER}-{ref.uid}.json").read_text())
                env = spec["devices"][0]["containerEdits"]["env"]
                assert "CUDA_DEVICE_MEMORY_LIMIT_0=4096m" in env
                assert "CUDA_DEVICE_SM_LIMIT=30" in env
                labelled = await admin.get(PODS, "trainer", "default")
                assert labelled["metadata"]["labels"]["hami.io/vgpu-node"] == NODE
            finally:
                stop.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(task, 10)
    finally:
        shutil.rmtree(state, ignore_errors=True)
