"""What the informers tell the scheduler, kept as the engine's ledger plus the objects bind reads.

Node registry (differs from HAMi on purpose, docs/hami-compatibility.md): a node is
registered while its `hami.io/node-nvidia-register` annotation decodes to at least one card,
it matches `--node-label-selector`, and its kubelet has not reported zero allocatable GPUs.
Every node update is applied at once (cordon list included), so there is no 15 s loop, no
`hami.io/node-handshake` annotation for two writers to fight over, and no flapping. A node
that loses its annotation, stops matching or is deleted leaves the ledger. A register value
that does not decode keeps the node's last good registration (as HAMi) and is logged.

Pod cache, as HAMi's: pods carrying `hami.io/vgpu-node` and an
allocated annotation are charged to the ledger from their annotations alone, so a restarted
scheduler rebuilds the same ledger. A reservation `/filter` just made is not undone by an
informer event that predates its patch: views of the pod older than the patch's answer are
stale and ignored (only deletion or a terminal phase ends a reservation early). Older is told
by resourceVersion, compared as the decimal integers the API server issues; a view that
merely shows the reserved cards is not enough, since a re-filtered pod's late views from
before its failed bind's cleanup can show the same cards (where versions are not decimal,
the reserved cards are all there is to go by).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from pyhami.devices.inventory import NodeInventory
from pyhami.devices.nvidia.dra_claims import NODE_MODE_DRA, NODE_MODE_LABEL
from pyhami.engine import (
    EngineConfig,
    Ledger,
    PodAllocation,
    PodKey,
    PodSpecError,
    QuotaBook,
    allocation_of,
    collapse_init_usage,
    container_phases,
    plan_pod,
)
from pyhami.kube.manifests import QuotaView
from pyhami.model import ContainerDevices, NodeName, NodeView, PodView
from pyhami.protocol import (
    KEY_BIND_PHASE,
    KEY_DEVICE_CORDON,
    KEY_NODE_NVIDIA_REGISTER,
    KEY_NODE_NVIDIA_SCORE,
    KEY_VGPU_NODE,
    NVIDIA_VENDOR,
    BindPhase,
)

log = structlog.get_logger(__name__)

REGISTRATION_KEYS = (KEY_NODE_NVIDIA_REGISTER, KEY_NODE_NVIDIA_SCORE, KEY_DEVICE_CORDON)


def is_dra_node(node: NodeView) -> bool:
    """The node runs the DRA driver: kube-scheduler allocates its GPUs, not this extender."""
    return node.labels.get(NODE_MODE_LABEL) == NODE_MODE_DRA


def _labels_match(node: NodeView, selector: Mapping[str, str]) -> bool:
    return all(node.labels.get(key) == value for key, value in selector.items())


class ClusterState:
    """Ledger, quota book, node and pod objects, fed by informer events (pure bookkeeping)."""

    def __init__(
        self,
        config: EngineConfig,
        inventory_of: Callable[[NodeView], NodeInventory | None],
        *,
        node_selector: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.ledger = Ledger()
        self.quotas = QuotaBook(config.nvidia)
        self.inventory_of = inventory_of
        self._selector = dict(node_selector or {})
        self.nodes: dict[str, NodeView] = {}
        # Nodes labelled for the DRA driver, kept per node event so that /filter asks a set,
        # not every node's labels, which is free where a cluster has none.
        self.dra_nodes: set[str] = set()
        self.pods: dict[tuple[str, str], PodView] = {}
        # Reservations /filter made, by pod: the resourceVersion their patch answered with
        # (None until it answered, "" when the answer had none). What is reserved is the
        # ledger's entry for the pod, the one place it is kept.
        self._reservations: dict[PodKey, str | None] = {}
        # Claims offered by /preempt, per pod and node: held while the pod is nominated there.
        self._nominations: dict[PodKey, dict[NodeName, PodAllocation]] = {}
        # Pods this process bound, until the pod is gone: the informer may not show the
        # binding yet when kube-scheduler, whose cache lags too, filters the pod again.
        self._bound: dict[PodKey, str] = {}
        self.quota_namespaces: set[str] = set()
        self._registrations: dict[str, tuple[str | None, ...]] = {}
        # Nodes whose registration annotation is there but cannot be read, and why (/explain).
        self.registration_errors: dict[str, str] = {}
        # Told the node's name after every event of a node (binds waiting for its lock wake).
        self.node_changed: Callable[[str], None] = lambda _name: None

    # ----- nodes -----------------------------------------------------------------------------

    def on_node(self, node: NodeView) -> None:
        """A node informer event (the informer read the node into its view)."""
        name = node.name
        self.nodes[name] = node
        if is_dra_node(node):
            self.dra_nodes.add(name)
        else:
            self.dra_nodes.discard(name)
        self.node_changed(name)
        if not _labels_match(node, self._selector) or self._reports_no_gpus(node):
            self._forget_registration(name)
            return
        # Most node updates (the lock annotation, heartbeats) leave the registration alone;
        # only decode it again when one of the annotations it comes from changed.
        registration = tuple(node.annotations.get(key) for key in REGISTRATION_KEYS)
        if self._registrations.get(name) == registration:
            return
        self._registrations[name] = registration
        try:
            inventory = self.inventory_of(node)
        except ValueError as err:
            log.warning(
                "node registration unreadable; keeping the last one", node=name, error=str(err)
            )
            self.registration_errors[name] = str(err)
            return
        self.registration_errors.pop(name, None)
        if inventory is None or not inventory.devices:
            self.ledger.remove_node(NodeName(name))
        else:
            self.ledger.upsert_node(NodeName(name), inventory)

    def on_node_deleted(self, node: NodeView) -> None:
        name = node.name
        self.nodes.pop(name, None)
        self.dra_nodes.discard(name)
        self._forget_registration(name)
        self.node_changed(name)

    def _forget_registration(self, name: str) -> None:
        self._registrations.pop(name, None)
        self.registration_errors.pop(name, None)
        self.ledger.remove_node(NodeName(name))

    def _reports_no_gpus(self, node: NodeView) -> bool:
        """The kubelet says the device plugin is gone: allocatable count present and zero."""
        value = node.allocatable.get(self.config.nvidia.resource_count_name)
        return value is not None and str(value).strip() in ("0", "")

    # ----- pods ------------------------------------------------------------------------------

    def on_pod(self, pod: PodView) -> None:
        """A pod informer event (the informer read the pod into its view), or the pod again
        once its reservation's patch was answered."""
        key, namespace, name = pod.key, pod.namespace, pod.name
        if pod.finished:
            self.on_pod_deleted(pod)
            return
        self.pods[(namespace, name)] = pod
        try:
            allocation = allocation_of(pod)
        except PodSpecError as err:
            log.warning("pod allocation unreadable; not charged", pod=pod.ref, error=str(err))
            allocation = None
        reserved = self.ledger.pod(key) if key in self._reservations else None
        if reserved is not None:
            if not self._shows_the_patch(pod, allocation, reserved):
                return  # a view from before our patch landed
            self._reservations.pop(key, None)
        if allocation is not None:
            self._nominations.pop(key, None)  # placed: a preemption claim has served
        else:
            allocation = self._nominated_claim(key, pod)
        if allocation is None:
            self.ledger.remove_pod(key)
        elif pod.deleting and self.ledger.pod(key) is None:
            return  # HAMi: a terminating pod is not charged anew (e.g. after a restart)
        else:
            self.ledger.add_pod(allocation)

    def on_pod_deleted(self, pod: PodView) -> None:
        self.pods.pop((pod.namespace, pod.name), None)
        self._nominations.pop(pod.key, None)
        self.release(pod.key)

    # ----- claims of preempting pods ---------------------------------------------------------

    def offer_nomination(self, key: PodKey, claims: Mapping[NodeName, PodAllocation]) -> None:
        """Remember what /preempt found for the pod on each node it kept; kube-scheduler
        nominates one of them, and the pod's next event there makes the claim count."""
        self._nominations[key] = dict(claims)

    def _nominated_claim(self, key: PodKey, pod: PodView) -> PodAllocation | None:
        """The claim of a pending pod nominated to a node (`status.nominatedNodeName`), while
        its victims terminate. The pod's own /filter releases it before deciding; the pod's
        next event holds it again if that filter did not place the pod."""
        if not pod.nominated_node_name or pod.node_name:
            return None
        return self._nominations.get(key, {}).get(NodeName(pod.nominated_node_name))

    def hold_nomination(self, key: PodKey, node: NodeName) -> bool:
        """Charge the pod's claim on `node` now, unless the pod is charged already (placed or
        holding it): the scheduler's own preemption holds it from the moment it evicts, and
        again after each /filter of the pod that did not place it. False: no such claim."""
        claim = self._nominations.get(key, {}).get(node)
        if claim is None:
            return False
        if self.ledger.pod(key) is None:
            self.ledger.add_pod(claim)
        return True

    def drop_nomination(self, key: PodKey) -> None:
        """Forget the pod's claims; the one charged now leaves the ledger (not a placement)."""
        claims = self._nominations.pop(key, {})
        charged = self.ledger.pod(key)
        if charged is not None and key not in self._reservations and charged in claims.values():
            self.ledger.remove_pod(key)

    # ----- reservations made by /filter ------------------------------------------------------

    def reserve(self, allocation: PodAllocation) -> None:
        self._reservations[allocation.key] = None
        self.ledger.add_pod(allocation)

    def recorded(self, allocation: PodAllocation, version: str) -> None:
        """The patch recording `allocation` on its pod was answered with resourceVersion
        `version`: from there on, the informer's view of the pod is current again (perhaps it
        already is)."""
        key = allocation.key
        if key not in self._reservations or self.ledger.pod(key) is not allocation:
            return  # released, or the pod was filtered again meanwhile
        self._reservations[key] = version
        seen = self.pods.get((allocation.namespace, allocation.name))
        if seen is not None and seen.uid == key:
            self.on_pod(seen)

    def _shows_the_patch(
        self, pod: PodView, allocation: PodAllocation | None, reserved: PodAllocation
    ) -> bool:
        written = self._reservations.get(pod.key)
        if written is None:
            return False  # not answered yet
        seen = pod.resource_version
        if written.isdecimal() and seen.isdecimal():
            return (len(seen), seen) >= (len(written), written)
        return allocation is not None and _same_choice(allocation, reserved)

    def release(self, key: PodKey) -> None:
        """Drop a pod's reservation or recorded allocation, and its binding (idempotent)."""
        self._reservations.pop(key, None)
        self._bound.pop(key, None)
        self.ledger.remove_pod(key)

    def holds(self, allocation: PodAllocation) -> bool:
        """Whether the pod is charged exactly `allocation` now (same node, cards, amounts)."""
        charged = self.ledger.pod(allocation.key)
        return charged is not None and _same_choice(charged, allocation)

    # ----- bindings --------------------------------------------------------------------------

    def mark_bound(self, key: PodKey, node: str) -> None:
        self._bound[key] = node

    def bound_node(self, key: PodKey, pod: PodView) -> str | None:
        """The node the pod is bound to, as far as this process knows: its own binding, the
        pod's spec.nodeName, or a device plugin's bind-phase success on an allocated node."""
        if key in self._bound:
            return self._bound[key]
        if pod.node_name:
            return pod.node_name
        annotations = pod.annotations
        if annotations.get(KEY_BIND_PHASE) == BindPhase.SUCCESS and annotations.get(KEY_VGPU_NODE):
            return annotations[KEY_VGPU_NODE]
        return None

    # ----- quotas ----------------------------------------------------------------------------

    def exceeds_quota(self, pod: PodView) -> bool:
        """The webhook's quota pre-check: the pod's NVIDIA memory and
        cores (the peak over the pod's phases: each classic init container with the sidecars
        started before it, then every sidecar with every app container) against its namespace's
        ResourceQuota limits and the ledger's usage there."""
        try:
            plan = plan_pod(pod, self.config)
        except PodSpecError:
            return False  # the filter answers the bad spec with its reason
        phases = container_phases(len(plan.requests), plan.init_count, plan.sidecars)
        phase_requests = [[plan.requests[n] for n in phase] for phase in phases]
        memory = max(sum(r.memreq * r.nums for r in group if r) for group in phase_requests)
        cores = max(sum(r.coresreq * r.nums for r in group if r) for group in phase_requests)
        limit = self.quotas.limit(plan.namespace)
        if limit is None or (memory == 0 and cores == 0):
            return False
        used = self.ledger.namespace_usage(plan.namespace)
        return not limit.fits(used, memory, cores, self.config.nvidia.memory_factor)

    def on_quota(self, quota: QuotaView) -> None:
        self.quota_namespaces.add(quota.namespace)
        self.quotas.set_quota(quota.key, quota.namespace, quota.hard)

    def on_quota_deleted(self, quota: QuotaView) -> None:
        self.quotas.remove_quota(quota.key)


def _same_choice(seen: PodAllocation, reserved: PodAllocation) -> bool:
    """The informer shows what we reserved: same node, same cards and amounts (the wire form
    drops card indexes and adds a trailing empty container, so compare collapsed usage)."""
    return seen.node == reserved.node and _usage(seen) == _usage(reserved)


def _usage(allocation: PodAllocation) -> ContainerDevices:
    return collapse_init_usage(
        allocation.containers, allocation.init_count, NVIDIA_VENDOR, allocation.sidecars
    )
