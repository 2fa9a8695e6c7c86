"""Allocate and GetPreferredAllocation against the API: the effects around `allocation`.

One Allocate call: find the pod being bound, pop one annotation entry per container request,
build each container's answer, prepare its host directory and limits file, write the blanked
annotation back once, then finish the bind when nothing is left. Every failure after the pod is
known goes through one path: bind-phase `failed`, node lock released, AllocationError to kubelet.
"""

import asyncio
import logging
import os
import shutil
import uuid
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path

from pyhami.deviceplugin.allocation import (
    AllocationError,
    AllocationSettings,
    ContainerPlan,
    HostFiles,
    plan_container,
    take_next,
)
from pyhami.deviceplugin.api import api_pb2
from pyhami.deviceplugin.binding import PodBinding
from pyhami.deviceplugin.listing import NoPreferenceError, physical_id, preferred_replicas
from pyhami.deviceplugin.migpods import MigPods
from pyhami.kube import KubeClient
from pyhami.kube.patches import pod_annotations_patch
from pyhami.model import ContainerDevice, ContainerDevices, PodSingleDevice, PodView
from pyhami.protocol import (
    KEY_NVIDIA_ALLOCATED,
    KEY_NVIDIA_TO_ALLOCATE,
    BindPhase,
    ProtocolError,
    decode_pod_single_device,
    encode_pod_single_device,
)

log = logging.getLogger(__name__)


def to_allocate(pod: PodView) -> list[ContainerDevices]:
    """The NVIDIA to-allocate entries of the pod, one per container, init containers first."""
    notes = pod.annotations
    if KEY_NVIDIA_TO_ALLOCATE not in notes:
        raise AllocationError(
            f"device request not found: pod {pod.ref} has no {KEY_NVIDIA_TO_ALLOCATE} "
            "annotation, so it was not scheduled by pyhami (or HAMi); check its schedulerName"
        )
    try:
        return list(decode_pod_single_device(notes[KEY_NVIDIA_TO_ALLOCATE]))
    except ProtocolError as error:
        raise AllocationError(
            f"pod {pod.ref}: {KEY_NVIDIA_TO_ALLOCATE} is malformed ({error}); delete the pod "
            "so the scheduler places it again"
        ) from error


def assigned(pod: PodView) -> PodSingleDevice | None:
    """The allocated annotation (never rewritten); None when absent or unreadable."""
    value = pod.annotations.get(KEY_NVIDIA_ALLOCATED)
    if value is None:
        return None
    try:
        return decode_pod_single_device(value)
    except ProtocolError:
        return None


def host_files(settings: AllocationSettings) -> HostFiles:
    """Which optional HAMi-core files the node has under `<hook path>/vgpu`."""
    vgpu = Path(settings.vgpu_dir)
    return HostFiles(
        libvgpu_versioned=(vgpu / f"libvgpu.so.{settings.version}").exists(),
        license=(vgpu / "license").exists(),
        vgpuvalidator=(vgpu / "vgpuvalidator").exists(),
    )


def _world_writable_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o777)  # containers run as any user; HAMi-core writes here


def prepare_host(plan: ContainerPlan, settings: AllocationSettings) -> None:
    """Fresh per-container cache directory with its limits file, and the vgpulock dir."""
    cache_dir = Path(plan.cache_dir)
    shutil.rmtree(cache_dir, ignore_errors=True)
    _world_writable_dir(cache_dir)
    limits = Path(plan.limits_file)
    limits.write_text(plan.limits_text)
    os.chmod(limits, 0o644)
    Path(plan.library_mount_point).touch(mode=0o644)
    region = Path(plan.region_file)
    region.touch()
    os.chmod(region, 0o666)  # any user of the container may join, whatever the umask
    _world_writable_dir(Path(settings.vgpu_lock_dir))


def _response(plan: ContainerPlan) -> api_pb2.ContainerAllocateResponse:
    return api_pb2.ContainerAllocateResponse(
        envs=plan.envs,
        mounts=[
            api_pb2.Mount(
                container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
            )
            for m in plan.mounts
        ],
    )


def _realigned(devices: ContainerDevices, kubelet_ids: list[str]) -> ContainerDevices:
    """`enablegetpreferredallocation`: take kubelet's GPUs, positionally, keeping mem/cores."""
    return tuple(
        ContainerDevice(
            uuid=physical_id(kid), type=d.type, usedmem=d.usedmem, usedcores=d.usedcores
        )
        for d, kid in zip(devices, kubelet_ids, strict=True)
    )


@dataclass(eq=False)
class Allocator:
    """`Allocations` for the gRPC servicer, serialised like HAMi's (one Allocate at a time)."""

    kube: KubeClient
    binding: PodBinding
    settings: AllocationSettings
    _: KW_ONLY
    resource_name: str = "nvidia.com/gpu"
    follow_kubelet_choice: bool = False
    mig: MigPods | None = None  # dynamic MIG mode: instances instead of HAMi-core limits
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def allocate(self, request: api_pb2.AllocateRequest) -> api_pb2.AllocateResponse:
        async with self._lock:
            pod = await self.binding.pending_pod()
            try:
                responses, remaining = await self._serve(pod, request)
            except AllocationError:
                await self.binding.finish(pod, BindPhase.FAILED)
                raise
            except Exception as error:
                await self.binding.finish(pod, BindPhase.FAILED)
                raise AllocationError(f"pod {pod.ref}: allocation failed: {error}") from error
            if not any(remaining):
                await self.binding.finish(pod, BindPhase.SUCCESS)
            return api_pb2.AllocateResponse(container_responses=responses)

    async def _serve(
        self, pod: PodView, request: api_pb2.AllocateRequest
    ) -> tuple[list[api_pb2.ContainerAllocateResponse], list[ContainerDevices]]:
        entries = to_allocate(pod)
        scheduled = assigned(pod)
        slots = []
        for container_request in request.container_requests:
            kubelet_ids = list(container_request.devices_ids)
            slot = take_next(
                pod, entries, kubelet_ids, assigned=scheduled, resource=self.resource_name
            )
            if self.follow_kubelet_choice and self.mig is None:
                slot = replace(slot, devices=_realigned(slot.devices, kubelet_ids))
            slots.append(slot)
        if self.mig is not None:
            responses = await self.mig.serve(pod, slots)
        else:
            files = await asyncio.to_thread(host_files, self.settings)
            responses = []
            for slot in slots:
                plan = plan_container(
                    slot,
                    pod_uid=pod.uid,
                    namespace=pod.namespace,
                    cache_id=str(uuid.uuid4()),
                    settings=self.settings,
                    files=files,
                )
                await asyncio.to_thread(prepare_host, plan, self.settings)
                responses.append(_response(plan))
        for slot, response in zip(slots, responses, strict=True):
            response.envs.update(self.settings.toolkit_env)
            visible = response.envs["NVIDIA_VISIBLE_DEVICES"]
            log.info("Allocate: pod %s container %s gets %s", pod.ref, slot.container.name, visible)
        # HAMi rewrites decode→encode, which adds one `;` per call; kept for
        # byte compatibility with HAMi's own readers.
        blanked = encode_pod_single_device(tuple(entries))
        await self.kube.patch_pod(
            pod.namespace, pod.name, pod_annotations_patch({KEY_NVIDIA_TO_ALLOCATE: blanked})
        )
        return responses, entries

    async def prefer(
        self, request: api_pb2.PreferredAllocationRequest
    ) -> api_pb2.PreferredAllocationResponse:
        pod = await self.binding.pending_pod()
        pending = [entry for entry in to_allocate(pod) if entry]
        response = api_pb2.PreferredAllocationResponse()
        for entry, container in zip(pending, request.container_requests, strict=False):
            try:
                chosen = preferred_replicas(
                    list(container.available_deviceIDs),
                    list(container.must_include_deviceIDs),
                    [device.uuid for device in entry],
                    container.allocation_size,
                )
            except NoPreferenceError as error:
                log.warning("no preferred allocation for %s: %s", pod.ref, error)
                continue
            response.container_responses.append(
                api_pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen)
            )
        return response
