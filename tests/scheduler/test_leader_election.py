"""Two `pyhami scheduler` processes against the API double: one leads, the other says it
does not decide; SIGKILL the leader and the other takes over within the lease time."""

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp

from pyhami.testing import FakeKubeAPIServer

from .builders import card as gpu
from .cluster import DEVICE_CONFIG, node_object, pod_object, wait_for

LEASE_S = 2.0
RETRY_S = 0.2
# Room for a cold, loaded 2-core CI machine to notice the expiry and answer /readyz.
TAKEOVER_SLACK_S = 4.0


def _distinct_free_ports(count: int) -> list[int]:
    """Ports free now and distinct from each other: every socket stays open until all are
    picked. (Picking them one at a time let the second replica's HTTP port equal the first's
    metrics port before the first had bound it; the second then failed to start and the
    test posted /filter to a metrics server.)"""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


async def _replica(
    name: str, kubeconfig: Path, config: Path, port: int, metrics_port: int
) -> tuple[asyncio.subprocess.Process, int]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "POD_NAME": name,
        "POD_NAMESPACE": "kube-system",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from pyhami.cli import main; main()",
        "scheduler",
        "--device-config-file",
        str(config),
        "--http_bind",
        f"127.0.0.1:{port}",
        "--metrics-bind-address",
        f"127.0.0.1:{metrics_port}",
        "--scheduler-name",
        "hami-scheduler",
        "--leader-elect",
        "--leader-elect-resource-name",
        "hami-scheduler",
        "--leader-elect-resource-namespace",
        "kube-system",
        "--leader-elect-campaign",
        "--leader-elect-lease-duration",
        f"{LEASE_S}s",
        "--leader-elect-renew-deadline",
        "1500ms",
        "--leader-elect-retry-period",
        f"{int(RETRY_S * 1000)}ms",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return process, port


async def _ready(session: aiohttp.ClientSession, port: int) -> bool | None:
    try:
        async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return None  # not listening yet


async def test_only_the_leader_decides_and_a_killed_leader_is_replaced_in_time(
    tmp_path: Path,
) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text(DEVICE_CONFIG)
    async with FakeKubeAPIServer() as api, aiohttp.ClientSession() as session:
        api.store.create("nodes", None, node_object("n1", [gpu("GPU-a")]))
        for name in ("a", "b"):  # the replicas' own pods, which they label with their role
            pod = pod_object(name, mem=None, cores=None, namespace="kube-system")
            api.store.create("pods", "kube-system", pod)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        ports = _distinct_free_ports(4)
        replicas = {
            "a": await _replica("a", kubeconfig, config, *ports[0:2]),
            "b": await _replica("b", kubeconfig, config, *ports[2:4]),
        }
        try:
            deadline = time.monotonic() + 60
            states: dict[str, bool | None] = {}
            while time.monotonic() < deadline:
                states = {n: await _ready(session, port) for n, (_, port) in replicas.items()}
                if sorted(states.values(), key=str) == [False, True]:
                    break
                await asyncio.sleep(0.1)
            assert sorted(states.values(), key=str) == [False, True], states
            leader = next(n for n, ready in states.items() if ready)
            follower = "b" if leader == "a" else "a"
            lease = api.store.get(
                "coordination.k8s.io/leases", "kube-system", "hami-scheduler"
            ).body
            assert lease["spec"]["holderIdentity"] == leader
            body = {"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["n1"]}
            url = f"http://127.0.0.1:{replicas[follower][1]}/filter"
            refusal = f"not the leader (leader: {leader}); followers do not decide"
            answer: dict[str, str] = {}
            for _ in range(50):  # a follower still syncing may not have read the Lease yet
                async with session.post(url, json=body) as response:
                    answer = await response.json()
                if "(leader: unknown)" not in answer["Error"]:
                    break
                await asyncio.sleep(0.1)
            assert refusal in answer["Error"]

            replicas[leader][0].send_signal(signal.SIGKILL)  # no clean hand-over
            await replicas[leader][0].wait()
            killed = time.monotonic()
            while not await _ready(session, replicas[follower][1]):
                assert time.monotonic() - killed < LEASE_S + 3 * RETRY_S + TAKEOVER_SLACK_S, (
                    "no takeover in time"
                )
                await asyncio.sleep(0.05)
            took = time.monotonic() - killed
            assert took <= LEASE_S + 3 * RETRY_S + TAKEOVER_SLACK_S
            lease = api.store.get(
                "coordination.k8s.io/leases", "kube-system", "hami-scheduler"
            ).body
            assert lease["spec"]["holderIdentity"] == follower
            assert lease["spec"]["leaseTransitions"] >= 1

            def role(name: str) -> str | None:
                labels = api.store.get("pods", "kube-system", name).meta.labels
                return labels.get("hami.io/scheduler-role")

            await wait_for(lambda: role(follower) == "leader", what="the new leader's role label")
        finally:
            for process, _ in replicas.values():
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        await asyncio.wait_for(process.wait(), 10)
                    except TimeoutError:
                        process.kill()
                        await process.wait()
