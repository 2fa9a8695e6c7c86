"""The vGPU monitor exports a DRA-prepared container as a device-plugin container: the DRA driver
names the folder `<pod uid>_<container>`, labels the pod and leaves the allocation record in
the folder, which stands in for the allocation annotation a DRA pod does not have."""

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.inventory import discover
from pyhami.dra.checkpoint import Checkpoint
from pyhami.dra.prepare import ClaimKey, Preparer
from pyhami.dra.slices import read_facts
from pyhami.kube import KubeClient
from pyhami.kube.clock import SystemClock
from pyhami.model import ContainerDevice
from pyhami.monitor.pods import InformerPodSource
from pyhami.monitor.service import MonitorService
from pyhami.monitor.settings import MonitorSettings
from pyhami.protocol import RECORD_FILE_NAME, encode_pod_single_device
from pyhami.testing import FakeKubeAPIServer, FakeNVML
from pyhami.testing.dra_objects import allocation_result, create_claimed_pod
from pyhami.testing.fake_nvml import a100_80g

from .builders import NODE, pod_object
from .regionfile import Mem, Proc, RegionSpec, write_region

MIB = 1 << 20
Sample = tuple[str, str, str, str, float]  # name, container, vdevice_index, device_uuid, value


@dataclass
class Node:
    """One node: the DRA driver's preparer and the monitor, on one fake API server."""

    api: FakeKubeAPIServer
    nvml: FakeNVML
    vgpu: Path
    preparer: Preparer
    service: MonitorService
    pods: InformerPodSource

    async def prepared(self, name: str, memory: str, cores: str) -> tuple[ClaimKey, Path]:
        """A pod using a claim for `memory` and `cores` of the node's second GPU, prepared;
        returns the claim and the container's folder."""
        results = [allocation_result("gpu-1", pool=NODE, memory=memory, cores=cores)]
        made = create_claimed_pod(self.api.store, name, name, results, node=NODE)
        key = ClaimKey("default", name, made.claim_uid)
        await self.preparer.prepare(key)
        return key, self.vgpu / "containers" / f"{made.pod_uid}_main"

    async def scrape(self, pod: str) -> dict[Sample, None]:
        """The pod's container samples after one tick (as a set that keeps the order)."""
        await self.pods.informer.wait_synced(5)
        self.service.tick()
        return {
            (
                s.name,
                s.labels["container"],
                s.labels["vdevice_index"],
                s.labels["device_uuid"],
                s.value,
            ): None
            for family in text_string_to_metric_families(self.exposition())
            for s in family.samples
            if s.labels.get("pod") == pod
        }

    def exposition(self) -> str:
        return generate_latest(self.service.registry).decode()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g())
    facts = read_facts(nvml, discover(nvml, DeviceFilter()))
    vgpu = tmp_path / "hook" / "vgpu"
    (vgpu / "containers").mkdir(parents=True)
    async with FakeKubeAPIServer() as api, KubeClient(api.configuration()) as kube:
        preparer = Preparer(
            kube,
            NODE,
            facts,
            AllocationSettings(hook_path=PurePosixPath(vgpu.parent)),
            Checkpoint(tmp_path / "checkpoint.json"),
            cdi_dir=tmp_path / "cdi",
        )
        pods = InformerPodSource(kube, NODE, resync_period_s=600)
        service = MonitorService(
            MonitorSettings(hook_path=vgpu, node_name=NODE),
            pods,
            None,
            SystemClock(),
            mig_apply_lock=tmp_path / "no-lock",
        )
        pods.informer.start()
        try:
            yield Node(api, nvml, vgpu, preparer, service, pods)
        finally:
            service.close()
            await pods.informer.stop()


async def test_the_monitor_exports_a_dra_claims_usage(node: Node) -> None:
    key, folder = await node.prepared("infer", "6Gi", "25")
    # What libvgpu writes into the claim's region once a process in the container runs.
    uuid = node.nvml.device_uuid(1)
    write_region(
        folder / f"{key.uid}.cache",
        RegionSpec(
            uuids=(uuid,),
            limits=(6144 * MIB,),
            sm_limits=(25,),
            procs=(Proc(pid=7, hostpid=4242, used={0: Mem(total=1500 * MIB)}),),
        ),
    )
    samples = await node.scrape("infer")
    assert ("hami_vgpu_memory_used_bytes", "main", "0", uuid, 1500 * MIB) in samples
    assert ("hami_vgpu_memory_limit_bytes", "main", "0", uuid, 6144 * MIB) in samples
    assert [p.name for p in node.pods.pods()] == ["infer"], "labelled by the driver"


async def test_before_its_first_cuda_call_a_dra_container_looks_like_a_device_plugin_one(
    node: Node,
) -> None:
    await node.prepared("infer", "6Gi", "25")
    uuid = node.nvml.device_uuid(1)
    # The same allocation given by the device plugin: the scheduler's annotation, no record.
    allocated = encode_pod_single_device([[], [ContainerDevice(uuid, "NVIDIA", 6144, 25)]])
    node.api.store.create(
        "pods",
        "default",
        pod_object("plugin", "uid-plugin", ("sidecar", "main"), allocated=allocated),
    )
    async with asyncio.timeout(5):
        while len(node.pods.pods()) < 2:  # until the informer's watch delivers the second pod
            await asyncio.sleep(0.01)
    dra, plugin = await node.scrape("infer"), await node.scrape("plugin")
    assert ("hami_vgpu_memory_limit_bytes", "main", "0", uuid, 6144 * MIB) in dra
    assert ("hami_vgpu_memory_used_bytes", "main", "0", uuid, 0) in dra
    assert list(dra) == list(plugin)


REFUSED = 'pyhami_monitor_regions_refused{zone="vGPU"} 1.0'


async def test_a_bad_record_is_refused_with_its_reason_and_the_monitor_keeps_serving(
    node: Node,
) -> None:
    _, folder = await node.prepared("infer", "6Gi", "25")
    record = folder / RECORD_FILE_NAME
    record.write_text('{"version":1,"devices":[{"uuid":"GPU-1","memoryMiB":-1,"cores":25}]}')
    with capture_logs() as logs:
        assert await node.scrape("infer") == {}
    assert REFUSED in node.exposition()
    [refusal] = [log for log in logs if log["event"] == "allocation record refused"]
    assert "memoryMiB is -1" in refusal["reason"]
    record.unlink()
    os.symlink(folder.parent / "elsewhere.json", record)  # a link is never followed
    with capture_logs() as logs:
        assert await node.scrape("infer") == {}
    assert REFUSED in node.exposition()
    [refusal] = [log for log in logs if log["event"] == "allocation record refused"]
    assert "a symbolic link" in refusal["reason"]


async def test_unprepare_removes_the_record_with_the_folder(node: Node) -> None:
    key, folder = await node.prepared("infer", "6Gi", "25")
    assert (folder / RECORD_FILE_NAME).is_file()
    await node.preparer.unprepare(key.uid)
    assert not folder.exists()
    assert await node.scrape("infer") == {}
