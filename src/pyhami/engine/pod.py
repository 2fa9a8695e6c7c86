"""A raw pod (Kubernetes JSON) read once into what the engine needs (the per-pod "cycle").

Also turns an already-scheduled pod's annotations into the `PodAllocation` the ledger holds,
so the informer path and offline input read pods the same way.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.selectors import CardSelectors
from pyhami.devices.vendor import ContainerSpecError, Vendor
from pyhami.engine.collapse import lasting_positions
from pyhami.engine.ledger import PodAllocation, PodKey
from pyhami.model import ContainerDeviceRequest, NodeName
from pyhami.protocol import (
    KEY_DEVICE_SCORING_WEIGHTS,
    KEY_GPU_SCHEDULER_POLICY,
    KEY_MIG_ALLOCATIONS,
    KEY_NODE_SCHEDULER_POLICY,
    KEY_NVIDIA_ALLOCATED,
    KEY_VGPU_NODE,
    GpuPolicy,
    NodePolicy,
    ProtocolError,
    decode_mig_allocations,
    decode_pod_single_device,
)


class PodSpecError(ValueError):
    """The pod cannot be read; the message names the pod and what is wrong."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything a decision depends on besides the pod and the cluster state."""

    vendor: Vendor  # the device backend the pods are scheduled for, built by the service
    # The NVIDIA section the quota book and the scheduler's node reading use.
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    node_policy: str = NodePolicy.BINPACK  # --node-scheduler-policy
    gpu_policy: str = GpuPolicy.SPREAD  # --gpu-scheduler-policy


@dataclass(frozen=True, slots=True)
class PodPlan:
    """One pending pod, read: per-container requests and the annotation-driven choices."""

    key: PodKey
    namespace: str
    name: str
    init_count: int
    requests: tuple[ContainerDeviceRequest | None, ...]  # one per container, init first
    selectors: CardSelectors
    gpu_policy: str
    node_policy: str
    weights_annotation: str | None
    # Positions of the native sidecars among the init containers (`restartPolicy: Always`).
    sidecars: frozenset[int] = frozenset()

    @property
    def wants_devices(self) -> bool:
        return any(request is not None for request in self.requests)

    @property
    def lasting_requests(self) -> list[ContainerDeviceRequest]:
        """The requests of the containers that run for the pod's whole life (sidecars, app)."""
        positions = lasting_positions(len(self.requests), self.init_count, self.sidecars)
        return [r for r in (self.requests[p] for p in positions) if r is not None]

    @property
    def gpu_sidecar(self) -> bool:
        """A sidecar asks for a GPU: later containers start from the cards it took."""
        return any(self.requests[position] is not None for position in self.sidecars)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _containers(spec: Mapping[str, Any], field: str, pod: str) -> Sequence[Mapping[str, Any]]:
    containers = spec.get(field)
    if containers is None:
        return []
    if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
        raise PodSpecError(f"pod {pod}: spec.{field} must be a list of containers")
    return containers


def pod_identity(pod: Mapping[str, Any]) -> tuple[PodKey, str, str]:
    """(key, namespace, name): the key is the UID, or namespace/name when there is none."""
    metadata = _mapping(pod.get("metadata"), "pod metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise PodSpecError("pod has no metadata.name")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise PodSpecError(f"pod {name}: metadata.namespace must be a string")
    uid = metadata.get("uid")
    return (uid if isinstance(uid, str) and uid else f"{namespace}/{name}"), namespace, name


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    metadata = _mapping(pod.get("metadata"), "pod metadata")
    annotations = _mapping(metadata.get("annotations"), "pod metadata.annotations")
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise PodSpecError(f"pod annotation {key!r} must be a string, got {value!r}")
    return annotations


def pod_containers(pod: Mapping[str, Any]) -> tuple[int, list[Mapping[str, Any]]]:
    """(number of init containers, all containers with init containers first)."""
    _, namespace, name = pod_identity(pod)
    spec = _mapping(pod.get("spec"), f"pod {namespace}/{name}: spec")
    init = _containers(spec, "initContainers", f"{namespace}/{name}")
    app = _containers(spec, "containers", f"{namespace}/{name}")
    return len(init), [*init, *app]


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """A native sidecar: an init container with `restartPolicy: Always` (Kubernetes 1.28+),
    which keeps running beside the app containers."""
    return container.get("restartPolicy") == "Always"


def sidecar_positions(init_count: int, containers: Sequence[Mapping[str, Any]]) -> frozenset[int]:
    """The positions (init first) of the native sidecars among the init containers."""
    return frozenset(n for n in range(init_count) if is_sidecar(containers[n]))


def plan_pod(pod: Mapping[str, Any], config: EngineConfig) -> PodPlan:
    """Read a pending pod: HAMi `Resourcereqs` plus its policy and card-filter annotations."""
    key, namespace, name = pod_identity(pod)
    annotations = pod_annotations(pod)
    init_count, containers = pod_containers(pod)
    try:
        requests = tuple(config.vendor.container_request(c) for c in containers)
    except ContainerSpecError as err:
        raise PodSpecError(f"pod {namespace}/{name}: {err}") from err
    return PodPlan(
        key=key,
        namespace=namespace,
        name=name,
        init_count=init_count,
        requests=requests,
        selectors=config.vendor.card_selectors(annotations),
        gpu_policy=annotations.get(KEY_GPU_SCHEDULER_POLICY, config.gpu_policy),
        node_policy=annotations.get(KEY_NODE_SCHEDULER_POLICY, config.node_policy),
        weights_annotation=annotations.get(KEY_DEVICE_SCORING_WEIGHTS),
        sidecars=sidecar_positions(init_count, containers),
    )


def init_containers_finished(pod: Mapping[str, Any]) -> bool:
    """HAMi `AllInitContainersSucceeded`: at least one status, all terminated with exit 0.

    A native sidecar's status is left out: it keeps running (HAMi v2.10 counts it, so a pod
    with a sidecar never drops its finished init containers' usage there).
    """
    status = _mapping(pod.get("status"), "pod status")
    statuses = status.get("initContainerStatuses") or []
    if not isinstance(statuses, list) or not statuses:
        return False
    init_count, containers = pod_containers(pod)
    sidecars = {containers[n].get("name") for n in sidecar_positions(init_count, containers)}
    for entry in statuses:
        if _mapping(entry, "initContainerStatuses[]").get("name") in sidecars:
            continue
        state = _mapping(entry, "initContainerStatuses[]").get("state")
        terminated = _mapping(state, "initContainerStatuses[].state").get("terminated")
        if not isinstance(terminated, Mapping) or terminated.get("exitCode") != 0:
            return False
    return True


def allocation_of(pod: Mapping[str, Any]) -> PodAllocation | None:
    """The allocation a scheduled pod records, as HAMi's pod informer reads it.

    None when the pod holds nothing: no `hami.io/vgpu-node`, no allocated annotation, or a
    finished pod (Succeeded/Failed). A terminating pod keeps its reservation. An invalid MIG
    annotation is ignored, as in HAMi; invalid pod devices are a PodSpecError.
    """
    key, namespace, name = pod_identity(pod)
    annotations = pod_annotations(pod)
    node = annotations.get(KEY_VGPU_NODE)
    value = annotations.get(KEY_NVIDIA_ALLOCATED)
    status = _mapping(pod.get("status"), f"pod {namespace}/{name}: status")
    if not node or value is None or status.get("phase") in ("Succeeded", "Failed"):
        return None
    try:
        containers = decode_pod_single_device(value)
    except ProtocolError as err:
        raise PodSpecError(f"pod {namespace}/{name}: {KEY_NVIDIA_ALLOCATED}: {err}") from err
    try:
        migs = decode_mig_allocations(annotations.get(KEY_MIG_ALLOCATIONS, ""))
    except ProtocolError:
        migs = ()  # HAMi ignores an invalid MIG annotation
    init_count, all_containers = pod_containers(pod)
    return PodAllocation(
        key=key,
        namespace=namespace,
        name=name,
        node=NodeName(node),
        containers=containers,
        init_count=init_count,
        sidecars=sidecar_positions(init_count, all_containers),
        mig_allocations=migs,
        init_finished=init_containers_finished(pod),
    )
