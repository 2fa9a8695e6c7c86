"""Which pods the monitor reports on, and what the scheduler allocated to their containers.

A pod counts when it carries the label `hami.io/vgpu-node=<this node>`, as in HAMi; the
directory name `<podUID>_<container>` is matched against its uid and container names. The
allocation annotation gives the containers' devices, so their series exist before their first
CUDA call (HAMi only shows a container once its region holds a device).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from pyhami import model
from pyhami.kube import PODS, Informer, InformerSettings, KubeClient
from pyhami.kube.views import pod_handlers
from pyhami.model import ContainerDevices, MigAllocation, NodeName, PodUID
from pyhami.protocol import (
    KEY_MIG_ALLOCATIONS,
    KEY_NVIDIA_ALLOCATED,
    LABEL_VGPU_NODE,
    ProtocolError,
    decode_mig_allocations,
    decode_pod_single_device,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class MonitoredPod:
    """The parts of a labelled pod the monitor uses."""

    uid: PodUID
    namespace: str
    name: str
    init_containers: tuple[str, ...]
    containers: tuple[str, ...]
    # One entry per container, init containers first (the annotation's order); may be shorter.
    allocated: tuple[ContainerDevices, ...] = ()
    mig: tuple[MigAllocation, ...] = ()
    # The init containers that are native sidecars (`restartPolicy: Always`): they run for
    # the pod's whole life, so their usage is exported like an app container's.
    sidecars: tuple[str, ...] = ()

    def devices_of(self, container: str) -> ContainerDevices:
        """The devices allocated to an app container or a native sidecar by name (empty when
        none); a classic init container is short-lived and gets no usage series."""
        if container not in self.containers and container not in self.sidecars:
            return ()
        index = (self.init_containers + self.containers).index(container)
        return self.allocated[index] if index < len(self.allocated) else ()

    def container_at(self, index: int) -> str | None:
        """A container by the init-first index the MIG annotation uses."""
        names = self.init_containers + self.containers
        return names[index] if 0 <= index < len(names) else None


class PodSource(Protocol):
    """The pods labelled to this node, as currently known."""

    def pods(self) -> Sequence[MonitoredPod]: ...


def pod_view(pod: model.PodView) -> MonitoredPod:
    """A pod as the monitor sees it; a bad annotation is logged and treated as absent."""
    annotations = pod.annotations
    allocated: tuple[ContainerDevices, ...] = ()
    mig: tuple[MigAllocation, ...] = ()
    try:
        if KEY_NVIDIA_ALLOCATED in annotations:
            allocated = decode_pod_single_device(annotations[KEY_NVIDIA_ALLOCATED])
    except ProtocolError as err:
        log.warning("bad allocation annotation", pod=pod.ref, error=str(err))
    try:
        mig = tuple(decode_mig_allocations(annotations.get(KEY_MIG_ALLOCATIONS, "")))
    except ProtocolError as err:
        log.warning("bad MIG annotation", pod=pod.ref, error=str(err))
    return MonitoredPod(
        uid=PodUID(pod.uid),
        namespace=pod.namespace,
        name=pod.name,
        init_containers=tuple(c.name for c in pod.init_containers),
        containers=tuple(c.name for c in pod.containers),
        allocated=allocated,
        mig=mig,
        sidecars=tuple(c.name for c in pod.init_containers if c.sidecar),
    )


class InformerPodSource:
    """Pods labelled `hami.io/vgpu-node=<node>`, kept current by a `pyhami.kube.Informer`."""

    def __init__(self, client: KubeClient, node: NodeName, resync_period_s: float) -> None:
        self.informer = Informer(
            client,
            PODS,
            label_selector=f"{LABEL_VGPU_NODE}={node}",
            settings=InformerSettings(resync_period_s=resync_period_s),
            name="monitor/pods",
        )
        # Views built once per informer event, by namespace/name.
        self._views: dict[str, MonitoredPod] = {}
        self.informer.add_handlers(
            pod_handlers(lambda pod: self._views.update({pod.ref: pod_view(pod)}), self._forget)
        )

    def _forget(self, ref: str) -> None:
        self._views.pop(ref, None)

    def pods(self) -> list[MonitoredPod]:
        return list(self._views.values())
