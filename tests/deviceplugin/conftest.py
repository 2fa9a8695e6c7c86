"""A device plugin on FakeNVML, its FakeKubelet and the fake API server, wired like a node."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.config import ConfigError, VgpuConfig
from pyhami.deviceplugin.health import HealthSettings
from pyhami.deviceplugin.service import DevicePlugin, PluginOptions
from pyhami.kube import KubeClient
from pyhami.model import DeviceInfo
from pyhami.protocol import KEY_NODE_NVIDIA_REGISTER, decode_node_devices
from pyhami.scheduler.runtime import SchedulerProcess, load_device_config
from pyhami.scheduler.settings import SchedulerSettings
from pyhami.testing import FakeKubeAPIServer, FakeKubelet, FakeNVML
from pyhami.testing.certs import write_serving_certificate
from pyhami.testing.fake_nvml import a100_80g
from pyhami.testing.scheduler_harness import ExtenderConfig, KubeSchedulerHarness

NODE = "gpu-node-1"
RESOURCE = "nvidia.com/gpu"


Device = tuple[str, int, int]  # uuid, MiB, cores


def _entry(devices: list[Device]) -> str:
    return "".join(f"{uuid},NVIDIA,{mem},{cores}:" for uuid, mem, cores in devices)


def scheduled_pod(
    name: str,
    containers: list[tuple[str, list[Device]]],
    init: list[tuple[str, list[Device]]] | None = None,
    *,
    env: dict[str, list[dict[str, str]]] | None = None,
) -> dict[str, Any]:
    """A pod exactly as our scheduler leaves it at bind time (to-allocate, bind-phase, node lock):
    one `;` segment per container, init containers first."""
    init = init or []
    env = env or {}
    value = "".join(f"{_entry(devices)};" for _, devices in init + containers)

    def spec(cname: str, devices: list[Device]) -> dict[str, Any]:
        limits = {RESOURCE: str(len(devices))} if devices else {}
        return {
            "name": cname,
            "image": "cuda",
            "env": env.get(cname, []),
            "resources": {"limits": limits},
        }

    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"hami.io/vgpu-node": NODE},
            "annotations": {
                "hami.io/vgpu-node": NODE,
                "hami.io/vgpu-time": "1755763200",
                "hami.io/vgpu-devices-to-allocate": value,
                "hami.io/vgpu-devices-allocated": value,
                "hami.io/bind-phase": "allocating",
                "hami.io/bind-time": "1755763260",
            },
        },
        "spec": {
            "nodeName": NODE,
            "schedulerName": "hami-scheduler",
            "initContainers": [spec(n, d) for n, d in init],
            "containers": [spec(n, d) for n, d in containers],
        },
    }


def lock_value(name: str, namespace: str = "default") -> str:
    return f"2026-08-21T12:00:00Z,{namespace},{name}"


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


@dataclass
class Node:
    """One simulated GPU node: API server, kubelet, NVML, and the plugin under test."""

    api: FakeKubeAPIServer
    kubelet: FakeKubelet
    nvml: FakeNVML
    hook: Path
    kube: KubeClient
    config: VgpuConfig = field(default_factory=lambda: VgpuConfig(device_split_count=4))
    config_error: ConfigError | None = None  # set to make the next config load fail
    topology_score: bool = False
    recovery_after: float | None = 0.3
    restart_delay: float = 0.1
    toolkit_env: tuple[tuple[str, str], ...] = ()  # what the CLI builds from its feature flags
    plugin: DevicePlugin | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: "asyncio.Task[None] | None" = None

    def options(self) -> PluginOptions:
        return PluginOptions(
            node_name=NODE,
            plugin_dir=self.kubelet.directory,
            kubelet_socket=self.kubelet.socket,
            settings=AllocationSettings(
                hook_path=PurePosixPath(self.hook),
                vgpu_lock_dir=PurePosixPath(self.hook / "lock"),
                toolkit_env=self.toolkit_env,
            ),
            topology_score=self.topology_score,
            health=HealthSettings(recovery_after=self.recovery_after, wait_ms=20),
            register_interval=0.2,
            retry_interval=0.05,
            restart_delay=self.restart_delay,
            kubelet_poll=0.05,
            mig_apply_lock=self.hook / "hami" / "hami-mig-apply.lock",
        )

    async def start(self) -> DevicePlugin:
        self.plugin = DevicePlugin(self.kube, self.nvml, self.options(), self.load_config)
        self._task = asyncio.create_task(self.plugin.run(self._stop), name="plugin-under-test")
        return self.plugin

    def load_config(self) -> VgpuConfig:
        if self.config_error is not None:
            raise self.config_error
        return self.config.check("test node")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 10)

    def node(self) -> dict[str, Any]:
        return self.api.store.get("nodes", None, NODE).body

    def node_annotations(self) -> dict[str, str]:
        return dict(self.node()["metadata"].get("annotations") or {})

    def registered(self) -> list[DeviceInfo]:
        """The cards the node's register annotation lists (none while it is absent)."""
        value = self.node_annotations().get(KEY_NODE_NVIDIA_REGISTER)
        return [] if value is None else list(decode_node_devices(value))

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.api.store.get("pods", namespace, name).body

    def pod_annotations(self, name: str) -> dict[str, str]:
        return dict(self.pod(name)["metadata"].get("annotations") or {})

    def bind(self, pod: dict[str, Any], *, lock: bool = True) -> dict[str, Any]:
        """Create the scheduled pod and, like our /bind, hold the node lock for it."""
        created = self.api.store.create("pods", "default", pod)
        if lock:
            self.set_lock(lock_value(pod["metadata"]["name"]))
        return created.body

    def set_lock(self, value: str | None) -> None:
        self.api.store.patch(
            "nodes",
            None,
            NODE,
            "application/merge-patch+json",
            {"metadata": {"annotations": {"hami.io/mutex.lock": value}}},
        )

    eventually = staticmethod(eventually)
    scheduled_pod = staticmethod(scheduled_pod)


@pytest.fixture
async def gpu_node(tmp_path: Path) -> AsyncIterator[Node]:
    async with FakeKubeAPIServer() as api, FakeKubelet() as kubelet:
        api.store.create(
            "nodes",
            None,
            {
                "metadata": {"name": NODE, "labels": {"gpu": "on"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
        )
        kube = KubeClient(api.configuration())
        nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(numa=1))
        node = Node(api=api, kubelet=kubelet, nvml=nvml, hook=tmp_path / "hook", kube=kube)
        (node.hook / "vgpu").mkdir(parents=True)
        try:
            yield node
        finally:
            await node.stop()
            await kube.close()


@contextlib.asynccontextmanager
async def our_scheduler(
    kube: KubeClient, device_config: str, workdir: Path
) -> AsyncIterator[KubeSchedulerHarness]:
    """Our scheduler on `device_config` (HAMi's YAML) with the kube-scheduler harness in front
    of it, both on the node's API double, for pods that name `hami-scheduler`; HTTPS with
    kube-scheduler's client certificate, as the chart wires them."""
    config_file = workdir / "device-config.yaml"
    config_file.write_text(device_config)
    tls_dir = workdir / "scheduler-tls"
    tls_dir.mkdir()
    tls = write_serving_certificate(tls_dir)
    settings = SchedulerSettings(
        device_config_file=str(config_file),
        http_bind="127.0.0.1:0",
        metrics_bind_address="127.0.0.1:0",
        cert_file=str(tls.cert_file),
        key_file=str(tls.key_file),
        extender_client_ca=str(tls.ca_file),
        scheduler_name="hami-scheduler",
    )
    scheduler = SchedulerProcess(settings, kube, load_device_config(str(config_file)))
    await scheduler.start()
    try:
        extender = ExtenderConfig.hami_chart(
            f"https://127.0.0.1:{scheduler.main_port}",
            ca_pem=tls.ca_pem,
            client_certificate=tls.client_certificate(),
        )
        async with KubeSchedulerHarness(kube, extender, backoff_initial_s=0.1) as harness:
            yield harness
    finally:
        await scheduler.stop()
