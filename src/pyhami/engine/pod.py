"""A pod's view turned into what the engine needs (the per-pod "cycle").

Also turns an already-scheduled pod's annotations into the `PodAllocation` the ledger holds,
so the informer path and offline input read pods the same way.
"""

from dataclasses import dataclass, field

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.selectors import CardSelectors
from pyhami.devices.vendor import ContainerSpecError, Vendor
from pyhami.engine.collapse import lasting_positions
from pyhami.engine.ledger import PodAllocation, PodKey
from pyhami.model import ContainerDeviceRequest, NodeName, PodSpecError, PodView
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


def plan_pod(pod: PodView, config: EngineConfig) -> PodPlan:
    """Read a pending pod: HAMi `Resourcereqs` plus its policy and card-filter annotations."""
    annotations = pod.annotations
    try:
        requests = tuple(config.vendor.container_request(c) for c in pod.all_containers)
    except ContainerSpecError as err:
        raise PodSpecError(f"pod {pod.ref}: {err}") from err
    return PodPlan(
        key=pod.key,
        namespace=pod.namespace,
        name=pod.name,
        init_count=len(pod.init_containers),
        requests=requests,
        selectors=config.vendor.card_selectors(annotations),
        gpu_policy=annotations.get(KEY_GPU_SCHEDULER_POLICY, config.gpu_policy),
        node_policy=annotations.get(KEY_NODE_SCHEDULER_POLICY, config.node_policy),
        weights_annotation=annotations.get(KEY_DEVICE_SCORING_WEIGHTS),
        sidecars=pod.sidecars,
    )


def init_containers_finished(pod: PodView) -> bool:
    """HAMi `AllInitContainersSucceeded`: at least one status, all terminated with exit 0.

    A native sidecar's status is left out: it keeps running (HAMi v2.10 counts it, so a pod
    with a sidecar never drops its finished init containers' usage there).
    """
    sidecars = {c.name for c in pod.init_containers if c.sidecar}
    return bool(pod.init_statuses) and all(
        entry.succeeded for entry in pod.init_statuses if entry.name not in sidecars
    )


def allocation_of(pod: PodView) -> PodAllocation | None:
    """The allocation a scheduled pod records, as HAMi's pod informer reads it.

    None when the pod holds nothing: no `hami.io/vgpu-node`, no allocated annotation, or a
    finished pod (Succeeded/Failed). A terminating pod keeps its reservation. An invalid MIG
    annotation is ignored, as in HAMi; invalid pod devices are a PodSpecError.
    """
    annotations = pod.annotations
    node = annotations.get(KEY_VGPU_NODE)
    value = annotations.get(KEY_NVIDIA_ALLOCATED)
    if not node or value is None or pod.finished:
        return None
    try:
        containers = decode_pod_single_device(value)
    except ProtocolError as err:
        raise PodSpecError(f"pod {pod.ref}: {KEY_NVIDIA_ALLOCATED}: {err}") from err
    try:
        migs = decode_mig_allocations(annotations.get(KEY_MIG_ALLOCATIONS, ""))
    except ProtocolError:
        migs = ()  # HAMi ignores an invalid MIG annotation
    return PodAllocation(
        key=pod.key,
        namespace=pod.namespace,
        name=pod.name,
        node=NodeName(node),
        containers=containers,
        init_count=len(pod.init_containers),
        sidecars=pod.sidecars,
        mig_allocations=migs,
        init_finished=init_containers_finished(pod),
    )
