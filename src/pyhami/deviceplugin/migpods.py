"""Dynamic MIG against the API: Allocate's answer, the runtime-identity patch, the reconciler.

Deviation from HAMi (see docs/hami-compatibility.md): the identity patch carries the resourceVersion
of the pod as just read and, on 409 Conflict, re-reads the pod and merges again (bounded), so the
second container of a pod, or a concurrent writer, cannot make the identity get lost. HAMi patches
with the version read at the start of Allocate and gives up.
"""

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from pyhami.deviceplugin.allocation import AllocationError, ContainerSlot
from pyhami.deviceplugin.api import api_pb2
from pyhami.deviceplugin.health import sleep_unless
from pyhami.deviceplugin.mig import InstanceKey, MigError, MigManager, Realised
from pyhami.kube import Conflict, KubeClient, KubeError
from pyhami.kube.patches import mig_allocations_patch
from pyhami.kube.views import read_pod
from pyhami.model import MigAllocation, PodSpecError, PodView
from pyhami.protocol import (
    KEY_MIG_ALLOCATIONS,
    ProtocolError,
    decode_mig_allocations,
    encode_mig_allocations,
)

log = logging.getLogger(__name__)


def pod_mig_allocations(pod: PodView) -> tuple[MigAllocation, ...]:
    """The pod's reservations; AllocationError naming the annotation when it is malformed."""
    try:
        return decode_mig_allocations(pod.annotations.get(KEY_MIG_ALLOCATIONS, ""))
    except ProtocolError as error:
        raise AllocationError(
            f"pod {pod.ref}: {KEY_MIG_ALLOCATIONS} is malformed ({error}); delete the pod "
            "so the scheduler places it again"
        ) from error


def container_reservations(
    pod: PodView, slot: ContainerSlot, allocations: Sequence[MigAllocation]
) -> list[MigAllocation]:
    """The container's reservations in device order, checked against its to-allocate entry."""
    mine = sorted(
        (a for a in allocations if a.container_index == slot.position),
        key=lambda a: a.device_index,
    )
    name = slot.container.name
    if len(mine) != len(slot.devices):
        raise AllocationError(
            f"pod {pod.ref} container {name!r}: {len(mine)} MIG reservation(s) in "
            f"{KEY_MIG_ALLOCATIONS} for container index {slot.position}, but {len(slot.devices)} "
            "device(s) assigned; delete the pod so the scheduler places it again"
        )
    for reservation, device in zip(mine, slot.devices, strict=True):
        if reservation.gpu_uuid != device.uuid:
            raise AllocationError(
                f"pod {pod.ref} container {name!r}: MIG reservation "
                f"{reservation.device_index} is on {reservation.gpu_uuid} but the device "
                f"assigned is {device.uuid}"
            )
    return mine


@dataclasses.dataclass(eq=False)
class MigPods:
    """The MIG manager's API side for one node."""

    kube: KubeClient
    node_name: str
    manager: MigManager
    _: dataclasses.KW_ONLY
    interval: float = 5.0
    patch_attempts: int = 5

    async def _active_allocations(self) -> list[MigAllocation]:
        """Reservations of every active pod here; raises on an API or decode error."""
        listed = await self.kube.list_pods(field_selector=f"spec.nodeName={self.node_name}")
        try:
            pods = [read_pod(item) for item in listed.items]
        except PodSpecError as error:
            raise AllocationError(f"a pod on {self.node_name} cannot be read: {error}") from error
        # A pod not being deleted and not finished keeps its MIG instances.
        active = (pod for pod in pods if not pod.deleting and not pod.finished)
        return [allocation for pod in active for allocation in pod_mig_allocations(pod)]

    async def reconcile_once(self) -> int:
        """Destroy tracked instances no active pod references; raises (fail-closed) on errors."""
        candidates = self.manager.tracked  # before listing: a newer one may not be listed yet
        referenced: set[InstanceKey] = set()
        for allocation in await self._active_allocations():
            try:
                referenced.add(self.manager.key(allocation))
            except MigError:
                continue  # a reservation for another node's GPU keeps nothing here
        return await asyncio.to_thread(self.manager.reconcile, referenced, candidates)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.reconcile_once()
            except (KubeError, AllocationError) as error:
                log.warning("MIG reconcile skipped this cycle (nothing destroyed): %s", error)
            await sleep_unless(stop, self.interval)

    async def startup(self) -> None:
        """Clean idle GPUs and adopt live instances; unlistable pods mean every GPU is in use."""
        active: list[MigAllocation] | None
        try:
            active = await self._active_allocations()
        except (KubeError, AllocationError) as error:
            log.warning(
                "MIG startup: cannot list this node's pods, treating GPUs as busy: %s", error
            )
            active = None
        await asyncio.to_thread(self.manager.startup, active)

    async def serve(
        self, pod: PodView, slots: Sequence[ContainerSlot]
    ) -> list[api_pb2.ContainerAllocateResponse]:
        """Realise the containers' reservations, record their identity, answer kubelet."""
        # Reconcile first: a pod deleted since the last 5 s tick may still hold the slices this
        # reservation was given, and creating over them would fail.
        try:
            await self.reconcile_once()
        except KubeError as error:
            raise AllocationError(f"MIG reconcile before allocating failed: {error}") from error
        allocations = pod_mig_allocations(pod)
        responses = []
        for slot in slots:
            reservations = container_reservations(pod, slot, allocations)
            try:
                realised = await asyncio.to_thread(self.manager.realise_all, reservations)
            except MigError as error:
                raise AllocationError(
                    f"pod {pod.ref} container {slot.container.name!r}: {error}"
                ) from error
            visible = ",".join(r.mig_uuid for r in realised)
            responses.append(
                api_pb2.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": visible})
            )
        await self.record_identity(pod)
        return responses

    def _realised(self, allocation: MigAllocation) -> Realised | None:
        try:
            return self.manager.known(self.manager.key(allocation))
        except MigError:
            return None  # a reservation for another node's GPU

    async def record_identity(self, pod: PodView) -> None:
        """Patch migUUID/GI/CI into the pod's reservations, guarded by its resourceVersion."""
        namespace, name = pod.namespace, pod.name
        current = pod
        for attempt in range(1, self.patch_attempts + 1):
            allocations = pod_mig_allocations(current)
            realised = [self._realised(allocation) for allocation in allocations]
            if not any(realised):
                raise AllocationError(
                    f"pod {pod.ref}: none of its MIG reservations is realised on this node"
                )
            updated = [
                allocation
                if known is None
                else dataclasses.replace(
                    allocation,
                    mig_uuid=known.mig_uuid,
                    gpu_instance_id=known.gpu_instance_id,
                    compute_instance_id=known.compute_instance_id,
                )
                for allocation, known in zip(allocations, realised, strict=True)
            ]
            patch = mig_allocations_patch(encode_mig_allocations(updated), current.resource_version)
            try:
                await self.kube.patch_pod(namespace, name, patch)
                return
            except Conflict:
                log.info(
                    "MIG identity patch of %s conflicted (try %d); re-reading",
                    pod.ref,
                    attempt,
                )
            except KubeError as error:
                raise AllocationError(
                    f"pod {pod.ref}: MIG identity patch failed: {error}"
                ) from error
            try:
                current = read_pod(await self.kube.get_pod(namespace, name))
            except (KubeError, PodSpecError) as error:
                raise AllocationError(f"pod {pod.ref}: cannot re-read it: {error}") from error
        raise AllocationError(
            f"pod {pod.ref}: MIG identity patch conflicted {self.patch_attempts} times; giving up"
        )
