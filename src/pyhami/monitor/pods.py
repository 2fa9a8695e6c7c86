"""Which pods the monitor reports on, and what the scheduler allocated to their containers.

A pod counts when it carries the label `hami.io/vgpu-node=<this node>`, as in HAMi; the
directory name `<podUID>_<container>` is matched against its uid and container names. The
allocation annotation gives the containers' devices, so their series exist before their first
CUDA call (HAMi only shows a container once its region holds a device).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from pyhami.kube import PODS, Informer, InformerSettings, JsonObject, KubeClient
from pyhami.kube.views import is_sidecar
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
class PodView:
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
        names = self.init_containers + self.containers
        if container not in self.containers and container not in self.sidecars:
            return ()
        index = names.index(container)
        return self.allocated[index] if index < len(self.allocated) else ()

    def container_at(self, index: int) -> str | None:
        """A container by the init-first index the MIG annotation uses."""
        names = self.init_containers + self.containers
        return names[index] if 0 <= index < len(names) else None


class PodSource(Protocol):
    """The pods labelled to this node, as currently known."""

    def pods(self) -> Sequence[PodView]: ...


def _names(spec: Mapping[str, Any], field: str) -> tuple[str, ...]:
    return tuple(str(c.get("name", "")) for c in spec.get(field) or () if isinstance(c, Mapping))


def pod_view(obj: JsonObject) -> PodView:
    """A pod object as the monitor sees it; a bad annotation is logged and treated as absent."""
    metadata: Mapping[str, Any] = obj.get("metadata") or {}
    spec: Mapping[str, Any] = obj.get("spec") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    allocated: tuple[ContainerDevices, ...] = ()
    mig: tuple[MigAllocation, ...] = ()
    try:
        if KEY_NVIDIA_ALLOCATED in annotations:
            allocated = decode_pod_single_device(annotations[KEY_NVIDIA_ALLOCATED])
    except ProtocolError as err:
        log.warning("bad allocation annotation", pod=f"{namespace}/{name}", error=str(err))
    try:
        mig = tuple(decode_mig_allocations(annotations.get(KEY_MIG_ALLOCATIONS, "")))
    except ProtocolError as err:
        log.warning("bad MIG annotation", pod=f"{namespace}/{name}", error=str(err))
    return PodView(
        uid=PodUID(str(metadata.get("uid", ""))),
        namespace=namespace,
        name=name,
        init_containers=_names(spec, "initContainers"),
        containers=_names(spec, "containers"),
        allocated=allocated,
        mig=mig,
        sidecars=tuple(
            str(c.get("name", ""))
            for c in spec.get("initContainers") or ()
            if isinstance(c, Mapping) and is_sidecar(c)
        ),
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
        # Decoded views, reused while the pod's resourceVersion stays the same.
        self._views: dict[str, tuple[str, PodView]] = {}

    def pods(self) -> list[PodView]:
        views: dict[str, tuple[str, PodView]] = {}
        for obj in self.informer.list():
            metadata = obj.get("metadata") or {}
            uid, version = str(metadata.get("uid", "")), str(metadata.get("resourceVersion", ""))
            cached = self._views.get(uid)
            views[uid] = cached if cached and cached[0] == version else (version, pod_view(obj))
        self._views = views
        return [view for _, view in views.values()]
