"""A small cluster for component tests: the API double, GPU nodes, scheduler replicas over TLS.

Everything talks over real sockets: the scheduler's informers and writes go to the
FakeKubeAPIServer over HTTP, the API double calls the scheduler's webhook over HTTPS, and
the tests call /filter and /bind over HTTPS. `DevicePluginDouble` plays the one part of a
device plugin the scheduler depends on: after a pod is bound it marks it allocated and
releases the node lock, as HAMi's plugin does after Allocate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from pyhami.kube import (
    PODS,
    Conflict,
    EventHandlers,
    Informer,
    KubeClient,
    NotFound,
    cancel_and_wait,
)
from pyhami.model import DeviceInfo
from pyhami.protocol import (
    KEY_BIND_PHASE,
    KEY_NODE_LOCK,
    KEY_NODE_NVIDIA_REGISTER,
    encode_node_devices,
)
from pyhami.scheduler.runtime import SchedulerProcess, load_device_config
from pyhami.scheduler.settings import SchedulerSettings
from pyhami.testing import FakeKubeAPIServer, KubeSchedulerHarness
from pyhami.testing.certs import write_serving_certificate
from pyhami.testing.scheduler_harness import ExtenderConfig

DEVICE_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  defaultGPUNum: 1
"""
SCHEDULER_NAME = "hami-scheduler"


def node_object(name: str, cards: Sequence[DeviceInfo], **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"gpu": "on"},
            "annotations": {KEY_NODE_NVIDIA_REGISTER: encode_node_devices(cards), **annotations},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": str(10 * len(cards))},
        },
    }


def pod_object(
    name: str,
    *,
    gpus: int = 1,
    mem: int | None = 1000,
    cores: int | None = 10,
    namespace: str = "default",
    **annotations: str,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
        "spec": {
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]
        },
    }


class Cluster:
    """The API double plus helpers; scheduler replicas are started with `scheduler()`."""

    def __init__(self, api: FakeKubeAPIServer, client: KubeClient, tmp: Path) -> None:
        self.api = api
        self.client = client
        self.tmp = tmp
        self.tls = write_serving_certificate(tmp)
        self.ca = self.tls.ca_pem
        # kube-scheduler's: the extender answers /filter, /bind and /explain only with one.
        self.client_certificate = self.tls.client_certificate()
        (tmp / "device-config.yaml").write_text(DEVICE_CONFIG)
        self.processes: list[SchedulerProcess] = []
        trusted = self.client_certificate.load_into(
            ssl.create_default_context(cadata=self.ca.decode())
        )
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted))

    def settings(self, **overrides: Any) -> SchedulerSettings:
        base = SchedulerSettings(
            device_config_file=str(self.tmp / "device-config.yaml"),
            http_bind="127.0.0.1:0",
            metrics_bind_address="127.0.0.1:0",
            cert_file=str(self.tmp / "tls.crt"),
            key_file=str(self.tmp / "tls.key"),
            extender_client_ca=str(self.tls.ca_file),
            scheduler_name=SCHEDULER_NAME,
            trusted_writers=("system:serviceaccount:kube-system:",),
        )
        return replace(base, **overrides)

    async def scheduler(self, **overrides: Any) -> SchedulerProcess:
        settings = self.settings(**overrides)
        process = SchedulerProcess(
            settings, self.client, load_device_config(settings.device_config_file)
        )
        await process.start()
        self.processes.append(process)
        return process

    def harness(self, port: int) -> KubeSchedulerHarness:
        """kube-scheduler as the chart configures it, with its client certificate, driving the
        extender at `port`; it retries quickly."""
        extender = ExtenderConfig.hami_chart(
            f"https://127.0.0.1:{port}",
            ca_pem=self.ca,
            client_certificate=self.client_certificate,
        )
        return KubeSchedulerHarness(
            self.client,
            extender,
            scheduler_name=SCHEDULER_NAME,
            backoff_initial_s=0.01,
            backoff_max_s=0.05,
        )

    def register_webhook(self, process: SchedulerProcess) -> None:
        self.api.admission.register(
            "vgpu.hami.io",
            f"https://127.0.0.1:{process.main_port}/webhook",
            ca_bundle=self.ca,
            failure_policy="Fail",
        )

    async def add_nodes(self, *nodes: dict[str, Any]) -> None:
        for node in nodes:
            await self.client.request("POST", "/api/v1/nodes", body=node)

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        namespace = pod["metadata"].get("namespace", "default")
        return await self.client.create_pod(namespace, pod)

    async def post(self, process: SchedulerProcess, path: str, body: Any) -> Any:
        url = f"https://127.0.0.1:{process.main_port}{path}"
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with self.http.post(
            url, data=data, headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def get(
        self, process: SchedulerProcess, path: str, port: int | None = None
    ) -> tuple[int, str]:
        url = f"https://127.0.0.1:{port or process.main_port}{path}"
        if port is not None:
            url = url.replace("https://", "http://")
        async with self.http.get(url) as r:
            return r.status, await r.text()

    async def close(self) -> None:
        for process in self.processes:
            await process.stop()
        await self.http.close()


@contextlib.asynccontextmanager
async def running_cluster(tmp: Path) -> AsyncIterator[Cluster]:
    async with (
        FakeKubeAPIServer(bookmark_interval_s=0.2) as api,
        KubeClient(api.configuration()) as client,
    ):
        cluster = Cluster(api, client, tmp)
        try:
            yield cluster
        finally:
            await cluster.close()


async def wait_for(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout
    while not predicate():
        if loop.time() > until:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class DevicePluginDouble:
    """After bind: bind-phase `success` and the owner's node lock released (over HTTP).

    It watches pods through an informer, as a device plugin's kubelet-driven Allocate would
    learn of them, and completes each bound pod once."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.completed: set[tuple[str, str]] = set()
        self._informer = Informer(cluster.client, PODS, name="test/device-plugin-double")
        self._informer.add_handlers(
            EventHandlers(on_add=self._seen, on_update=lambda _old, new: self._seen(new))
        )
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._informer.start()

    async def stop(self) -> None:
        await self._informer.stop()
        await cancel_and_wait(*self._tasks)

    def _seen(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        ref = (meta["namespace"], meta["name"])
        bound = pod["spec"].get("nodeName")
        phase = (meta.get("annotations") or {}).get(KEY_BIND_PHASE)
        if ref in self.completed or not bound or phase != "allocating":
            return
        self.completed.add(ref)
        task = asyncio.create_task(self._complete(pod), name=f"test/complete {ref}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        client = self.cluster.client
        await client.patch_pod(
            meta["namespace"],
            meta["name"],
            {"metadata": {"annotations": {KEY_BIND_PHASE: "success"}}},
        )
        node = pod["spec"]["nodeName"]
        for _ in range(20):
            try:
                current = await client.get_node(node)
            except NotFound:
                return
            lock = (current["metadata"].get("annotations") or {}).get(KEY_NODE_LOCK, "")
            if not lock.endswith(f",{meta['namespace']},{meta['name']}"):
                return
            body = {
                "metadata": {
                    "annotations": {KEY_NODE_LOCK: None},
                    "resourceVersion": current["metadata"]["resourceVersion"],
                }
            }
            try:
                await client.patch_node(node, body)
                return
            except Conflict:
                await asyncio.sleep(0.01)
