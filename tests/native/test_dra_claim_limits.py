"""A DRA claim's limits reach a process through the real libvgpu: the DRA driver prepares a claim
for 4 GiB and 30 % cores, and a process started with its CDI spec's env (the region file at the
host side of the spec's mount, as a container would see it) gets exactly 4 GiB."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.inventory import discover
from pyhami.dra.checkpoint import Checkpoint
from pyhami.dra.prepare import ClaimKey, Preparer
from pyhami.dra.slices import read_facts
from pyhami.kube import KubeClient
from pyhami.testing import FakeKubeAPIServer, FakeNVML
from pyhami.testing.dra_kubelet import cdi_edits
from pyhami.testing.dra_objects import allocation_result, create_claimed_pod
from pyhami.testing.fake_nvml import a100_80g

from .conftest import GiB, Harness, read_region

NODE = "gpu-node-1"


async def _prepared_container_env(tmp_path: Path) -> dict[str, str]:
    """The env a container using the claim gets, its region path mapped to the host file."""
    nvml = FakeNVML.with_gpus(a100_80g())
    facts = read_facts(nvml, discover(nvml, DeviceFilter()))
    hook = tmp_path / "hook"
    (hook / "vgpu").mkdir(parents=True)
    async with FakeKubeAPIServer() as api, KubeClient(api.configuration()) as kube:
        results = [allocation_result("gpu-0", pool=NODE, memory="4Gi", cores="30")]
        made = create_claimed_pod(api.store, "p", "c", results, node=NODE)
        preparer = Preparer(
            kube,
            NODE,
            facts,
            AllocationSettings(hook_path=PurePosixPath(hook)),
            Checkpoint(tmp_path / "checkpoint.json"),
            cdi_dir=tmp_path / "cdi",
        )
        prepared = await preparer.prepare(ClaimKey("default", "c", made.claim_uid))
    [device_id] = prepared.cdi_ids
    edits = cdi_edits([tmp_path / "cdi"], device_id)
    mounts = {m.container_path: m.host_path for m in edits.mounts}
    env = dict(edits.env)
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = mounts[env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]]
    return env


async def test_a_process_is_refused_memory_past_the_claims_4_gib(
    vgpu: Harness, tmp_path: Path
) -> None:
    env = await _prepared_container_env(tmp_path)
    run = vgpu.run("ctx", "0", "alloc", str(4 * GiB), "alloc", "1", env=env)
    first, second = run.named("alloc")
    assert first.int("rc") == 0, "the claim's 4 GiB can be allocated"
    assert second.int("rc") == 2, "one byte more is out of memory"
    region = read_region(Path(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]))
    assert region.limit[0] == 4 * GiB
    assert region.sm_limit[0] == 30
