"""The service against the fake API server over real HTTP: informer, scan, /metrics, /healthz."""

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from pyhami.kube import KubeClient
from pyhami.kube.views import read_pod
from pyhami.monitor.pods import InformerPodSource, MonitoredPod, pod_view
from pyhami.monitor.service import MonitorService
from pyhami.monitor.settings import MonitorSettings
from pyhami.serving import ConnectionLimits
from pyhami.testing import FakeKubeAPIServer, FakeNVML
from pyhami.testing.fake_nvml import t4

from .builders import NODE, NOW, pod_object
from .regionfile import SPEC_V1, Mem, Proc, RegionSpec, read_i32, uuid_of, write_region

MIB = 1 << 20
UID_A = "aaaaaaaa-0000-0000-0000-00000000000a"
GRACE = 600.0


class FakeClock:
    """Wall time fixed at NOW; `sleep` advances time instead of waiting."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = NOW
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.mono

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.wall, UTC)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.mono += seconds
        self.wall += seconds
        await asyncio.sleep(0)


class StoppingClock(FakeClock):
    """A FakeClock that sets `stop` once it has slept `after_sleeps` times."""

    def __init__(self, stop: asyncio.Event, after_sleeps: int) -> None:
        super().__init__()
        self.stop = stop
        self.after_sleeps = after_sleeps

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds)
        if len(self.sleeps) >= self.after_sleeps:
            self.stop.set()


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    async with (
        FakeKubeAPIServer(pod_grace_cap_s=0.01, bookmark_interval_s=0.1) as server,
        KubeClient(server.configuration()) as client,
    ):
        yield client


async def _eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.02)


def _age(path: Path, seconds: float) -> None:
    for item in [path, *path.iterdir()]:
        os.utime(item, (NOW - seconds, NOW - seconds))


async def test_end_to_end_over_http(tmp_path: Path, kube: KubeClient) -> None:
    allocated = f"{uuid_of(0)},NVIDIA,2000,20:;{uuid_of(0)},NVIDIA,1000,10:;"
    created = await kube.create_pod(
        "default", pod_object("pod-a", UID_A, ("main", "side"), allocated=allocated)
    )
    uid = created["metadata"]["uid"]  # the API server assigns the uid
    other = pod_object("pod-b", "bbbb", ("main",), node="other-node")
    await kube.create_pod("default", other)
    containers = tmp_path / "containers"
    write_region(
        containers / f"{uid}_main" / "r.cache",
        RegionSpec(
            uuids=(uuid_of(0),),
            limits=(2000 * MIB,),
            procs=(Proc(pid=5, hostpid=77, used={0: Mem(total=300 * MIB)}),),
        ),
    )
    _age(containers / f"{uid}_main", 1)
    orphan = containers / "cccc-gone_main"
    write_region(orphan / "r.cache", RegionSpec())
    _age(orphan, GRACE + 5)
    settings = MonitorSettings(
        hook_path=tmp_path, node_name=NODE, host="127.0.0.1", port=0, resync_interval_s=GRACE
    )
    pods = InformerPodSource(kube, NODE, resync_period_s=GRACE)
    pods.informer.start()
    clock = FakeClock()
    service = MonitorService(
        settings,
        pods,
        FakeNVML.with_gpus(t4(uuid=uuid_of(0))).open,
        clock,
        mig_apply_lock=tmp_path / "no-lock",
    )
    try:
        await pods.informer.wait_synced(5)
        assert [p.name for p in pods.pods()] == ["pod-a"], "label selector: this node only"
        service.tick()
        assert not orphan.exists(), "an orphan past its grace is deleted"
        port = await service.start_http()
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            async with http.get("/metrics", headers={"Accept-Encoding": "gzip"}) as response:
                assert response.status == 200
                assert response.headers["Content-Encoding"] == "gzip"
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = await response.text()
            used = {
                line.split("{", 1)[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("hami_vgpu_memory_used_bytes{")
            }
            assert sorted(used.values()) == [0.0, 300 * MIB], "main from its region, side zero"
            assert all('pod="pod-a"' in labels for labels in used)
            assert 'node="gpu-node-1"' in text and "hami_build_info{" in text
            async with http.get("/healthz") as response:
                assert response.status == 200
            async with http.get("/other") as response:
                assert response.status == 404

            await kube.delete_pod("default", "pod-a")
            await _eventually(lambda: not pods.pods())
            service.tick()
            async with http.get("/metrics") as response:
                assert "hami_vgpu_memory_used_bytes{" not in await response.text()
            assert (containers / f"{uid}_main").exists(), "within grace after the pod left"
            clock.wall += GRACE + 1
            service.tick()
            assert not (containers / f"{uid}_main").exists()

            clock.mono += 100  # no tick for 20 periods
            async with http.get("/healthz") as response:
                assert response.status == 503
                assert "no successful scan" in await response.text()
    finally:
        await service.stop_http()
        service.close()
        await pods.informer.stop()


class _Pods:
    def __init__(self, *views: MonitoredPod) -> None:
        self.views = list(views)

    def pods(self) -> list[MonitoredPod]:
        return self.views


async def test_loop_ticks_every_five_seconds_until_stopped(tmp_path: Path) -> None:
    """Each tick decrements recentKernel once (the census), 5 s apart on the fake clock."""
    path = write_region(
        tmp_path / "containers" / f"{UID_A}_main" / "r.cache",
        RegionSpec(uuids=(uuid_of(0),), recent_kernel=100),
    )
    settings = MonitorSettings(hook_path=tmp_path, node_name=NODE)
    stop = asyncio.Event()
    # The clock itself stops the loop after four sleeps: a poll from the test could come late on a
    # loaded machine, after the fake sleeps had run the census past zero.
    clock = StoppingClock(stop, after_sleeps=4)
    pods = _Pods(pod_view(read_pod(pod_object("pod-a", UID_A))))
    service = MonitorService(settings, pods, None, clock, mig_apply_lock=tmp_path / "x")
    await asyncio.wait_for(service.run(stop), 5)
    assert clock.sleeps == [5.0] * 4
    assert read_i32(path, SPEC_V1["recent_kernel"]) == 100 - 4
    service.close()


async def test_a_missing_root_is_logged_and_unhealthy_but_the_loop_goes_on(tmp_path: Path) -> None:
    settings = MonitorSettings(hook_path=tmp_path / "absent", node_name=NODE)
    clock = FakeClock()
    service = MonitorService(settings, _Pods(), None, clock, mig_apply_lock=tmp_path / "x")
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    await _eventually(lambda: len(clock.sleeps) >= 2)
    problem = service.health_problem()
    assert problem is not None and "cannot list" in problem
    (tmp_path / "absent" / "containers").mkdir(parents=True)
    await _eventually(lambda: service.health_problem() is None)
    stop.set()
    await task
    service.close()


def test_feedback_pauses_while_the_mig_apply_lock_exists(tmp_path: Path) -> None:
    lock = tmp_path / "hami-mig-apply.lock"
    containers = tmp_path / "containers"
    write_region(containers / f"{UID_A}_main" / "r.cache", RegionSpec(uuids=(uuid_of(0),)))

    settings = MonitorSettings(hook_path=tmp_path, node_name=NODE)
    service = MonitorService(
        settings,
        _Pods(pod_view(read_pod(pod_object("pod-a", UID_A)))),
        None,
        FakeClock(),
        mig_apply_lock=lock,
    )
    lock.touch()
    result = service.tick()
    assert result.feedback_paused and result.verdicts == ()
    lock.unlink()
    result = service.tick()
    assert not result.feedback_paused and len(result.verdicts) == 1
    service.close()


async def test_metrics_port_closes_silent_clients_and_caps_connections(tmp_path: Path) -> None:
    """The metrics port is reachable from every pod on the node: a client that connects and
    says nothing is cut off after the head timeout, and past the cap a connection is closed at
    once, so scrapes still get through afterwards."""
    (tmp_path / "containers").mkdir()
    limits = ConnectionLimits(header_timeout_s=0.3, max_connections=2)
    settings = MonitorSettings(
        hook_path=tmp_path, node_name=NODE, host="127.0.0.1", port=0, connection_limits=limits
    )
    service = MonitorService(settings, _Pods(), None, FakeClock(), mig_apply_lock=tmp_path / "x")
    port = await service.start_http()
    try:
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b"", "the third is closed at once"
        writer.close()
        for silent_reader, silent_writer in silent:
            assert await asyncio.wait_for(silent_reader.read(), 5) == b"", "cut off when late"
            silent_writer.close()
        async with (
            aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http,
            http.get("/metrics") as response,
        ):
            assert response.status == 200
    finally:
        await service.stop_http()
        service.close()
