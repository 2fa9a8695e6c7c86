"""NodePrepareResources and NodeUnprepareResources for one claim: the effects and their checks.

Prepare reads the claim from the API, takes from `status.allocation` the devices of
`gpu.pyhami.io` in this node's pool with their `consumedCapacity` (memory bytes, cores percent),
and gives the claim what the device plugin's Allocate gives a container for HAMi-core: the
same env (memory limit per GPU in MiB, SM limit, visible devices, region path) and mounts
(libvgpu.so, its read-only folder with the writable region file, `ld.so.preload`, the lock
dir), and the same fresh cache folder with `limits.env`. They reach the container through one
CDI device per claim, so every container using the claim shares one region: the claim's memory
is what all of them together may use.

The cache folder is `<hook>/vgpu/containers/<pod uid>_<container>` for the first pod the claim
is reserved for and its first container using the claim, the name the monitor already matches
to a pod; the pod gets the `hami.io/vgpu-node` label the monitor selects pods by. The folder
also gets the allocation record (`pyhami.protocol.allocation_record`): the devices with their
memory and cores, which a device-plugin pod's annotation gives the monitor. Unprepare removes
the folder, record included.

A claim prepared before (the checkpoint holds it) gets the same answer again without touching
its folder, whose region live processes may be using.
"""

import asyncio
import logging
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from pyhami.deviceplugin.allocation import AllocationSettings, ContainerSlot, plan_container
from pyhami.deviceplugin.allocator import host_files, prepare_host
from pyhami.devices.nvidia.dra_claims import CORES, MIB
from pyhami.devices.quantity import QuantityError, as_int64, parse_quantity
from pyhami.dra import cdi
from pyhami.dra.api import DRIVER
from pyhami.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice, write_whole
from pyhami.dra.slices import GpuFacts, device_name
from pyhami.kube import RESOURCE_CLAIMS, KubeClient, NotFound
from pyhami.kube.dra_views import read_claim
from pyhami.kube.errors import KubeError
from pyhami.kube.manifests import read_pod_state
from pyhami.kube.patches import pod_labels_patch
from pyhami.model import ContainerDevice, ContainerDevices, ContainerView, PodSpecError
from pyhami.model.dra import ClaimSpecError, ClaimView, DeviceResultView
from pyhami.protocol import (
    LABEL_VGPU_NODE,
    NVIDIA_VENDOR,
    RECORD_FILE_NAME,
    ProtocolError,
    encode_allocation_record,
)

log = logging.getLogger(__name__)


class PrepareError(Exception):
    """This claim cannot be prepared; the message is what kubelet shows in the pod's events."""


@dataclass(frozen=True, slots=True)
class ClaimKey:
    """A claim as kubelet names it in NodePrepareResources."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True, slots=True)
class AllocatedGpu:
    """One allocation result of our driver, checked against this node's GPUs."""

    request: str
    device: str
    share_id: str | None
    facts: GpuFacts
    memory_mib: int
    cores: int


def _consumed(result: DeviceResultView, name: str, where: str) -> int:
    consumed = result.consumed
    if name not in consumed:
        raise PrepareError(
            f"{where}: no consumedCapacity.{name} in the allocation; the device is shared by "
            "capacity, so kube-scheduler must record it (is the DRAConsumableCapacity feature "
            "gate on in kube-apiserver and kube-scheduler?)"
        )
    try:
        value = as_int64(parse_quantity(consumed[name]))
    except QuantityError as error:
        raise PrepareError(f"{where}: consumedCapacity.{name}: {error}") from error
    if value is None:
        raise PrepareError(
            f"{where}: consumedCapacity.{name} {consumed[name]!r} is not a whole number"
        )
    return value


def allocated_gpus(
    claim: ClaimView, node_name: str, facts: Sequence[GpuFacts]
) -> tuple[AllocatedGpu, ...]:
    """The claim's devices of this driver, with the memory (MiB) and cores each may use."""
    ref = f"claim {claim.ref}"
    if not claim.allocated:
        raise PrepareError(f"{ref} is not allocated (no status.allocation)")
    by_name = {device_name(f.gpu): f for f in facts}
    gpus: list[AllocatedGpu] = []
    for result in claim.results:
        if result.driver != DRIVER:
            continue
        device = result.device
        where = f"{ref}, request {result.request!r}, device {device!r}"
        if result.pool != node_name:
            raise PrepareError(f"{where}: pool {result.pool!r} is not this node's ({node_name!r})")
        if result.admin_access:
            # Admin access bypasses capacity accounting; there is no limit to hand libvgpu.
            raise PrepareError(
                f"{where}: admin access is not supported by {DRIVER} (use the device "
                "plugin's CUDA_DISABLE_CONTROL namespaces for unlimited access)"
            )
        gpu = by_name.get(device)
        if gpu is None:
            raise PrepareError(f"{where}: no such GPU on node {node_name}")
        memory = _consumed(result, "memory", where)
        cores = _consumed(result, "cores", where)
        if not 0 < memory <= gpu.memory_bytes:
            raise PrepareError(
                f"{where}: consumed memory {memory} bytes is outside 1 byte .. the GPU's "
                f"{gpu.memory_bytes} bytes"
            )
        if not 0 <= cores <= CORES:
            raise PrepareError(f"{where}: consumed cores {cores} is outside 0..{CORES} percent")
        gpus.append(
            AllocatedGpu(
                request=result.request,
                device=device,
                share_id=result.share_id,
                facts=gpu,
                # libvgpu limits are whole MiB; the slice's step keeps amounts MiB-aligned.
                memory_mib=max(1, memory // MIB),
                cores=cores,
            )
        )
    if not gpus:
        drivers = sorted({r.driver for r in claim.results})
        raise PrepareError(
            f"{ref} has no device of driver {DRIVER} in its allocation (drivers: "
            f"{', '.join(drivers) or 'none'})"
        )
    return tuple(gpus)


def container_devices(gpus: Iterable[AllocatedGpu]) -> ContainerDevices:
    """What the container gets per GPU, in the order of its `CUDA_DEVICE_MEMORY_LIMIT_<i>`:
    two requests of one claim may share one GPU, which the container then sees once, with
    the sum."""
    shares: dict[str, tuple[int, int]] = {}
    for g in gpus:
        memory, cores = shares.get(g.facts.gpu.uuid, (0, 0))
        shares[g.facts.gpu.uuid] = (memory + g.memory_mib, min(CORES, cores + g.cores))
    return tuple(
        ContainerDevice(uuid=uuid, type=NVIDIA_VENDOR, usedmem=memory, usedcores=cores)
        for uuid, (memory, cores) in shares.items()
    )


@dataclass(eq=False)
class Preparer:
    """Prepare and unprepare claims for one node, one call at a time."""

    kube: KubeClient
    node_name: str
    facts: Sequence[GpuFacts]
    settings: AllocationSettings
    checkpoint: Checkpoint
    _: KW_ONLY
    cdi_dir: Path = cdi.CDI_DIR
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def prepare(self, claim: ClaimKey) -> PreparedClaim:
        """Prepare one claim (raises PrepareError with the reason kubelet should show)."""
        async with self._lock:
            done = self.checkpoint.claims.get(claim.uid)
            if done is not None:
                if not Path(done.spec_file).exists():
                    raise PrepareError(
                        f"claim {claim} was prepared but its CDI spec {done.spec_file} is gone; "
                        "delete the pod so the claim is prepared afresh"
                    )
                return done
            return await self._prepare_new(claim)

    async def _prepare_new(self, claim: ClaimKey) -> PreparedClaim:
        try:
            obj = read_claim(await self.kube.get(RESOURCE_CLAIMS, claim.name, claim.namespace))
        except NotFound:
            raise PrepareError(f"claim {claim} does not exist") from None
        except (KubeError, ClaimSpecError) as error:
            raise PrepareError(f"cannot read claim {claim}: {error}") from error
        if obj.uid != claim.uid:
            raise PrepareError(
                f"claim {claim.namespace}/{claim.name} now has uid {obj.uid}, not {claim.uid}: "
                "it was deleted and created again"
            )
        gpus = allocated_gpus(obj, self.node_name, self.facts)
        devices = container_devices(gpus)
        try:
            record = encode_allocation_record(devices)
        except ProtocolError as error:
            raise PrepareError(f"claim {claim}: {error}") from error
        pod_uid, container = await self._user(obj, claim)
        plan = plan_container(
            ContainerSlot(position=0, container=container, devices=devices),
            pod_uid=pod_uid,
            namespace=claim.namespace,
            cache_id=claim.uid,
            settings=self.settings,
            files=await asyncio.to_thread(host_files, self.settings),
        )
        spec_file = cdi.spec_path(self.cdi_dir, claim.uid)
        envs = {**plan.envs, **dict(self.settings.toolkit_env)}  # as Allocate
        await asyncio.to_thread(prepare_host, plan, self.settings)
        await asyncio.to_thread(write_whole, Path(plan.cache_dir) / RECORD_FILE_NAME, record)
        await asyncio.to_thread(cdi.write_spec, spec_file, claim.uid, envs, plan.mounts)
        prepared = PreparedClaim(
            namespace=claim.namespace,
            name=claim.name,
            uid=claim.uid,
            devices=tuple(
                PreparedDevice(
                    requests=(g.request,), pool=self.node_name, device=g.device, share_id=g.share_id
                )
                for g in gpus
            ),
            cdi_ids=(cdi.device_id(claim.uid),),
            spec_file=str(spec_file),
            cache_dir=str(plan.cache_dir),
        )
        await asyncio.to_thread(self.checkpoint.put, prepared)
        log.info(
            "prepared claim %s: %s",
            claim,
            ", ".join(f"{g.device} {g.memory_mib} MiB {g.cores}% cores" for g in gpus),
        )
        return prepared

    async def _user(self, claim_obj: ClaimView, claim: ClaimKey) -> tuple[str, ContainerView]:
        """The pod uid and container the claim's folder is named after; labels the pod."""
        pods = claim_obj.reserved_for
        if not pods:
            raise PrepareError(f"claim {claim} is not reserved for any pod (status.reservedFor)")
        name, uid = pods[0]
        try:
            state = read_pod_state(await self.kube.get_pod(claim.namespace, name))
        except KubeError as error:
            raise PrepareError(f"claim {claim}: cannot read its pod {name}: {error}") from error
        except PodSpecError as error:
            raise PrepareError(f"claim {claim}: the pod's {error}") from error
        pod = state.pod
        if pod.uid != uid:
            raise PrepareError(f"claim {claim}: pod {claim.namespace}/{name} is not uid {uid}")
        users = {use.container for use in state.claims if use.claim == claim.name}
        container = next((c for c in pod.all_containers if c.name in users), None)
        if container is None:
            # Referenced by the pod but by no container: nothing will load libvgpu with it.
            container = ContainerView(name=f"claim-{claim.name}")
        if pod.labels.get(LABEL_VGPU_NODE) != self.node_name:
            try:
                await self.kube.patch_pod(
                    claim.namespace, name, pod_labels_patch({LABEL_VGPU_NODE: self.node_name})
                )
            except KubeError as error:
                log.warning(
                    "pod %s/%s not labelled for the vGPU monitor (its usage is not exported): %s",
                    claim.namespace,
                    name,
                    error,
                )
        return uid, container

    async def unprepare(self, uid: str) -> None:
        """Remove a claim's CDI spec, folder and checkpoint entry; an unknown uid is done."""
        async with self._lock:
            done = self.checkpoint.claims.get(uid)
            if done is None:
                return
            await asyncio.to_thread(Path(done.spec_file).unlink, missing_ok=True)
            await asyncio.to_thread(shutil.rmtree, done.cache_dir, ignore_errors=True)
            await asyncio.to_thread(self.checkpoint.remove, uid)
            log.info("unprepared claim %s/%s (%s)", done.namespace, done.name, uid)
