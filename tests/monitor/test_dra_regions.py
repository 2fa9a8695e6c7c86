"""The vGPU monitor finds a DRA-prepared claim's region and exports it as a device-plugin
container's: the DRA driver names the folder `<pod uid>_<container>` and labels the pod."""

from pathlib import Path, PurePosixPath

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.inventory import discover
from pyhami.dra.checkpoint import Checkpoint
from pyhami.dra.prepare import ClaimKey, Preparer
from pyhami.dra.slices import read_facts
from pyhami.kube import KubeClient
from pyhami.kube.clock import SystemClock
from pyhami.monitor.pods import InformerPodSource
from pyhami.monitor.service import MonitorService
from pyhami.monitor.settings import MonitorSettings
from pyhami.testing import FakeKubeAPIServer, FakeNVML
from pyhami.testing.dra_objects import allocation_result, claim_object, pod_using_claim
from pyhami.testing.fake_nvml import a100_80g

from .builders import NODE
from .regionfile import Mem, Proc, RegionSpec, write_region

MIB = 1 << 20


async def test_the_monitor_exports_a_dra_claims_usage(tmp_path: Path) -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g())
    facts = read_facts(nvml, discover(nvml, DeviceFilter()))
    vgpu = tmp_path / "hook" / "vgpu"
    vgpu.mkdir(parents=True)
    async with FakeKubeAPIServer() as api, KubeClient(api.configuration()) as kube:
        pod = api.store.create("pods", "default", pod_using_claim("infer", "infer", node=NODE))
        results = [allocation_result("gpu-1", pool=NODE, memory="6Gi", cores="25")]
        claim = api.store.create(
            "resourceclaims", "default", claim_object("infer", results, reserved_for=pod)
        )
        preparer = Preparer(
            kube,
            NODE,
            facts,
            AllocationSettings(hook_path=PurePosixPath(vgpu.parent)),
            Checkpoint(tmp_path / "checkpoint.json"),
            cdi_dir=tmp_path / "cdi",
        )
        key = ClaimKey("default", "infer", claim["metadata"]["uid"])
        await preparer.prepare(key)
        # What libvgpu writes into the claim's region once a process in the container runs.
        uuid = nvml.device_uuid(1)
        write_region(
            vgpu / "containers" / f"{pod['metadata']['uid']}_main" / f"{key.uid}.cache",
            RegionSpec(
                uuids=(uuid,),
                limits=(6144 * MIB,),
                sm_limits=(25,),
                procs=(Proc(pid=7, hostpid=4242, used={0: Mem(total=1500 * MIB)}),),
            ),
        )
        settings = MonitorSettings(hook_path=vgpu, node_name=NODE)
        pods = InformerPodSource(kube, NODE, resync_period_s=600)
        pods.informer.start()
        service = MonitorService(
            settings, pods, None, SystemClock(), mig_apply_lock=tmp_path / "no-lock"
        )
        try:
            await pods.informer.wait_synced(5)
            assert [p.name for p in pods.pods()] == ["infer"], "labelled by the driver"
            service.tick()
            text = generate_latest(service.registry).decode()
        finally:
            service.close()
            await pods.informer.stop()
    samples = {
        (s.name, s.labels["container"]): s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("pod") == "infer"
    }
    used = samples[("hami_vgpu_memory_used_bytes", "main")]
    assert used.value == 1500 * MIB
    assert used.labels["device_uuid"] == uuid
    assert samples[("hami_vgpu_memory_limit_bytes", "main")].value == 6144 * MIB
