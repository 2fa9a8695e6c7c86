"""The demo cluster: every pyhami service and every double, wired on localhost in one event loop.

    async with DemoCluster(DemoSettings(nodes=2, gpus=4), workdir) as cluster:
        await cluster.client.create_pod("default", pod)
        started = await cluster.node("gpu-node-1").agent.wait_started("default", "trainer")

What runs, each over its real protocol:
* `FakeKubeAPIServer` (HTTP), with the scheduler's webhook registered over HTTPS (throwaway CA);
* `SchedulerProcess` (extender, webhook, `/explain`, `/metrics`), its own API client;
* `KubeSchedulerHarness` playing kube-scheduler: the `hami-scheduler` profile against the
  extender over HTTPS with a client certificate from the same throwaway CA, and a
  `default-scheduler` profile for the pods that ask for no GPU;
* or, given built Kubernetes binaries (`pyhami control-plane build`), Kubernetes' own etcd,
  kube-apiserver, kube-controller-manager and kube-scheduler in place of the double and the
  harness (`RealControlPlane`): the webhooks as a MutatingWebhookConfiguration, the chart's
  RBAC applied (`CHART_RBAC_FILE`), every component with its own credentials (the chart's
  ServiceAccounts' tokens; nodes as `system:node:<name>`), and `refused_requests()` naming any
  request of theirs the real authorizer or admission refused;
* per node: a `DevicePlugin` on a `FakeNVML` registered with a `FakeKubelet` (gRPC on unix
  sockets), a `NodeAgent` (kubelet's pod lifecycle: Allocate per container, pod status) and a
  `MonitorService` reading the node's container regions, serving `/metrics`.

The tests in `tests/system` start this same stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TypeVar

from pyhami.controlplane import BuiltBinaries
from pyhami.deviceplugin.allocation import AllocationSettings
from pyhami.deviceplugin.config import VgpuConfig
from pyhami.deviceplugin.service import DevicePlugin, PluginOptions
from pyhami.kube import (
    DEVICE_CLASSES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NODES,
    AsyncService,
    KubeClient,
    cancel_and_wait,
    guarded_task,
)
from pyhami.kube.component_config import LeaderElection
from pyhami.kube.dra_manifests import device_class
from pyhami.kube.manifests import MatchCondition, PodWebhook, webhook_configuration
from pyhami.kube.views import read_node
from pyhami.protocol import KEY_NODE_NVIDIA_REGISTER, gojson
from pyhami.scheduler.runtime import SchedulerProcess, load_device_config
from pyhami.scheduler.settings import SchedulerSettings
from pyhami.sim.demo.dra_nodes import DraDemoNode, dra_node_name, start_dra_node, stop_dra_node
from pyhami.sim.demo.monitors import MIG_APPLY_LOCK, NodeMonitor, node_monitor
from pyhami.sim.demo.settings import DemoSettings, node_name
from pyhami.testing import FakeGpu, FakeKubeAPIServer, FakeKubelet, FakeNVML
from pyhami.testing.certs import KeyPair, ServingFiles, write_serving_certificate
from pyhami.testing.fake_apiserver import ADMIN, service_account
from pyhami.testing.node_agent import ContainerRuntime, NodeAgent
from pyhami.testing.real_cluster import RealControlPlane
from pyhami.testing.scheduler_harness import ExtenderConfig, KubeSchedulerHarness

SCHEDULER_NAME = "hami-scheduler"
DEFAULT_SCHEDULER_NAME = "default-scheduler"
RESOURCE = "nvidia.com/gpu"
SPLIT_COUNT = 10  # HAMi's default deviceSplitCount
# Who each part is to the API server, as in a cluster installed from the chart: the user is an
# admin (kubectl), our components run as their ServiceAccounts (the monitor shares the device
# plugin's pod), kube-scheduler and kubelet as themselves.
COMPONENT_NAMESPACE = "kube-system"
SCHEDULER_USER = service_account(COMPONENT_NAMESPACE, "pyhami-scheduler")
DEVICE_PLUGIN_USER = service_account(COMPONENT_NAMESPACE, "pyhami-device-plugin")
# The DRA driver and the monitor beside it (the chart's dra-driver DaemonSet).
DRA_DRIVER_USER = service_account(COMPONENT_NAMESPACE, "pyhami-dra-driver")
KUBE_SCHEDULER_USER = "system:kube-scheduler"
# Who may move a pod through its allocation states (the chart's pyhami.trustedWriters with DRA
# on: the DRA driver labels the pods whose claims it prepares).
TRUSTED_WRITERS = (SCHEDULER_USER, DEVICE_PLUGIN_USER, DRA_DRIVER_USER)
# The chart's ServiceAccounts, roles and bindings as helm renders them for the names above
# with DRA on (tests/chart/test_demo_rbac.py keeps this copy equal to the chart).
CHART_RBAC_FILE = Path(__file__).with_name("chart-rbac.yaml")


def trusted_writers_condition(writers: Sequence[str]) -> MatchCondition:
    """The ownership webhook's matchCondition exactly as the chart renders it
    (pyhami.ownershipCondition, with helm's toJson: Go's encoding/json): a trusted writer's
    update skips the webhook."""
    exact = [writer for writer in writers if not writer.endswith(":")]
    terms = [f"request.userInfo.username in {gojson.dumps(exact)}"]
    terms += [
        f"request.userInfo.username.startsWith({gojson.dumps(prefix)})"
        for prefix in writers
        if prefix.endswith(":")
    ]
    expression = f"request.operation != 'UPDATE' || !({' || '.join(terms)})"
    return MatchCondition("not-a-trusted-writers-update", expression)


# The chart's two webhooks (charts/pyhami/templates/scheduler.yaml): HAMi's webhook, and the
# ownership rule for every pod (protectSchedulerAnnotations): only our two components may move a
# pod through its allocation states.
WEBHOOKS = (
    PodWebhook("vgpu.hami.io", "/webhook", ("CREATE",), ("hami.io/webhook", "ignore")),
    PodWebhook(
        "ownership.pyhami.io",
        "/webhook/ownership",
        ("CREATE", "UPDATE"),
        conditions=(trusted_writers_condition(TRUSTED_WRITERS),),
    ),
)
DEVICE_CONFIG = f"""\
nvidia:
  resourceCountName: {RESOURCE}
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  defaultGPUNum: 1
  deviceSplitCount: {SPLIT_COUNT}
"""
Progress = Callable[[str], None]
_T = TypeVar("_T")


def _started(part: _T | None) -> _T:
    if part is None:
        raise RuntimeError("the demo cluster is not started")
    return part


def install_libvgpu(library: Path, vgpu_dir: Path) -> None:
    """What HAMi's device-plugin container does at start: the library and the preload file
    (naming the library where containers see it) into `<hook path>/vgpu`."""
    shutil.copyfile(library, vgpu_dir / "libvgpu.so")
    (vgpu_dir / "ld.so.preload").write_text(f"{vgpu_dir / 'libvgpu.so'}\n")


@dataclass
class DemoNode:
    """One simulated GPU node and the parts running on it."""

    name: str
    nvml: FakeNVML
    hook: Path  # the node's $HOOK_PATH (libvgpu.so, containers/) lives in hook/vgpu
    kubelet: FakeKubelet
    plugin: DevicePlugin
    agent: NodeAgent
    monitor: NodeMonitor
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def metrics_url(self) -> str:
        return self.monitor.metrics_url


class DemoCluster(AsyncService):
    """Start with `async with`; everything is stopped and the work directory removed on exit."""

    def __init__(
        self,
        settings: DemoSettings,
        workdir: Path | None = None,
        *,
        progress: Progress = lambda _line: None,
        runtime: ContainerRuntime | None = None,
        kubernetes: BuiltBinaries | None = None,
        rbac: str | None = None,
        extender_url: str | None = None,
        kube_scheduler_election: LeaderElection | None = None,
    ) -> None:
        self.settings = settings
        # Where kube-scheduler calls the extender (default: the in-process scheduler);
        # tests that run scheduler replicas as processes put them, or a proxy, there.
        self._extender_url = extender_url
        # Given, kube-scheduler campaigns with this `leaderElection` section under the
        # scheduler's ServiceAccount, as in the chart's scheduler pod.
        self._kube_scheduler_election = kube_scheduler_election
        # unix socket paths are limited to ~107 bytes: keep the root short.
        self._owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="pyhami-demo-", dir="/tmp"))
        self.progress = progress
        self.runtime = runtime
        self._api = FakeKubeAPIServer(bookmark_interval_s=0.5) if kubernetes is None else None
        # YAML documents applied on the real control plane before any component starts
        self._rbac = CHART_RBAC_FILE.read_text() if rbac is None else rbac
        if settings.dra_nodes and kubernetes is None:
            raise ValueError("DRA nodes need Kubernetes' own control plane (--control-plane real)")
        self.real = (
            None
            if kubernetes is None
            else RealControlPlane(kubernetes, self.workdir / "k8s", dra=settings.dra_nodes > 0)
        )
        self.nodes: list[DemoNode] = []
        self.dra_nodes: list[DraDemoNode] = []
        self._stop = asyncio.Event()
        self._clients: list[KubeClient] = []
        self._scheduler: SchedulerProcess | None = None
        self._harness: KubeSchedulerHarness | None = None
        self._default_scheduler: KubeSchedulerHarness | None = None
        self._tls: ServingFiles | None = None
        self._client_certificate: KeyPair | None = None

    # ----- what callers use -----------------------------------------------------------------

    @property
    def api(self) -> FakeKubeAPIServer:
        if self._api is None:
            raise RuntimeError("this demo cluster runs Kubernetes' own control plane, no double")
        return self._api

    @property
    def scheduler(self) -> SchedulerProcess:
        return _started(self._scheduler)

    @property
    def harness(self) -> KubeSchedulerHarness:
        return _started(self._harness)

    @property
    def ca_pem(self) -> bytes:
        return self.tls.ca_pem

    @property
    def tls(self) -> ServingFiles:
        """The scheduler's serving certificate and its CA (also the extender's client CA)."""
        return _started(self._tls)

    @property
    def device_config_file(self) -> Path:
        return self.workdir / "device-config.yaml"

    @property
    def client_certificate(self) -> KeyPair:
        """kube-scheduler's client certificate: /filter, /bind and /explain need one."""
        return _started(self._client_certificate)

    @property
    def client(self) -> KubeClient:
        """A user's client (kubectl's place): pods created with it go through the webhook."""
        return self._clients[0]

    @property
    def scheduler_url(self) -> str:
        return f"https://127.0.0.1:{self.scheduler.main_port}"

    @property
    def scheduler_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.scheduler.metrics_port}/metrics"

    def refused_requests(self) -> list[str]:
        """Each request of our components (scheduler, device plugins, DRA drivers, monitors) and
        of the nodes' kubelets that the real API server refused (403: RBAC, the Node authorizer,
        NodeRestriction); none on the double, which has no authorizer."""
        if self.real is None:
            return []
        names = [node.name for node in self.nodes] + [node.name for node in self.dra_nodes]
        nodes = {f"system:node:{name}" for name in names}
        users = {SCHEDULER_USER, DEVICE_PLUGIN_USER, DRA_DRIVER_USER, *nodes}
        return self.real.refused_requests(users)

    def node(self, name: str) -> DemoNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no demo node {name!r}")

    # ----- lifecycle ------------------------------------------------------------------------

    async def _new_client(self, user: str) -> KubeClient:
        if self.real is not None:
            client = await KubeClient.from_kubeconfig(str(await self.real.kubeconfig_of(user)))
        else:
            client = KubeClient(self.api.configuration(user))
        self._clients.append(client)
        return client

    async def start(self) -> None:
        """Everything up and every node known to the scheduler; a failure stops what started."""
        try:
            await self._start_all()
        except BaseException:
            await self.stop()
            raise

    async def _start_all(self) -> None:
        # Each device plugin's XID watch holds a worker thread while it waits (in a cluster
        # every plugin is its own process); the default pool (CPUs + 4) would leave Allocate's
        # file work queued behind them once there are a few nodes.
        workers = 2 * len(self.settings.node_cards()) + 8
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="demo")
        )
        if self.real is not None:
            await self.real.start()
            await self.real.apply(self._rbac)
            self.progress(
                f"API server        {self.real.url} (kube-apiserver "
                f"{self.real.binaries.kubernetes_version}, etcd, kube-controller-manager; "
                f"up in {self.real.started_in_s:.1f}s)"
            )
        else:
            await self.api.start()
            self.progress(f"API server        {self.api.url}")
        await self._new_client(ADMIN)  # the user's
        await self._start_scheduler()
        for number, cards in enumerate(self.settings.node_cards(), start=1):
            self.nodes.append(await self._start_node(number, cards))
        await self._wait_nodes_known()
        if self.real is not None and self.settings.dra_nodes:
            await self._start_dra_nodes(self.real)
        extender = ExtenderConfig.hami_chart(
            self._extender_url or self.scheduler_url,
            ca_pem=self.ca_pem,
            client_certificate=self.client_certificate,
        )
        if self.real is not None:
            await self._start_kube_scheduler(self.real, extender)
            return
        self._harness = await self._start_profile(SCHEDULER_NAME, extender)
        # Pods that ask for no GPU keep kube-scheduler's own profile, without our extender.
        self._default_scheduler = await self._start_profile(DEFAULT_SCHEDULER_NAME, None)
        self.progress(
            f"kube-scheduler    profiles {SCHEDULER_NAME} (our /filter, /bind over HTTPS) "
            f"and {DEFAULT_SCHEDULER_NAME}"
        )

    async def _start_dra_nodes(self, real: RealControlPlane) -> None:
        admin = await real.client(real.admin_kubeconfig)
        # With device-plugin nodes beside, the class maps no extended resource: kube-scheduler
        # would refuse HAMi-style pods everywhere (their gpumem is neither offered nor mapped).
        mixed = bool(self.nodes)
        await admin.create(DEVICE_CLASSES, device_class(None if mixed else "nvidia.com/gpu"))
        for number, cards in enumerate(self.settings.dra_node_cards(), start=1):
            name = dra_node_name(number)
            if self.settings.libvgpu is not None:
                (self.workdir / name / "hook" / "vgpu").mkdir(parents=True)
                install_libvgpu(self.settings.libvgpu, self.workdir / name / "hook" / "vgpu")
            node = await start_dra_node(
                name,
                cards,
                self.workdir / name,
                driver_client=await self._new_client(DRA_DRIVER_USER),
                node_client=await self._new_client(f"system:node:{name}"),
                runtime=self.runtime,
                monitor_client=await self._new_client(DRA_DRIVER_USER),
                monitor_tick_s=self.settings.monitor_tick_s,
            )
            self.dra_nodes.append(node)
            models = ", ".join(sorted({card.name for card in cards}))
            self.progress(
                f"node {name:<12} {len(cards)} x {models}: DRA driver, kubelet (DRA), monitor"
            )

    async def _start_kube_scheduler(self, real: RealControlPlane, extender: ExtenderConfig) -> None:
        await real.start_kube_scheduler(
            extender,
            leader_election=self._kube_scheduler_election,
            # as in the chart: kube-scheduler shares the scheduler's ServiceAccount
            kubeconfig_file=await real.kubeconfig_of(SCHEDULER_USER),
        )
        self.progress(
            f"kube-scheduler    profiles {SCHEDULER_NAME} (our /filter, /bind over HTTPS) "
            f"and {DEFAULT_SCHEDULER_NAME} (Kubernetes' own kube-scheduler)"
        )

    async def _start_profile(
        self, name: str, extender: ExtenderConfig | None
    ) -> KubeSchedulerHarness:
        initial, maximum = self.settings.harness_backoff_s
        harness = KubeSchedulerHarness(
            await self._new_client(KUBE_SCHEDULER_USER),
            extender,
            scheduler_name=name,
            backoff_initial_s=initial,
            backoff_max_s=maximum,
        )
        await harness.start()
        return harness

    async def _start_scheduler(self) -> None:
        self._tls = write_serving_certificate(self.workdir, datetime.now(UTC))
        self._client_certificate = self._tls.client_certificate()
        config_file = self.device_config_file
        config_file.write_text(DEVICE_CONFIG)
        settings = SchedulerSettings(
            device_config_file=str(config_file),
            http_bind="127.0.0.1:0",
            metrics_bind_address="127.0.0.1:0",
            cert_file=str(self._tls.cert_file),
            key_file=str(self._tls.key_file),
            extender_client_ca=str(self._tls.ca_file),
            scheduler_name=SCHEDULER_NAME,
            trusted_writers=TRUSTED_WRITERS,
            # DRA nodes only: every GPU pod is translated; mixed: those headed there
            dra_mode=(
                "off"
                if not self.settings.dra_nodes
                else ("selected" if self.settings.node_cards() else "all")
            ),
        )
        self._scheduler = SchedulerProcess(
            settings, await self._new_client(SCHEDULER_USER), load_device_config(str(config_file))
        )
        await self._scheduler.start()
        await asyncio.wait_for(self._scheduler.synced.wait(), 30)
        await self._register_webhooks(self._tls.ca_pem)
        self.progress(f"scheduler         {self.scheduler_url} (extender + webhook, TLS)")

    async def _register_webhooks(self, ca_pem: bytes) -> None:
        if self.real is None:
            for hook in WEBHOOKS:
                self.api.admission.register_pod_webhook(hook, self.scheduler_url, ca_pem)
            return
        configuration = webhook_configuration(
            "pyhami-webhook", WEBHOOKS, self.scheduler_url, ca_pem
        )
        await self.client.create(MUTATING_WEBHOOK_CONFIGURATIONS, configuration)

    async def _start_node(self, number: int, cards: Sequence[FakeGpu]) -> DemoNode:
        name = node_name(number)
        root = self.workdir / name
        hook = root / "hook"
        (hook / "vgpu" / "containers").mkdir(parents=True)
        if self.settings.libvgpu is not None:
            install_libvgpu(self.settings.libvgpu, hook / "vgpu")
        nvml = FakeNVML.with_gpus(*cards)
        kubelet = FakeKubelet(root / "kubelet")
        node_client = await self._new_client(f"system:node:{name}")
        agent = NodeAgent(node_client, name, kubelet, resource=RESOURCE, runtime=self.runtime)
        await agent.register_node({"gpu": "on"})  # kubelet registers its own Node
        await kubelet.start()
        options = PluginOptions(
            node_name=name,
            plugin_dir=kubelet.directory,
            kubelet_socket=kubelet.socket,
            settings=AllocationSettings(
                hook_path=PurePosixPath(hook), vgpu_lock_dir=PurePosixPath(root / "vgpulock")
            ),
            mig_apply_lock=root / MIG_APPLY_LOCK,
        )
        config = VgpuConfig(resource_name=RESOURCE, device_split_count=SPLIT_COUNT)
        plugin_client = await self._new_client(DEVICE_PLUGIN_USER)
        plugin = DevicePlugin(plugin_client, nvml, options, lambda: config.check(name))
        monitor_client = await self._new_client(DEVICE_PLUGIN_USER)
        monitor = node_monitor(
            name, root, nvml, monitor_client, tick_s=self.settings.monitor_tick_s
        )
        node = DemoNode(name, nvml, hook, kubelet, plugin, agent, monitor)
        node.tasks.append(
            guarded_task(plugin.run(self._stop), f"demo/{name}/device-plugin", may_finish=True)
        )
        connection = await kubelet.wait_for_plugin(RESOURCE, timeout=20)
        await connection.wait_for_devices(lambda d: len(d) == len(cards) * SPLIT_COUNT, 20)
        await agent.start()
        node.tasks.append(await monitor.start(self._stop, name))
        models = sorted({card.name for card in cards})
        self.progress(
            f"node {name:<12} {len(cards)} x {', '.join(models)}: device plugin, kubelet, monitor"
        )
        return node

    async def _wait_nodes_known(self) -> None:
        """Until every node's GPUs are registered, the scheduler has them in its ledger, and
        kube-scheduler may place pods there."""
        names = {node.name for node in self.nodes}

        async def known() -> None:
            while True:
                # on Kubernetes' own control plane a new Node carries a NoSchedule `not-ready`
                # taint until the node lifecycle controller sees it Ready
                registered = {
                    view.name
                    for node in (await self.client.list(NODES)).items
                    if KEY_NODE_NVIDIA_REGISTER in (view := read_node(node)).annotations
                    and all(taint.effect != "NoSchedule" for taint in view.taints)
                }
                ledger = {str(n) for n in self.scheduler.state.ledger.node_names()}
                if names <= registered and names <= ledger:
                    return
                await asyncio.sleep(0.05)

        await asyncio.wait_for(known(), 30)

    async def _stop_node(self, node: DemoNode) -> None:
        await node.agent.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*node.tasks, return_exceptions=True), 10)
        await cancel_and_wait(*node.tasks)
        await node.monitor.stop()
        await node.kubelet.stop()

    async def stop(self) -> None:
        self._stop.set()
        for harness in (self._harness, self._default_scheduler):
            if harness is not None:
                await harness.stop()
        await asyncio.gather(*(self._stop_node(node) for node in self.nodes))
        await asyncio.gather(*(stop_dra_node(node) for node in self.dra_nodes))
        if self._scheduler is not None:
            await self._scheduler.stop()
        for client in self._clients:
            await client.close()
        if self.real is not None:
            await self.real.stop()
        else:
            await self.api.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
