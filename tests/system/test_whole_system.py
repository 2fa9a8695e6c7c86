"""The whole system, on the demo's stack: a pod goes webhook → kube-scheduler → our extender
(filter, bind) → kubelet → device plugin Allocate → a real process under the real libvgpu.so
(stub driver) with the env and mounts from Allocate; its device memory is capped at the pod's
limit and shows in the monitor's /metrics; deleting the pod stops it and brings the scheduler's
ledger and both services' metrics back to zero."""

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path, PurePosixPath

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pyhami.kube import RESOURCE_QUOTAS
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.settings import DemoSettings
from pyhami.testing import FakeGpu
from pyhami.testing.namespace_runtime import NamespaceRuntime
from pyhami.testing.scheduler_harness import Result

from .conftest import ROOT, Native
from .promql import evaluate, legend_labels, series_from

MiB = 1 << 20
# The stub driver's card 0 (stub_uuid(): byte i is 0x10 * i): the node's only card has the same
# UUID, so the scheduler's choice, the region libvgpu writes and the metrics all name one card.
STUB_UUID = "GPU-00102030-4050-6070-8090-a0b0c0d0e0f0"
CARD_MIB = 81920
LIMIT_MIB = 3000
Metrics = dict[str, list[tuple[dict[str, str], float]]]


def trainer(drive: Path, release: Path) -> dict[str, object]:
    """A pod whose container allocates up to its limit, one MiB past it, then stays up."""
    steps = ["ctx", "0", "alloc", "2000m", "alloc", "1000m", "alloc", "1m", "meminfo"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "command": [str(drive), *steps, "waitfile", str(release)],
                    "env": [{"name": "TRAINER_EPOCHS", "value": "3"}],
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": str(LIMIT_MIB),
                            "nvidia.com/gpucores": "30",
                        }
                    },
                }
            ]
        },
    }


async def scrape(http: aiohttp.ClientSession, url: str) -> Metrics:
    async with http.get(url) as response:
        assert response.status == 200, await response.text()
        text = await response.text()
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def pod_samples(metrics: Metrics, name: str, pod: str) -> list[float]:
    return [value for labels, value in metrics.get(name, []) if labels.get("pod") == pod]


def total(metrics: Metrics, name: str) -> float:
    return sum(value for _, value in metrics.get(name, []))


@pytest.fixture
async def cluster(
    native: Native, tmp_path: Path
) -> AsyncIterator[tuple[DemoCluster, NamespaceRuntime]]:
    if (why := NamespaceRuntime.available()) is not None:
        pytest.skip(why)
    runtime = NamespaceRuntime(
        {
            "LD_LIBRARY_PATH": str(native.stub_dir),
            "STUB_DEVICE_COUNT": "1",
            "STUB_DEVICE_MEM": str(CARD_MIB * MiB),
        },
        tmp_path / "staging",
    )
    settings = DemoSettings(
        cards=[[FakeGpu("NVIDIA A100-SXM4-80GB", CARD_MIB, uuid=STUB_UUID)]],
        libvgpu=native.library,
        monitor_tick_s=0.2,
        harness_backoff_s=(0.1, 1.0),
    )
    try:
        async with DemoCluster(settings, runtime=runtime) as running:
            yield running, runtime
    finally:
        await runtime.kill_all()  # a process left waiting would outlive the test run


async def eventually_scraped(
    http: aiohttp.ClientSession, url: str, check: Callable[[Metrics], bool], timeout_s: float = 10
) -> Metrics:
    async with asyncio.timeout(timeout_s):
        while True:
            metrics = await scrape(http, url)
            if check(metrics):
                return metrics
            await asyncio.sleep(0.1)


async def test_pod_runs_capped_under_libvgpu_is_measured_and_returns_to_zero(
    cluster: tuple[DemoCluster, NamespaceRuntime], native: Native, tmp_path: Path
) -> None:
    demo, runtime = cluster
    node = demo.nodes[0]
    created = await demo.client.create_pod("default", trainer(native.drive, tmp_path / "release"))
    assert created["spec"]["schedulerName"] == "hami-scheduler", "the webhook took the pod"

    started = await node.agent.wait_started("default", "trainer", timeout_s=20)
    main = started.container("main")
    pod = await demo.client.get_pod("default", "trainer")
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == node.name
    assert pod["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    assert main.envs["NVIDIA_VISIBLE_DEVICES"] == STUB_UUID
    assert main.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{LIMIT_MIB}m"
    assert main.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    uid = pod["metadata"]["uid"]
    cache_dir = node.hook / "vgpu" / "containers" / f"{uid}_main"
    region = PurePosixPath(main.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"]).name
    # libvgpu's folder (limits.env) read-only; the library and the region file inside it.
    assert [(m.container_path, m.host_path, m.read_only) for m in main.mounts][:3] == [
        (str(node.hook / "vgpu"), str(cache_dir), True),
        (str(node.hook / "vgpu" / "libvgpu.so"), str(node.hook / "vgpu" / "libvgpu.so"), True),
        (str(node.hook / "vgpu" / region), str(cache_dir / region), False),
    ]
    assert f"CUDA_DEVICE_MEMORY_LIMIT_0={LIMIT_MIB}m\n" in (cache_dir / "limits.env").read_text()

    lines = await runtime.wait_output("trainer", "main", "meminfo", timeout_s=20)
    process = runtime.processes[("trainer", "main")]
    device_env = {k: v for k, v in process.env.items() if k.startswith(("CUDA_", "NVIDIA_"))}
    assert device_env == dict(main.envs), "the process sees exactly Allocate's device env"
    assert process.env["TRAINER_EPOCHS"] == "3"
    allocs = [line for line in lines if line.startswith("alloc ")]
    assert [a.split()[1] for a in allocs] == ["rc=0", "rc=0", "rc=2"], (
        f"2000 + 1000 MiB fit the {LIMIT_MIB} MiB limit, one more MiB is OOM (2): {lines}"
    )
    regions = [p for p in cache_dir.iterdir() if p.suffix == ".cache"]
    assert len(regions) == 1, "libvgpu wrote its region through the cache-dir mount"

    # A second process of the container that lost its limits from the env (a login shell, say)
    # gets them from limits.env in the mounted cache dir and shares the container's region: the
    # first process holds the whole limit, so even one MiB is refused.
    exec_lines = await runtime.exec(
        "trainer",
        "main",
        [str(native.drive), "ctx", "0", "meminfo", "alloc", "1m"],
        unset=("CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT"),
    )
    said = {line.split()[0]: line for line in exec_lines if not line.startswith("[libvgpu")}
    assert said["meminfo"] == f"meminfo rc=0 free=0 total={LIMIT_MIB * MiB}", exec_lines
    assert said["alloc"] == "alloc rc=2", exec_lines

    async with aiohttp.ClientSession() as http:
        metrics = await eventually_scraped(
            http,
            node.metrics_url,
            lambda m: pod_samples(m, "hami_vgpu_memory_used_bytes", "trainer") == [LIMIT_MIB * MiB],
        )
        assert pod_samples(metrics, "hami_vgpu_memory_limit_bytes", "trainer") == [LIMIT_MIB * MiB]
        scheduler = await scrape(http, demo.scheduler_metrics_url)
        assert total(scheduler, "hami_vgpu_memory_allocated_bytes") == LIMIT_MIB * MiB
        assert total(scheduler, "hami_gpu_memory_allocated_bytes") == LIMIT_MIB * MiB
        assert demo.scheduler.state.ledger.pod_keys() != []

        await demo.client.delete_pod("default", "trainer")
        await eventually_scraped(
            http,
            demo.scheduler_metrics_url,
            lambda m: (
                total(m, "hami_vgpu_memory_allocated_bytes") == 0
                and total(m, "hami_gpu_memory_allocated_bytes") == 0
            ),
        )
        assert demo.scheduler.state.ledger.pod_keys() == []
        await eventually_scraped(
            http,
            node.metrics_url,
            lambda m: (
                not pod_samples(m, "hami_vgpu_memory_used_bytes", "trainer")
                and total(m, "hami_vgpu_memory_used_bytes") == 0
            ),
        )
    # The runtime records the exit code when the process's output ends, a moment after it dies.
    async with asyncio.timeout(10):
        while ("trainer", "main") not in runtime.exited or demo.api.store.matching(
            "pods", "default"
        ):
            await asyncio.sleep(0.02)
    assert runtime.exited[("trainer", "main")] == -15, "kubelet stopped it with SIGTERM"
    assert node.agent.devices_in_use() == 0


DASHBOARD = ROOT / "charts" / "pyhami" / "dashboards" / "pyhami-overview.json"
QUOTA_MIB = 10000


async def test_every_dashboard_panel_shows_live_series_with_its_legend_labels(
    cluster: tuple[DemoCluster, NamespaceRuntime], native: Native, tmp_path: Path
) -> None:
    """The chart's Grafana dashboard, evaluated on what the scheduler and the monitor export
    while a pod runs under libvgpu in a namespace with a GPU-memory quota: each panel has
    series, each legend label is on them, and no query groups or matches on a missing label."""
    demo, _ = cluster
    node = demo.nodes[0]
    quota = {"hard": {"limits.nvidia.com/gpumem": str(QUOTA_MIB)}}
    await demo.client.create(
        RESOURCE_QUOTAS, {"metadata": {"name": "gpu"}, "spec": quota}, "default"
    )
    await demo.client.create_pod("default", trainer(native.drive, tmp_path / "release"))
    await node.agent.wait_started("default", "trainer", timeout_s=20)
    async with aiohttp.ClientSession() as http:
        monitor = await eventually_scraped(
            http,
            node.metrics_url,
            lambda m: pod_samples(m, "hami_container_device_memory_bytes", "trainer") != [],
            timeout_s=20,
        )
        scheduler = await eventually_scraped(
            http, demo.scheduler_metrics_url, lambda m: "hami_resource_quota_used" in m
        )
    live = series_from(monitor) + series_from(scheduler)

    panels = json.loads(DASHBOARD.read_text())["panels"]
    for panel in panels:
        for target in panel["targets"]:
            shown = evaluate(target["expr"], live)
            assert shown, f"panel {panel['title']!r} shows nothing: {target['expr']}"
            for label in legend_labels(target.get("legendFormat", "")):
                assert all(s.get(label) for s in shown), (
                    f"panel {panel['title']!r}: legend label {label!r} is not on {shown}"
                )
    by_title = {p["title"]: p["targets"][0]["expr"] for p in panels}
    (ratio,) = evaluate(by_title["Quota used / limit"], live)
    assert ratio.value == LIMIT_MIB / QUOTA_MIB
    memory = evaluate(by_title["GPU memory allocated (bytes)"], live)
    assert [s.value for s in memory] == [LIMIT_MIB * MiB]


async def test_hami_e2e_overcommit_three_containers_at_40_percent_cores_on_one_gpu() -> None:
    """HAMi's e2e "overcommit" case: the sample pod with three identical
    containers (1 GPU, 300 MiB, 40 % cores each) on a node with one GPU gets a FilteringFailed
    event containing "no available node"; the e2e request alone runs."""

    def container(name: str) -> dict[str, object]:
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "300", "nvidia.com/gpucores": "40"}
        return {"name": name, "image": "cuda-sample", "resources": {"limits": limits}}

    def pod(name: str, containers: int) -> dict[str, object]:
        return {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [container(f"c{i}") for i in range(containers)]},
        }

    settings = DemoSettings(cards=[[FakeGpu("Tesla P4", 7680, uuid=STUB_UUID)]])
    async with DemoCluster(settings) as demo:
        await demo.client.create_pod("default", pod("sample", 1))
        await demo.nodes[0].agent.wait_started("default", "sample", timeout_s=20)
        await demo.client.create_pod("default", pod("overcommit", 3))
        await demo.harness.wait_for("default", "overcommit", result=Result.UNSCHEDULABLE)
        async with asyncio.timeout(10):
            while True:
                events = await demo.client.request("GET", "/api/v1/namespaces/default/events")
                failed = [
                    e["message"]
                    for e in events["items"]
                    if e["involvedObject"]["name"] == "overcommit"
                    and e["reason"] == "FilteringFailed"
                ]
                if any("no available node" in message for message in failed):
                    break
                await asyncio.sleep(0.05)
