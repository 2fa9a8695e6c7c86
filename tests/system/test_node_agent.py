"""NodeAgent plays kubelet's pod lifecycle against the real device plugin: a pod bound to the node
(as our scheduler leaves it) is admitted container by container through Allocate, reported
Running, refused as kubelet refuses it, and on deletion stopped, its devices freed, removed."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.config import VgpuConfig
from pyhami.deviceplugin.service import DevicePlugin, PluginOptions
from pyhami.kube import LEASES, JsonObject, KubeClient, NotFound, cancel_and_wait, guarded_task
from pyhami.kube.views import read_container
from pyhami.model import PodView
from pyhami.testing import FakeKubeAPIServer, FakeKubelet, FakeNVML
from pyhami.testing.fake_apiserver import StoredObject
from pyhami.testing.fake_nvml import a100_80g
from pyhami.testing.node_agent import (
    AdmissionFailedError,
    ClaimsNotPreparedError,
    ContainerEdits,
    NodeAgent,
    PodKey,
    StartedContainer,
    device_count,
)

NODE = "node-a"
UUID = "GPU-0000000a-0000-4000-8000-000000000000"


class Runtime:
    """Remembers which containers were started and stopped; refuses images named `broken`."""

    def __init__(self) -> None:
        self.running: set[tuple[str, str]] = set()
        self.stopped: list[tuple[str, str]] = []

    async def start(self, pod: PodView, container: StartedContainer) -> None:
        if container.name == "broken":
            raise OSError("exec format error")
        self.running.add((pod.name, container.name))

    async def stop(self, pod: PodView, container: StartedContainer) -> None:
        self.running.discard((pod.name, container.name))
        self.stopped.append((pod.name, container.name))


class Claims:
    """kubelet's DRA manager for pods without claims; it can be told to fail a number of times
    first, as when the Node authorizer does not yet let kubelet read a new pod's claim."""

    def __init__(self) -> None:
        self.failures = 0
        self.tries = 0

    async def prepare(self, pod: PodView) -> dict[str, ContainerEdits]:
        self.tries += 1
        if self.failures:
            self.failures -= 1
            raise ClaimsNotPreparedError("ResourceClaim default/gpu: 403 Forbidden")
        return {}

    async def release(self, pod_key: PodKey) -> list[str]:
        return []


@dataclass
class Node:
    api: FakeKubeAPIServer
    client: KubeClient
    kubelet: FakeKubelet
    agent: NodeAgent
    runtime: Runtime
    claims: Claims

    def bind(self, name: str, containers: list[tuple[str, int]], *, scheduled: bool = True) -> None:
        """A pod as our scheduler's /bind leaves it: annotations, node lock, nodeName."""
        entries = "".join(f"{UUID},NVIDIA,1000,10:;" if count else ";" for _, count in containers)
        notes = {
            "hami.io/vgpu-node": NODE,
            "hami.io/vgpu-time": "1755763200",
            "hami.io/bind-phase": "allocating",
            "hami.io/bind-time": "1755763260",
        }
        if scheduled:
            notes["hami.io/vgpu-devices-to-allocate"] = entries
            notes["hami.io/vgpu-devices-allocated"] = entries
        self.api.store.create(
            "pods",
            "default",
            {
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "labels": {"hami.io/vgpu-node": NODE},
                    "annotations": notes,
                },
                "spec": {
                    "nodeName": NODE,
                    "containers": [
                        {
                            "name": cname,
                            "image": "cuda",
                            "resources": {"limits": {"nvidia.com/gpu": str(n)} if n else {}},
                        }
                        for cname, n in containers
                    ],
                },
            },
        )
        self.api.store.patch(
            "nodes",
            None,
            NODE,
            "application/merge-patch+json",
            {
                "metadata": {
                    "annotations": {"hami.io/mutex.lock": f"2026-08-21T12:00:00Z,default,{name}"}
                }
            },
        )

    def phase(self, name: str) -> Any:
        return self.api.store.get("pods", "default", name).body["status"].get("phase")


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with FakeKubeAPIServer(pod_grace_cap_s=5.0) as api, FakeKubelet() as kubelet:
        api.store.create(
            "nodes",
            None,
            {
                "metadata": {"name": NODE},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
        )
        async with KubeClient(api.configuration()) as client:
            (tmp_path / "vgpu").mkdir()
            options = PluginOptions(
                node_name=NODE,
                plugin_dir=kubelet.directory,
                kubelet_socket=kubelet.socket,
                settings=AllocationSettings(
                    hook_path=PurePosixPath(tmp_path),
                    vgpu_lock_dir=PurePosixPath(tmp_path / "lock"),
                ),
                mig_apply_lock=tmp_path / "hami" / "hami-mig-apply.lock",
            )
            config = VgpuConfig(device_split_count=2)
            plugin = DevicePlugin(
                client, FakeNVML.with_gpus(a100_80g(uuid=UUID)), options, lambda: config
            )
            stop = asyncio.Event()
            task = guarded_task(plugin.run(stop), "test/plugin", may_finish=True)
            connection = await kubelet.wait_for_plugin("nvidia.com/gpu")
            await connection.wait_for_devices(lambda d: len(d) == 2)
            runtime, claims = Runtime(), Claims()
            async with NodeAgent(
                client, NODE, kubelet, runtime=runtime, claims=claims, prepare_retry_s=0.05
            ) as agent:
                yield Node(api, client, kubelet, agent, runtime, claims)
            stop.set()
            await asyncio.wait_for(task, 10)
            await cancel_and_wait(task)


async def test_bound_pod_is_allocated_per_gpu_container_and_runs(node: Node) -> None:
    node.bind("trainer", [("main", 1), ("sidecar", 0)])
    started = await node.agent.wait_started("default", "trainer")

    assert [c.name for c in started.containers] == ["main"], "only GPU containers get Allocate"
    main = started.container("main")
    assert [i.rsplit("-", 1)[0] for i in main.device_ids] == [UUID]
    assert main.envs["NVIDIA_VISIBLE_DEVICES"] == UUID
    assert main.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert any(m.container_path == "/etc/ld.so.preload" for m in main.mounts)
    assert node.runtime.running == {("trainer", "main")}
    assert node.phase("trainer") == "Running"
    pod = node.api.store.get("pods", "default", "trainer").body
    assert [s["name"] for s in pod["status"]["containerStatuses"]] == ["main", "sidecar"]
    assert node.agent.devices_in_use() == 1


async def test_failed_allocate_fails_the_pod_like_kubelet(node: Node) -> None:
    node.bind("stray", [("main", 1)], scheduled=False)
    with pytest.raises(AdmissionFailedError, match="device request not found"):
        await node.agent.wait_started("default", "stray")
    status = node.api.store.get("pods", "default", "stray").body["status"]
    assert status["phase"] == "Failed" and status["reason"] == "UnexpectedAdmissionError"
    assert node.agent.devices_in_use() == 0
    assert node.kubelet.plugin("nvidia.com/gpu").in_use == set()
    assert node.runtime.running == set()


async def test_claims_not_prepared_yet_keep_the_pod_pending_and_are_tried_again(
    node: Node,
) -> None:
    node.claims.failures = 2
    node.bind("trainer", [("main", 1)])
    started = await node.agent.wait_started("default", "trainer")
    assert node.claims.tries == 3
    assert node.phase("trainer") == "Running", "never Failed while the claims waited"
    assert node.agent.devices_in_use() == 1, "Allocate once, its devices kept between tries"
    assert started.container("main").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"


async def test_container_that_cannot_start_fails_the_pod_and_frees_everything(node: Node) -> None:
    node.bind("half", [("main", 1), ("broken", 1)])
    with pytest.raises(AdmissionFailedError, match="exec format error"):
        await node.agent.wait_started("default", "half")
    status = node.api.store.get("pods", "default", "half").body["status"]
    assert status["phase"] == "Failed" and status["reason"] == "StartError"
    assert node.runtime.stopped == [("half", "main")], "what did start is stopped again"
    assert node.kubelet.plugin("nvidia.com/gpu").in_use == set()


async def test_deleted_pod_is_stopped_freed_and_removed_before_its_grace_ends(node: Node) -> None:
    node.bind("trainer", [("main", 1)])
    await node.agent.wait_started("default", "trainer")

    await node.client.delete_pod("default", "trainer")  # grace 30 s; kubelet ends it sooner
    # The agent forgets the pod when its informer sees the delete, a moment after the store.
    async with asyncio.timeout(10):
        while node.api.store.matching("pods", "default") or (
            ("default", "trainer") in node.agent.started
        ):
            await asyncio.sleep(0.02)
    assert node.runtime.stopped == [("trainer", "main")]
    assert node.kubelet.plugin("nvidia.com/gpu").in_use == set()


async def test_finished_pod_succeeds_and_frees_its_devices(node: Node) -> None:
    node.bind("job", [("main", 1)])
    await node.agent.wait_started("default", "job")
    await node.agent.finish("default", "job")
    assert node.phase("job") == "Succeeded"
    assert node.runtime.stopped == [("job", "main")]
    assert node.agent.devices_in_use() == 0


async def test_node_advertises_the_plugins_devices_as_kubelet_does(node: Node) -> None:
    def advertised(obj: StoredObject) -> bool:
        status = obj.body.get("status") or {}
        return (status.get("capacity") or {}).get("nvidia.com/gpu") == "2" and (
            status.get("allocatable") or {}
        ).get("nvidia.com/gpu") == "2"

    await node.api.wait_for("nodes", None, NODE, advertised, timeout_s=5)


@pytest.mark.parametrize(
    "resources, want",
    [
        pytest.param({"limits": {"nvidia.com/gpu": "2"}}, 2, id="limit"),
        pytest.param({"requests": {"nvidia.com/gpu": "1"}}, 1, id="request-only"),
        pytest.param({}, 0, id="none"),
        # as kube-apiserver may store them: exponent forms are kept as written, 1000 is 1k
        pytest.param({"limits": {"nvidia.com/gpu": "1e1"}}, 10, id="exponent"),
        pytest.param({"limits": {"nvidia.com/gpu": "1k"}}, 1000, id="canonical"),
    ],
)
def test_device_count_reads_the_extended_resource(resources: JsonObject, want: int) -> None:
    container = read_container({"name": "c", "resources": resources}, init=False)
    assert device_count(container, "nvidia.com/gpu") == want


@pytest.mark.parametrize("value", ["1.5", "-1", "two"])
def test_device_count_refuses_what_kubelet_refuses(value: str) -> None:
    with pytest.raises(AdmissionFailedError, match=r"nvidia\.com/gpu"):
        device_count(
            read_container(
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": value}}}, init=False
            ),
            "nvidia.com/gpu",
        )


async def test_the_agent_registers_its_node_and_renews_its_lease() -> None:
    async with (
        FakeKubeAPIServer() as api,
        FakeKubelet() as kubelet,
        KubeClient(api.configuration(f"system:node:{NODE}")) as client,
    ):
        agent = NodeAgent(client, NODE, kubelet, lease_renew_s=0.05)
        await agent.register_node({"gpu": "on"})
        again = await agent.register_node({"gpu": "on"})  # a restart keeps the Node
        node = api.store.get("nodes", None, NODE).body
        assert node["metadata"]["uid"] == again.uid
        assert node["metadata"]["labels"]["gpu"] == "on"
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
        assert node["status"]["allocatable"]["pods"] == "110"
        async with agent:
            first = await _renewed(client, "")
            second = await _renewed(client, first["spec"]["renewTime"])
        assert second["spec"]["holderIdentity"] == NODE
        assert second["spec"]["leaseDurationSeconds"] == 40
        [owner] = second["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "Node",
            NODE,
            node["metadata"]["uid"],
        )


async def _renewed(client: KubeClient, after: str) -> JsonObject:
    """The node's Lease once its renewTime is later than `after`."""
    async with asyncio.timeout(5):
        while True:
            with contextlib.suppress(NotFound):
                lease = await client.get(LEASES, NODE, "kube-node-lease")
                if lease["spec"]["renewTime"] > after:
                    return lease
            await asyncio.sleep(0.02)
