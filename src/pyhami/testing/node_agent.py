"""NodeAgent: the part of kubelet that turns a bound pod into running containers, for one node.

`FakeKubelet` speaks the device-plugin protocol; this adds kubelet's pod lifecycle around it,
so a pod goes from bound to Running the way it does on a real node:

* it watches the pods bound to its node (`spec.nodeName=<node>`);
* it admits one pod at a time (kubelet's `HandlePodAdditions`): for every container asking
  for the plugin's resource, init containers first, it picks devices and calls `Allocate`
  over the FakeKubelet's connection, and records the env and mounts the container runtime
  would apply (`StartedContainer`);
* it hands each container to a `ContainerRuntime` (by default none: nothing is executed),
  then reports the pod `Running` through `pods/status`;
* a failed `Allocate` fails the pod as kubelet does (`Failed`, `UnexpectedAdmissionError`);
* with `claims` (kubelet's DRA manager, `pyhami.testing.dra_claims.ClaimPreparer`) a pod's
  allocated ResourceClaims are prepared by their drivers before its containers start, and the
  CDI devices' env and mounts are added to the containers that use them; while a claim cannot
  be prepared (not readable yet, not allocated, its driver missing or failing) the pod stays
  Pending and preparation is tried again after `prepare_retry_s`, as kubelet's pod worker
  does (kubelet waits about 10 s), with the device plugin's devices kept; a claim no pod here
  uses any more is unprepared;
* a pod being deleted has its containers stopped and devices freed, then kubelet's final
  delete (grace 0) removes it; `finish()` ends a pod `Succeeded` (or `Failed`);
* `register_node()` creates the Node as kubelet registers itself (with its own credentials:
  on a real API server the Node authorizer and NodeRestriction judge it), with room for pods;
* a Lease in `kube-node-lease` is renewed every `lease_renew_s`, kubelet's heartbeat;
* the node's `status.capacity` / `allocatable` of the resource follow the plugin's
  ListAndWatch list (all devices / healthy ones), as kubelet's node status does.

    agent = NodeAgent(client, "gpu-node-1", kubelet)
    await agent.start()
    started = await agent.wait_started("default", "trainer")
    started.containers[0].envs["CUDA_DEVICE_MEMORY_LIMIT_0"]   # "3000m"

Not modelled: restarts, probes, volumes other than the plugin's mounts, other resources.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

import grpc.aio
import structlog

from pyhami.devices.quantity import QuantityError, as_int64, parse_quantity
from pyhami.kube import (
    LEASES,
    NODES,
    PODS,
    AlreadyExists,
    AsyncService,
    EventHandlers,
    KubeClient,
    KubeError,
    NotFound,
    cancel_and_wait,
    guarded_task,
)
from pyhami.kube.informer import ViewInformer
from pyhami.kube.lease import format_micro_time
from pyhami.kube.node_status import (
    ContainerState,
    PodStatus,
    node_lease,
    node_manifest,
    node_resource_status,
    pod_status_patch,
    renewed_lease,
)
from pyhami.kube.views import read_node, read_pod
from pyhami.model import ContainerView, NodeView, PodView
from pyhami.testing.fake_kubelet import FakeKubelet, KubeletError

log = structlog.get_logger(__name__)

PodKey = tuple[str, str]  # namespace, name


@dataclass(frozen=True, slots=True)
class ContainerMount:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class StartedContainer:
    """What the container runtime is told for one container: devices, env, mounts."""

    name: str
    init: bool
    device_ids: tuple[str, ...]
    envs: Mapping[str, str]
    mounts: tuple[ContainerMount, ...]
    cdi_device_ids: tuple[str, ...] = ()  # from its DRA claims


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """What the CDI devices of a container's DRA claims add to it."""

    cdi_device_ids: tuple[str, ...] = ()
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[ContainerMount, ...] = ()


class ClaimPreparation(Protocol):
    """kubelet's DRA manager: prepares a pod's claims before its containers start."""

    async def prepare(self, pod: PodView) -> Mapping[str, ContainerEdits]: ...

    async def release(self, pod_key: PodKey) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class PodStart:
    """The admission of one pod: its containers, or why kubelet refused it."""

    namespace: str
    name: str
    uid: str
    containers: tuple[StartedContainer, ...] = ()
    error: str = ""

    def container(self, name: str) -> StartedContainer:
        for started in self.containers:
            if started.name == name:
                return started
        raise KeyError(f"pod {self.namespace}/{self.name} started no container {name!r}")


class AdmissionFailedError(Exception):
    """kubelet refused the pod (Allocate failed); the message is the pod's status message."""


class ClaimsNotPreparedError(Exception):
    """The pod's ResourceClaims cannot be prepared yet; kubelet keeps the pod Pending and tries
    again (a claim the Node authorizer does not let it read yet, a driver not registered yet)."""


class ContainerRuntime(Protocol):
    """Runs what kubelet started; `stop` is called once per started container."""

    async def start(self, pod: PodView, container: StartedContainer) -> None: ...

    async def stop(self, pod: PodView, container: StartedContainer) -> None: ...


class RecordingRuntime:
    """Executes nothing: the containers are the records in `NodeAgent.started`."""

    async def start(self, pod: PodView, container: StartedContainer) -> None:
        return None

    async def stop(self, pod: PodView, container: StartedContainer) -> None:
        return None


NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_LEASE_DURATION_S = 40  # kubelet's default; it renews at a quarter of it
# What a simulated node offers besides its devices: kube-scheduler checks pods, CPU and memory.
NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "110"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(pod: PodView) -> PodKey:
    return pod.namespace, pod.name


def device_count(container: ContainerView, resource: str) -> int:
    """kubelet's view of an extended resource: the limit (requests must equal it)."""
    value = container.quantity(resource)
    where = f"container {container.label}: {resource}"
    try:
        count = as_int64(parse_quantity(0 if value is None else value))
    except QuantityError as err:
        raise AdmissionFailedError(f"{where}: {err}") from err
    if count is None:
        raise AdmissionFailedError(f"{where} must be a whole number, got {value!r}")
    if count < 0:
        raise AdmissionFailedError(f"{where} is negative")
    return count


def running_status(pod: PodView, now: str) -> PodStatus:
    return PodStatus(
        "Running",
        now,
        # A native sidecar (restartPolicy: Always) keeps running; classic ones completed.
        tuple(
            ContainerState(c.name, c.image, exit_code=None if c.sidecar else 0)
            for c in pod.init_containers
        ),
        tuple(ContainerState(c.name, c.image) for c in pod.containers),
    )


def finished_status(pod: PodView, now: str, code: int) -> PodStatus:
    return PodStatus(
        "Succeeded" if code == 0 else "Failed",
        now,
        containers=tuple(ContainerState(c.name, c.image, exit_code=code) for c in pod.containers),
    )


class NodeAgent(AsyncService):
    """kubelet's pod lifecycle on one node, over a `FakeKubelet`'s plugin connection."""

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        kubelet: FakeKubelet,
        *,
        resource: str = "nvidia.com/gpu",
        runtime: ContainerRuntime | None = None,
        claims: ClaimPreparation | None = None,
        status_poll_s: float = 0.2,
        lease_renew_s: float = NODE_LEASE_DURATION_S / 4,
        prepare_retry_s: float = 0.5,
    ) -> None:
        self._status_poll_s = status_poll_s
        self._prepare_retry_s = prepare_retry_s
        self._lease_renew_s = lease_renew_s
        self._client = client
        self.node_name = node_name
        self.kubelet = kubelet
        self.resource = resource
        self.runtime: ContainerRuntime = runtime or RecordingRuntime()
        self.claims = claims
        self.pods = ViewInformer(
            client,
            PODS,
            read_pod,
            field_selector=f"spec.nodeName={node_name}",
            name=f"kubelet/{node_name}",
        )
        self.pods.add_handlers(
            EventHandlers(
                on_add=self._seen, on_update=lambda _old, new: self._seen(new), on_delete=self._gone
            )
        )
        self.started: dict[PodKey, PodStart] = {}
        self._queue: asyncio.Queue[PodView] = asyncio.Queue()
        self._handled: set[PodKey] = set()
        self._held: dict[PodKey, list[str]] = {}  # device ids in use, per pod
        # the device plugin's answers, kept while the pod waits for its claims to be prepared
        self._allocated: dict[PodKey, list[StartedContainer]] = {}
        self._stopping: set[PodKey] = set()
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._work = asyncio.Lock()  # one pod at a time, as kubelet's sync loop admits them

    async def start(self) -> None:
        self.pods.start()
        await self.pods.wait_synced()
        self._tasks.append(guarded_task(self._admit_loop(), f"kubelet/{self.node_name}/admit"))
        self._tasks.append(
            guarded_task(self._node_status_loop(), f"kubelet/{self.node_name}/node-status")
        )
        self._tasks.append(guarded_task(self._lease_loop(), f"kubelet/{self.node_name}/lease"))

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
        await self.pods.stop()

    # ----- reading --------------------------------------------------------------------------

    async def wait_started(self, namespace: str, name: str, timeout_s: float = 10.0) -> PodStart:
        """The pod's admission once it happened; AdmissionFailedError when kubelet refused it."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: (namespace, name) in self.started)
        started = self.started[(namespace, name)]
        if started.error:
            raise AdmissionFailedError(started.error)
        return started

    def devices_in_use(self) -> int:
        return sum(len(ids) for ids in self._held.values())

    # ----- the node and its heartbeat -------------------------------------------------------

    async def register_node(self, labels: Mapping[str, str] | None = None) -> NodeView:
        """Create this node's Node object (kept as it is when it exists already)."""
        node = node_manifest(self.node_name, labels or {}, NODE_CAPACITY, _now())
        try:
            return read_node(await self._client.create(NODES, node))
        except AlreadyExists:
            return read_node(await self._client.get(NODES, self.node_name))

    async def _lease_loop(self) -> None:
        while True:
            try:
                await self._renew_lease()
            except KubeError as err:
                log.warning("node lease not renewed", node=self.node_name, error=str(err))
            await asyncio.sleep(self._lease_renew_s)

    async def _renew_lease(self) -> None:
        renewed = format_micro_time(datetime.now(UTC))
        try:
            lease = await self._client.get(LEASES, self.node_name, NODE_LEASE_NAMESPACE)
        except NotFound:
            node = read_node(await self._client.get(NODES, self.node_name))
            await self._client.create(
                LEASES,
                node_lease(
                    node.name, node.uid, NODE_LEASE_NAMESPACE, NODE_LEASE_DURATION_S, renewed
                ),
                NODE_LEASE_NAMESPACE,
            )
            return
        body = renewed_lease(lease, self.node_name, NODE_LEASE_DURATION_S, renewed)
        await self._client.replace(LEASES, self.node_name, body, NODE_LEASE_NAMESPACE)

    # ----- node status ----------------------------------------------------------------------

    async def _node_status_loop(self) -> None:
        reported: tuple[int, int] | None = None
        while True:
            plugin = self.kubelet.plugins.get(self.resource)
            counts = (len(plugin.devices), len(plugin.healthy_ids())) if plugin else (0, 0)
            if counts != reported:
                body = node_resource_status(self.resource, *counts)
                try:
                    await self._client.patch_node_status(self.node_name, body)
                    reported = counts
                except KubeError as err:
                    log.warning("node status not written", node=self.node_name, error=str(err))
            await asyncio.sleep(self._status_poll_s)

    # ----- events ---------------------------------------------------------------------------

    def _seen(self, pod: PodView) -> None:
        key = _key(pod)
        if pod.deleting:
            if key not in self._stopping:
                self._stopping.add(key)
                self._queue.put_nowait(pod)
            return
        if key not in self._handled and pod.phase in ("", "Pending"):
            self._handled.add(key)
            self._queue.put_nowait(pod)

    async def _gone(self, pod: PodView) -> None:
        key = _key(pod)
        async with self._work:
            await self._release(key, pod)
            self._handled.discard(key)
            self._stopping.discard(key)
            async with self._changed:
                self.started.pop(key, None)
                self._changed.notify_all()

    async def _admit_loop(self) -> None:
        while True:
            pod = await self._queue.get()
            async with self._work:
                if _key(pod) in self._stopping:
                    await self._terminate(pod)
                else:
                    await self._admit(pod)

    # ----- admission ------------------------------------------------------------------------

    async def _admit(self, pod: PodView) -> None:
        namespace, name = _key(pod)
        try:
            containers = await self._allocate_all(pod)
        except ClaimsNotPreparedError as err:
            log.warning(
                "claims not prepared",
                node=self.node_name,
                pod=f"{namespace}/{name}",
                error=str(err),
                retry_s=self._prepare_retry_s,
            )
            asyncio.get_running_loop().call_later(self._prepare_retry_s, self._retry, pod)
            return
        except (AdmissionFailedError, KubeletError, grpc.aio.AioRpcError) as err:
            why = err.details() if isinstance(err, grpc.aio.AioRpcError) else str(err)
            await self._refuse(
                pod,
                "UnexpectedAdmissionError",
                f"Allocate failed due to {why}, which is unexpected",
            )
            return
        running: list[StartedContainer] = []
        try:
            for container in containers:
                await self.runtime.start(pod, container)
                running.append(container)
        except Exception as err:  # the runtime's failure is the pod's, not the agent's
            for container in running:
                await self.runtime.stop(pod, container)
            await self._refuse(pod, "StartError", f"container failed to start: {err}")
            return
        await self._patch_status(pod, running_status(pod, _now()))
        await self._record(PodStart(namespace, name, pod.uid, tuple(containers)))

    def _retry(self, pod: PodView) -> None:
        """Admit the pod again, as it is now, unless it is gone or being deleted (then the
        deletion, already queued, frees what it holds)."""
        current = self.pods.get(pod.name, pod.namespace)
        if current is not None and current.uid == pod.uid and not current.deleting:
            self._queue.put_nowait(current)

    async def _refuse(self, pod: PodView, reason: str, message: str) -> None:
        namespace, name = _key(pod)
        await self._release((namespace, name), pod)
        await self._patch_status(pod, PodStatus("Failed", reason=reason, message=message))
        await self._record(PodStart(namespace, name, pod.uid, error=message))
        log.info("pod refused", node=self.node_name, pod=f"{namespace}/{name}", error=message)

    async def _allocate_all(self, pod: PodView) -> list[StartedContainer]:
        """The device plugin's devices, then the DRA claims' CDI edits, per container."""
        key = _key(pod)
        started = self._allocated.get(key)
        if started is None:
            started = self._allocated[key] = await self._allocate_devices(pod)
        if self.claims is None:
            return started
        edits = await self.claims.prepare(pod)
        with_devices = {container.name: container for container in started}
        init_names = {c.name for c in pod.init_containers}
        merged = []
        for spec in pod.all_containers:
            container, extra = with_devices.get(spec.name), edits.get(spec.name)
            if extra is not None:
                base = container or StartedContainer(spec.name, spec.name in init_names, (), {}, ())
                container = replace(
                    base,
                    envs={**base.envs, **extra.envs},
                    mounts=base.mounts + extra.mounts,
                    cdi_device_ids=extra.cdi_device_ids,
                )
            if container is not None:
                merged.append(container)
        return merged

    async def _allocate_devices(self, pod: PodView) -> list[StartedContainer]:
        started = []
        held = self._held.setdefault(_key(pod), [])
        # containers whose resource kube-scheduler backed by a DRA claim (a DeviceClass's
        # extended resource on a node whose device plugin does not offer it): the claim's
        # driver prepares them, no device plugin is asked
        mappings = pod.extended_claim.mappings if pod.extended_claim else ()
        backed = {container for container, resource, _ in mappings if resource == self.resource}
        for number, container in enumerate(pod.all_containers):
            count = 0 if container.name in backed else device_count(container, self.resource)
            if count == 0:
                continue
            plugin = self.kubelet.plugin(self.resource)
            before = set(plugin.in_use)
            response = await plugin.admit_container(count)
            ids = sorted(plugin.in_use - before)
            held.extend(ids)
            started.append(
                StartedContainer(
                    name=container.name,
                    init=number < len(pod.init_containers),
                    device_ids=tuple(ids),
                    envs=dict(response.envs),
                    mounts=tuple(
                        ContainerMount(m.container_path, m.host_path, m.read_only)
                        for m in response.mounts
                    ),
                )
            )
        return started

    async def _record(self, started: PodStart) -> None:
        async with self._changed:
            self.started[(started.namespace, started.name)] = started
            self._changed.notify_all()

    # ----- the end of a pod -----------------------------------------------------------------

    async def finish(self, namespace: str, name: str, exit_code: int = 0) -> None:
        """The containers exited with `exit_code`: stop them, free the devices, report it."""
        async with self._work:
            pod = read_pod(await self._client.get_pod(namespace, name))
            await self._release((namespace, name), pod)
            await self._patch_status(pod, finished_status(pod, _now(), exit_code))

    async def _terminate(self, pod: PodView) -> None:
        """A pod being deleted: stop, free, then kubelet's final delete with grace 0."""
        namespace, name = _key(pod)
        await self._release((namespace, name), pod)
        with contextlib.suppress(NotFound):
            await self._client.delete_pod(namespace, name, grace_period_seconds=0)

    async def _release(self, key: PodKey, pod: PodView) -> None:
        started = self.started.get(key)
        if key in self._held and started is not None:
            for container in started.containers:
                await self.runtime.stop(pod, container)
        ids = self._held.pop(key, [])
        self._allocated.pop(key, None)
        plugin = self.kubelet.plugins.get(self.resource)
        if plugin is not None:
            plugin.in_use.difference_update(ids)
        if self.claims is not None:
            for error in await self.claims.release(key):
                log.warning("claim not unprepared", node=self.node_name, error=error)

    async def _patch_status(self, pod: PodView, status: PodStatus) -> None:
        namespace, name = _key(pod)
        try:
            await self._client.patch_pod_status(namespace, name, pod_status_patch(status))
        except NotFound:
            pass
        except KubeError as err:
            log.warning("pod status not written", pod=f"{namespace}/{name}", error=str(err))
