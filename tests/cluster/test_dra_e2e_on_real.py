"""A GPU share through Dynamic Resource Allocation end to end on Kubernetes' own control plane:
kube-controller-manager makes the pod's claim from its template, kube-scheduler allocates 4 GiB
and 30 % of the card's cores from the ResourceSlice pyhami's DRA driver publishes, the node
agent (kubelet's DRA part) has the driver prepare the claim, applies the CDI spec's env and
mounts, and a real process under the real libvgpu is refused past 4 GiB while the vGPU monitor
beside the driver exports its use against the 4 GiB limit. A restarted driver still knows the
claim (its checkpoint) and unprepares it when the pod goes; an unhealthy GPU is tainted and a
new claim is not allocated on it. The driver and the monitor run under the chart's RBAC for
the DRA driver, and the API server refuses none of their or the node's requests."""

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.health import HealthSettings
from pyhami.devices.nvidia.dra_claims import (
    NODE_MODE_DRA,
    NODE_MODE_LABEL,
    UNHEALTHY_TAINT,
    GpuShare,
    consumed_capacity,
)
from pyhami.dra.api import DRIVER
from pyhami.dra.service import DraDriver, DriverOptions
from pyhami.dra.slices import slice_name
from pyhami.kube import (
    DEVICE_CLASSES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    JsonObject,
    KubeClient,
    NotFound,
)
from pyhami.kube.dra_manifests import ClaimTemplate, device_class
from pyhami.kube.dra_views import read_claim
from pyhami.sim.demo.cluster import DRA_DRIVER_USER, install_libvgpu
from pyhami.sim.demo.monitors import NodeMonitor, node_monitor
from pyhami.sim.top import scrape
from pyhami.testing.dra_claims import ClaimPreparer
from pyhami.testing.dra_kubelet import DRAKubelet
from pyhami.testing.fake_kubelet import FakeKubelet
from pyhami.testing.fake_nvml import FakeGpu, FakeNVML
from pyhami.testing.namespace_runtime import NamespaceRuntime
from pyhami.testing.native_build import Native
from pyhami.testing.node_agent import NodeAgent
from pyhami.testing.real_cluster import RealControlPlane

from .conftest import chart_rbac_with

NS = "default"
NODE = "dra-node-1"
MIB = 1 << 20
CARD_MIB = 81920
# The stub driver's card 0: the node's card has the same uuid, so the visible device is it.
STUB_UUID = "GPU-00102030-4050-6070-8090-a0b0c0d0e0f0"


@dataclass
class Node:
    plane: RealControlPlane
    admin: KubeClient
    as_driver: KubeClient  # the DRA driver's ServiceAccount
    nvml: FakeNVML
    options: DriverOptions
    kubelet: DRAKubelet
    agent: NodeAgent
    runtime: NamespaceRuntime
    driver: DraDriver
    monitor: NodeMonitor
    stop: asyncio.Event
    task: "asyncio.Task[None]"

    async def restart_driver(self) -> None:
        """The driver process ends and a new one starts with the same folders."""
        self.stop.set()
        await self.task
        self.stop = asyncio.Event()
        self.driver = DraDriver(self.as_driver, self.nvml, self.options)
        self.task = asyncio.create_task(self.driver.run(self.stop))


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.1)


@pytest.fixture
async def node(kubernetes: BuiltBinaries, native: Native, tmp_path: Path) -> AsyncIterator[Node]:
    """One DRA node on the real control plane: the driver on a card the stub driver also
    shows, the DRA kubelet double, and the node agent running containers as real processes."""
    if (why := NamespaceRuntime.available()) is not None:
        pytest.fail(f"this test runs a process under libvgpu in a mount namespace: {why}")
    state = Path(tempfile.mkdtemp(prefix="dra-e2e-", dir="/tmp"))  # short unix socket paths
    hook = tmp_path / "hook"
    (hook / "vgpu" / "containers").mkdir(parents=True)
    install_libvgpu(native.library, hook / "vgpu")
    runtime = NamespaceRuntime(
        {
            "LD_LIBRARY_PATH": str(native.stub_dir),
            "STUB_DEVICE_COUNT": "1",
            "STUB_DEVICE_MEM": str(CARD_MIB * MIB),
        },
        tmp_path / "staging",
    )
    nvml = FakeNVML.with_gpus(FakeGpu("NVIDIA A100-SXM4-80GB", CARD_MIB, uuid=STUB_UUID))
    options = DriverOptions(
        node_name=NODE,
        plugins_dir=state / "plugins",
        cdi_dir=state / "cdi",
        registry_dir=state / "registry",
        settings=AllocationSettings(hook_path=PurePosixPath(hook)),
        # an unhealthy card stays so for the test
        health=HealthSettings(recovery_after=None, wait_ms=50),
        retry_interval=0.2,
    )
    try:
        async with (
            RealControlPlane(kubernetes, dra=True) as plane,
            DRAKubelet(options.registry_dir) as kubelet,
            FakeKubelet(state / "kubelet") as device_kubelet,
        ):
            admin = await plane.client(plane.admin_kubeconfig)
            await plane.apply(chart_rbac_with("dra.mode=selected"))
            as_driver = await plane.client(await plane.kubeconfig_of(DRA_DRIVER_USER))
            await plane.start_kube_scheduler()
            await admin.create(DEVICE_CLASSES, device_class())
            as_node = await plane.client(plane.node_kubeconfig(NODE))
            agent = NodeAgent(
                as_node,
                NODE,
                device_kubelet,
                runtime=runtime,
                claims=ClaimPreparer(as_node, kubelet, [options.cdi_dir]),
            )
            await agent.register_node({NODE_MODE_LABEL: NODE_MODE_DRA})
            stop = asyncio.Event()
            driver = DraDriver(as_driver, nvml, options)
            monitor = node_monitor(NODE, tmp_path, nvml, as_driver, tick_s=0.5)
            running = Node(
                plane,
                admin,
                as_driver,
                nvml,
                options,
                kubelet,
                agent,
                runtime,
                driver,
                monitor,
                stop,
                asyncio.create_task(driver.run(stop)),
            )
            monitor_stop = asyncio.Event()
            monitor_task = await monitor.start(monitor_stop, NODE)
            try:
                async with agent:
                    await kubelet.wait_for_plugin(DRIVER, timeout=30)
                    yield running
            finally:
                await runtime.kill_all()
                running.stop.set()  # the driver running now: a test may have restarted it
                await asyncio.wait_for(running.task, 20)
                monitor_stop.set()
                await monitor_task
                await monitor.stop()
            refused = plane.refused_requests({DRA_DRIVER_USER, f"system:node:{NODE}"})
            assert refused == [], "the API server refused requests:\n" + "\n".join(refused)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def drive_pod(name: str, template: str, steps: list[str]) -> JsonObject:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "command": steps,
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


async def claim_of(admin: KubeClient, pod: str) -> JsonObject:
    async with asyncio.timeout(30):
        while True:
            status = (await admin.get(PODS, pod, NS)).get("status") or {}
            for entry in status.get("resourceClaimStatuses") or ():
                with contextlib.suppress(NotFound):
                    claim = await admin.get(RESOURCE_CLAIMS, entry["resourceClaimName"], NS)
                    if (claim.get("status") or {}).get("allocation"):
                        return claim
            await asyncio.sleep(0.1)


async def memory_series(url: str, pod: str, timeout_s: float = 30) -> tuple[float, float]:
    """Used and limit bytes of the pod's main container on the card, once it shows use."""
    async with asyncio.timeout(timeout_s):
        while True:
            found = {
                name: value
                for name, labels, value in await scrape([url])
                if labels.get("pod") == pod
                and labels.get("container") == "main"
                and labels.get("device_uuid") == STUB_UUID
            }
            used = found.get("hami_vgpu_memory_used_bytes", 0)
            if used > 0:
                return used, found["hami_vgpu_memory_limit_bytes"]
            await asyncio.sleep(0.2)


async def test_a_4gib_30_percent_claim_is_allocated_prepared_and_enforced_by_libvgpu(
    node: Node, native: Native, tmp_path: Path
) -> None:
    template = ClaimTemplate(
        NS, {"gpu": GpuShare(memory_bytes=4096 * MIB, cores_percent=30)}
    ).manifest()
    await node.admin.create(RESOURCE_CLAIM_TEMPLATES, template, NS)
    release = tmp_path / "release"
    steps = [str(native.drive), "ctx", "0", "alloc", "4000m", "alloc", "96m", "alloc", "1m"]
    pod = drive_pod("trainer", template["metadata"]["name"], [*steps, "meminfo"])
    pod["spec"]["containers"][0]["command"] += ["waitfile", str(release)]
    await node.admin.create(PODS, pod, NS)

    claim = await claim_of(node.admin, "trainer")
    assert consumed_capacity(read_claim(claim)) == [{"memory": 4096 * MIB, "cores": 30}]
    started = await node.agent.wait_started(NS, "trainer", timeout_s=30)
    main = started.container("main")
    assert main.cdi_device_ids, "the driver named the claim's CDI device"
    assert main.envs["NVIDIA_VISIBLE_DEVICES"] == STUB_UUID
    assert main.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert main.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    running = await node.admin.get(PODS, "trainer", NS)
    assert running["status"]["phase"] == "Running"

    lines = await node.runtime.wait_output("trainer", "main", "meminfo", timeout_s=30)
    allocs = [line.split()[1] for line in lines if line.startswith("alloc ")]
    assert allocs == ["rc=0", "rc=0", "rc=2"], (
        f"4000 + 96 MiB fit 4 GiB, 1 MiB more is OOM: {lines}"
    )
    # the monitor beside the driver: the process's use against the claim's limit, on the card
    used, limit = await memory_series(node.monitor.metrics_url, "trainer")
    assert limit == 4096 * MIB
    assert 4096 * MIB >= used >= (4000 + 96) * MIB, f"the process holds 4096 MiB: {used}"

    # the driver restarts: it registers again and still knows the claim it prepared
    cdi_specs = sorted(node.options.cdi_dir.iterdir())
    assert cdi_specs, "prepare wrote the claim's CDI spec"
    await node.restart_driver()
    await node.kubelet.wait_for_plugin(DRIVER, timeout=30, registrations=2)
    assert sorted(node.options.cdi_dir.iterdir()) == cdi_specs
    assert node.runtime.exited.get(("trainer", "main")) is None, "the container kept running"

    # the pod goes: the new driver process unprepares the claim (its CDI spec is removed)
    release.touch()
    await node.admin.delete(PODS, "trainer", NS)

    async def unprepared() -> bool:
        return not any(node.options.cdi_dir.iterdir())

    await until(unprepared)


async def test_an_unhealthy_gpu_is_tainted_and_a_new_claim_is_not_allocated_on_it(
    node: Node,
) -> None:
    template = ClaimTemplate(NS, {"gpu": GpuShare(memory_bytes=1024 * MIB)}).manifest()
    await node.admin.create(RESOURCE_CLAIM_TEMPLATES, template, NS)
    node.nvml.inject_xid(0, 79)  # fallen off the bus

    async def tainted() -> bool:
        published = await node.admin.get(RESOURCE_SLICES, slice_name(NODE))
        [device] = published["spec"]["devices"]
        return [t["key"] for t in device.get("taints") or ()] == [UNHEALTHY_TAINT]

    await until(tainted)
    await node.admin.create(PODS, drive_pod("late", template["metadata"]["name"], ["true"]), NS)
    async with asyncio.timeout(30):
        while True:
            pod = await node.admin.get(PODS, "late", NS)
            assert not pod["spec"].get("nodeName"), "placed on a tainted GPU"
            reasons = [
                c.get("message", "")
                for c in (pod.get("status") or {}).get("conditions") or ()
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            ]
            if reasons:
                break
            await asyncio.sleep(0.2)
    assert "cannot allocate all claims" in reasons[0]
