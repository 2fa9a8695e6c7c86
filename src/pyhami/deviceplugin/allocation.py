"""Allocate, as pure steps: pick the container's entry, then build its env, mounts and limits file.

Nothing here touches the API, the disk or the clock: the service passes in the pod, what exists
on the host and the fresh cache-file id, and performs the effects this module describes.
Env and mounts are HAMi's device plugin's, with two differences that keep a container from
lifting its own limits:
* libvgpu's folder (`<hook>/vgpu` in the container, holding `limits.env`) is mounted
  read-only; only the region file inside it is writable (HAMi mounts the folder read-write);
* a container's `CUDA_DISABLE_CONTROL` drops the `ld.so.preload` mount only in a namespace the
  operator allows (`--allow-limit-control-namespace`; HAMi honours it everywhere).
The folder is mounted before the files inside it, so every runtime mounts them in that order.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from pyhami.devices.nvidia.libvgpu_env import (
    CORE_POLICY,
    DEFAULT_TASK_PRIORITY,
    TASK_PRIORITY,
    derived_env,
    disables_control,
)
from pyhami.devices.quantity import QuantityError
from pyhami.model import ContainerDevices, ContainerView, PodSingleDevice, PodView

VGPU_LOCK_DIR = PurePosixPath("/tmp/vgpulock")  # HAMi-core's cross-process lock dir
LIMITS_FILE_NAME = "limits.env"
LIMITS_HEADER = "# written by pyhami device-plugin"
LIBRARY_NAME = "libvgpu.so"


class AllocationError(Exception):
    """Allocate cannot serve this container; the message tells the operator what to do."""


@dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class HostFiles:
    """Which optional HAMi-core files exist under `<hook path>/vgpu` on the node."""

    libvgpu_versioned: bool = False  # libvgpu.so.<version>
    license: bool = False
    vgpuvalidator: bool = False


@dataclass(frozen=True, slots=True)
class AllocationSettings:
    # $HOOK_PATH, without /vgpu
    hook_path: PurePosixPath = field(default_factory=lambda: PurePosixPath("/usr/local"))
    version: str = "v2.10.0"  # picks libvgpu.so.<version>
    oversubscribe: bool = False  # effective deviceMemoryScaling > 1
    lib_cuda_log_level: str = ""
    disable_core_limit: bool = False
    # The container resource giving CUDA_TASK_PRIORITY, and the cluster's core policy: what the
    # webhook writes into the env, repeated in the limits file so the env cannot loosen it.
    priority_resource: str = "nvidia.com/priority"
    core_policy: str = "default"
    # Where this plugin creates the lock dir; equals the host path in the DaemonSet (host /tmp).
    vgpu_lock_dir: PurePosixPath = VGPU_LOCK_DIR
    # NVIDIA container-toolkit variables every GPU container gets (`toolkit.ToolkitFeatures`).
    toolkit_env: tuple[tuple[str, str], ...] = ()
    # Namespaces whose containers may switch libvgpu off with CUDA_DISABLE_CONTROL.
    limit_control_namespaces: frozenset[str] = frozenset()

    @property
    def vgpu_dir(self) -> PurePosixPath:
        return self.hook_path / "vgpu"


@dataclass(frozen=True, slots=True)
class ContainerSlot:
    """The annotation entry popped for one kubelet container request."""

    position: int  # index in the to-allocate list (init containers first)
    container: ContainerView  # the pod-spec container it belongs to
    devices: ContainerDevices


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """Everything one container gets, plus the host directory and file to prepare for it."""

    envs: dict[str, str]
    mounts: tuple[Mount, ...]
    cache_dir: PurePosixPath  # host path, recreated empty (0777) before answering
    limits_file: PurePosixPath  # host path inside cache_dir
    limits_text: str
    # Host paths inside cache_dir created empty before answering: the mount points of the
    # files mounted into the read-only folder (a runtime cannot create them there).
    library_mount_point: PurePosixPath
    region_file: PurePosixPath  # created 0666: libvgpu sizes and formats it on first use


def _container_at(
    pod: PodView, position: int, assigned: PodSingleDevice | None, resource: str
) -> ContainerView:
    """The container that the entry at `position` belongs to.

    HAMi maps entry i to the i-th container (init first). That holds for the one-segment-per-
    container encoding (ours), but not for HAMi HEAD's dense NVIDIA values, which list only
    containers that got GPUs. Both are served by mapping the k-th non-empty
    entry of the scheduler's (never rewritten) allocated value to the k-th container asking for
    `resource`; without that information, HAMi's positional rule is used.
    """
    everyone = pod.all_containers
    wanting = [c for c in everyone if c.asks_for(resource)]
    if assigned is not None and wanting and position < len(assigned):
        k = sum(1 for entry in assigned[:position] if entry)
        if k < len(wanting):
            return wanting[k]
    if position < len(everyone):
        return everyone[position]
    raise AllocationError(
        f"pod {pod.ref}: container index {position} out of range "
        f"(init={len(pod.init_containers)}, "
        f"regular={len(pod.containers)}); the scheduler's annotation does not "
        "match this pod's containers: delete and recreate the pod"
    )


def take_next(
    pod: PodView,
    entries: list[ContainerDevices],
    kubelet_ids: Sequence[str],
    *,
    assigned: PodSingleDevice | None = None,
    resource: str = "nvidia.com/gpu",
) -> ContainerSlot:
    """Pop the first non-empty entry (blanked in `entries`) for one kubelet container request.

    `assigned` is the allocated annotation as the scheduler wrote it (for the container map).
    """
    position = next((i for i, entry in enumerate(entries) if entry), None)
    if position is None:
        raise AllocationError(
            f"no pending device allocation found for pod {pod.ref}: every GPU container "
            "was already served; kubelet asked for more containers than the scheduler assigned "
            "(was the pod's spec changed after scheduling? delete and recreate it)"
        )
    devices = entries[position]
    entries[position] = ()
    container = _container_at(pod, position, assigned, resource)
    if len(devices) != len(kubelet_ids):
        raise AllocationError(
            f"pod {pod.ref} container {container.name!r}: device number not matched: "
            f"kubelet allocates {len(kubelet_ids)} device(s), the scheduler assigned "
            f"{len(devices)}; delete and recreate the pod so it is scheduled again"
        )
    return ContainerSlot(position=position, container=container, devices=devices)


def hami_core_env(
    devices: ContainerDevices, cache_id: str, settings: AllocationSettings
) -> dict[str, str]:
    """The HAMi-core variables (memory and SM limits, region path, policy), in HAMi's order."""
    envs = {f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{d.usedmem}m" for i, d in enumerate(devices)}
    envs["CUDA_DEVICE_SM_LIMIT"] = str(devices[0].usedcores)
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(settings.vgpu_dir / region_name(cache_id))
    if settings.oversubscribe:
        envs["CUDA_OVERSUBSCRIBE"] = "true"
    if settings.lib_cuda_log_level:
        envs["LIBCUDA_LOG_LEVEL"] = settings.lib_cuda_log_level
    if settings.disable_core_limit:
        envs["GPU_CORE_UTILIZATION_POLICY"] = "disable"
    return envs


def region_name(cache_id: str) -> str:
    return f"{cache_id}.cache"


def hami_core_mounts(
    cache_dir: PurePosixPath,
    cache_id: str,
    control_off: bool,
    settings: AllocationSettings,
    files: HostFiles,
) -> tuple[Mount, ...]:
    """HAMi's mounts (libvgpu, its folder, ld.so.preload, license, validator), the folder
    read-only with its writable region file inside.

    `control_off`: the container may run without libvgpu (no `ld.so.preload`)."""
    vgpu = settings.vgpu_dir
    library = vgpu / (
        f"{LIBRARY_NAME}.{settings.version}" if files.libvgpu_versioned else LIBRARY_NAME
    )
    region = region_name(cache_id)
    mounts = [
        Mount(str(vgpu), str(cache_dir), read_only=True),
        Mount(str(vgpu / LIBRARY_NAME), str(library), read_only=True),
        Mount(str(vgpu / region), str(cache_dir / region), read_only=False),
        Mount(str(VGPU_LOCK_DIR), str(settings.vgpu_lock_dir), read_only=False),
    ]
    if not control_off:
        mounts.append(Mount("/etc/ld.so.preload", str(vgpu / "ld.so.preload"), read_only=True))
    if files.license:
        mounts.append(Mount("/tmp/license", str(vgpu / "license"), read_only=True))
    if files.vgpuvalidator:
        mounts.append(Mount("/usr/bin/vgpuvalidator", str(vgpu / "vgpuvalidator"), read_only=True))
    return tuple(mounts)


def limits_text(
    core_env: Mapping[str, str],
    container: ContainerView,
    settings: AllocationSettings,
    *,
    may_control: bool,
) -> str:
    """`limits.env` (native/libvgpu README, "Limits file"): the HAMi-core settings as
    `KEY=VALUE` lines, same keys and syntax as the env, read by libvgpu whatever the env says.

    Beside the plugin's limits it always carries a task priority and the core policy where one
    is configured, derived as the webhook derives them (never copied from the pod's env): the
    file's values can only be tightened by the env, so a pod that bypassed the webhook cannot
    raise its priority or switch the core limit off through its spec or an `export`. Only in
    the namespaces allowed to control libvgpu do the spec's literal values count."""
    values = dict(core_env)
    try:
        derived = derived_env(
            container,
            priority_resource=settings.priority_resource,
            core_policy=settings.core_policy,
        )
    except QuantityError:
        derived = {}  # refused at admission and /filter; the default priority holds
    values |= {key: value for key, value in derived.items() if key not in values}
    values.setdefault(TASK_PRIORITY, DEFAULT_TASK_PRIORITY)
    if may_control:
        for name, value in container.env:
            # The file format allows no whitespace at all; such a value stays env-only.
            usable = isinstance(value, str) and value != "" and not any(c.isspace() for c in value)
            if name in (TASK_PRIORITY, CORE_POLICY) and usable and name not in core_env:
                values[name] = str(value)
    lines = [LIMITS_HEADER, *(f"{key}={value}" for key, value in values.items())]
    return "".join(f"{line}\n" for line in lines)


def plan_container(
    slot: ContainerSlot,
    *,
    pod_uid: str,
    namespace: str,
    cache_id: str,
    settings: AllocationSettings,
    files: HostFiles,
) -> ContainerPlan:
    """Env, mounts and host preparation for one container (hami-core / mps mode)."""
    name = slot.container.name
    cache_dir = settings.vgpu_dir / "containers" / f"{pod_uid}_{name}"
    core_env = hami_core_env(slot.devices, cache_id, settings)
    visible = ",".join(dict.fromkeys(device.uuid for device in slot.devices))  # de-duplicated
    envs = {"NVIDIA_VISIBLE_DEVICES": visible, **core_env}
    may_control = namespace in settings.limit_control_namespaces
    control_off = may_control and disables_control(slot.container)
    return ContainerPlan(
        envs=envs,
        mounts=hami_core_mounts(cache_dir, cache_id, control_off, settings, files),
        cache_dir=cache_dir,
        limits_file=cache_dir / LIMITS_FILE_NAME,
        limits_text=limits_text(core_env, slot.container, settings, may_control=may_control),
        library_mount_point=cache_dir / LIBRARY_NAME,
        region_file=cache_dir / region_name(cache_id),
    )
