"""Dynamic MIG (`operatingmode: mig`) on NVML: the MIG manager.

The scheduler reserves an exact (GPU, profile, placement) in `hami.io/vgpu-mig-allocations`;
this module publishes each GPU's profiles, creates the reserved GPU instance (GI) and compute
instance (CI) at Allocate, destroys instances no live pod references, and at start cleans idle
GPUs and adopts the instances live pods still use. Everything here is blocking NVML work, called
from worker threads; one lock per GPU keeps creates and destroys on a card in order.

Deviations from HAMi (docs/hami-compatibility.md), on purpose:
- A profile name resolves to the NVML profile whose own name matches (`1g.20gb` and `1g.10gb+me`
  are distinct profiles of one slice count); HAMi maps every name to its slice count's base
  profile. Only when the driver reports no profile names is HAMi's rule used.
- The replica count kubelet sees equals the published `count` (max InstanceCount); HAMi lists
  deviceSplitCount replicas but publishes the instance count.
- Adoption skips (and logs) an incomplete record and goes on; HAMi stops at the first one.
- Start-up cleaning looks at each GPU the allowlist covers, and only at idle ones that no live
  pod references; HAMi runs it only when every GPU of the node is covered, and then on all.
"""

import logging
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyhami.deviceplugin.inventory import Gpu
from pyhami.devices.config import MigAllowlistEntry
from pyhami.model import MigAllocation, MigPlacement, MigProfile
from pyhami.nvml import (
    GI_PROFILE_ID_COUNT,
    SLICE_PROFILE_IDS,
    GpuInstance,
    GpuInstanceProfile,
    MigDevice,
    Nvml,
    NvmlError,
    NvmlNotSupportedError,
)

log = logging.getLogger(__name__)

# Each GPU's live GPU instances and MIG devices, read once per start-up adoption.
_LiveInstances = dict[int, tuple[tuple[GpuInstance, ...], tuple[MigDevice, ...]]]


class MigError(Exception):
    """A reservation cannot be realised; the message names the GPU, profile and placement."""


@dataclass(frozen=True, slots=True)
class InstanceKey:
    """What identifies a reserved instance: the same key is reused, never created twice."""

    gpu_index: int
    profile: str
    placement: MigPlacement


@dataclass(frozen=True, slots=True)
class Realised:
    """A live GI + CI this manager tracks, with the MIG device UUID CUDA sees."""

    key: InstanceKey
    gpu_instance_id: int
    compute_instance_id: int
    mig_uuid: str


def allowed_profiles(gpu_name: str, allowlist: Sequence[MigAllowlistEntry]) -> tuple[str, ...]:
    """The profiles of the first allowlist entry naming a substring of the GPU's NVML name."""
    for entry in allowlist:
        if any(model in gpu_name for model in entry.models):
            return entry.profiles
    return ()


def slice_count(profile: str) -> int:
    """`3g.40gb` -> 3; MigError for a name without a `<digits>g.` prefix."""
    head, sep, _ = profile.partition("g.")
    if not sep or not head.isdigit() or int(head) == 0:
        raise MigError(f"MIG profile {profile!r} does not start with '<slices>g.'")
    return int(head)


class MigManager:
    """Publication, creation, reuse, destruction and adoption of MIG instances on this node."""

    def __init__(
        self, nvml: Nvml, gpus: Sequence[Gpu], allowlist: Sequence[MigAllowlistEntry]
    ) -> None:
        self._nvml = nvml
        self._gpus = {gpu.index: gpu for gpu in gpus}
        self._by_uuid = {gpu.uuid: gpu for gpu in gpus}
        self._allowed = {gpu.index: allowed_profiles(gpu.name, allowlist) for gpu in gpus}
        self._locks = {gpu.index: threading.Lock() for gpu in gpus}
        self._catalog: dict[int, tuple[GpuInstanceProfile, ...]] = {}
        self._published: dict[int, tuple[MigProfile, ...]] = {}
        self._tracked: dict[InstanceKey, Realised] = {}
        self._state_lock = threading.Lock()
        # Replicas per GPU UUID for kubelet, equal to the published count (filled by `publish`).
        self.capacities: dict[str, int] = {}

    # ----- profiles -----

    def _profiles_of(self, index: int) -> tuple[GpuInstanceProfile, ...]:
        """Every GI profile NVML offers on the card (cached once NVML answers)."""
        cached = self._catalog.get(index)
        if cached is not None:
            return cached
        found = []
        for profile_id in range(GI_PROFILE_ID_COUNT):
            try:
                found.append(self._nvml.gpu_instance_profile(index, profile_id))
            except NvmlNotSupportedError:
                continue
        if found:
            self._catalog[index] = tuple(found)
        return tuple(found)

    def resolve(self, index: int, profile: str) -> GpuInstanceProfile:
        """The NVML GI profile behind an allowlist name on this card."""
        slices = slice_count(profile)
        candidates = [p for p in self._profiles_of(index) if p.slice_count == slices]
        if any(p.name for p in candidates):
            found = [p for p in candidates if p.name == profile]
        else:  # a driver without profile names: HAMi's slice-count rule
            found = [p for p in candidates if p.profile_id == SLICE_PROFILE_IDS.get(slices)]
        if found:
            return found[0]
        offered = ", ".join(p.name or str(p.profile_id) for p in candidates) or "none"
        raise MigError(
            f"GPU {index}: NVML offers no MIG profile {profile!r} "
            f"({slices}-slice profiles here: {offered})"
        )

    def publish(self, gpu: Gpu) -> tuple[MigProfile, ...]:
        """The card's `migProfiles` (register annotation); what NVML cannot describe is left out.

        Profiles and placements do not change while the plugin runs, so once every allowed
        profile is published the answer is kept and later scans ask NVML nothing; a partial
        answer (MIG mode still off, an NVML error) is worked out again next time."""
        cached = self._published.get(gpu.index)
        if cached is not None:
            return cached
        allowed = self._allowed.get(gpu.index, ())
        published: list[MigProfile] = []
        capacity = 0
        for name in allowed:
            try:
                info = self.resolve(gpu.index, name)
                placements = self._nvml.gpu_instance_placements(gpu.index, info.id)
            except (MigError, NvmlError) as error:
                log.warning("GPU %s: MIG profile %s not published: %s", gpu.uuid, name, error)
                continue
            full_sms = max(p.sm_count for p in self._profiles_of(gpu.index))  # cached by resolve
            published.append(
                MigProfile(
                    name=name,
                    memory_mb=info.memory_mib,
                    core=math.ceil(info.sm_count * 100 / full_sms) if full_sms else 0,
                    slice_count=info.slice_count,
                    placements=placements,
                )
            )
            capacity = max(capacity, info.instance_count)
        self.capacities[gpu.uuid] = capacity
        if len(published) == len(allowed):
            self._published[gpu.index] = tuple(published)
        return tuple(published)

    def publish_all(self) -> None:
        """Publish every card once, so `capacities` is filled before kubelet lists devices."""
        for gpu in self._gpus.values():
            self.publish(gpu)

    # ----- allocation -----

    def key(self, allocation: MigAllocation) -> InstanceKey:
        gpu = self._by_uuid.get(allocation.gpu_uuid)
        if gpu is None:
            raise MigError(f"MIG reservation names GPU {allocation.gpu_uuid}, not on this node")
        return InstanceKey(gpu.index, allocation.profile, allocation.placement)

    def known(self, key: InstanceKey) -> Realised | None:
        with self._state_lock:
            return self._tracked.get(key)

    @property
    def tracked(self) -> frozenset[InstanceKey]:
        with self._state_lock:
            return frozenset(self._tracked)

    def realise_all(self, allocations: Sequence[MigAllocation]) -> list[Realised]:
        """Realise every reservation; on a failure release what this call created, then raise."""
        created: list[InstanceKey] = []
        done: list[Realised] = []
        try:
            for allocation in allocations:
                key = self.key(allocation)
                reused = self.known(key)
                if reused is None:
                    reused = self._create(key)
                    created.append(key)
                done.append(reused)
        except (MigError, NvmlError) as error:
            for key in created:
                self.release(key)
            raise MigError(str(error)) from error
        return done

    def _create(self, key: InstanceKey) -> Realised:
        index, wanted = key.gpu_index, key.placement
        with self._locks[index]:
            self._ensure_mig_mode(index)
            info = self.resolve(index, key.profile)
            possible = self._nvml.gpu_instance_placements(index, info.id)
            if wanted not in possible:
                raise MigError(
                    f"GPU {index}: placement start={wanted.start} size={wanted.size} is not one "
                    f"NVML offers for {key.profile} ({[(p.start, p.size) for p in possible]})"
                )
            instance = self._nvml.create_gpu_instance(index, info.id, wanted)
            try:
                ci_profile = SLICE_PROFILE_IDS[info.slice_count]
                device = self._nvml.create_compute_instance(index, instance.id, ci_profile)
            except (NvmlError, KeyError) as error:
                self._destroy_quietly(index, instance.id, None)
                raise MigError(
                    f"GPU {index}: compute instance for {key.profile} at start={wanted.start} "
                    f"failed: {error}"
                ) from error
        realised = Realised(key, instance.id, device.compute_instance_id, device.uuid)
        with self._state_lock:
            self._tracked[key] = realised
        log.info(
            "created MIG %s (GI %d CI %d) for %s",
            device.uuid,
            instance.id,
            device.compute_instance_id,
            key,
        )
        return realised

    def _ensure_mig_mode(self, index: int) -> None:
        mode = self._nvml.mig_mode(index)
        if mode.current and mode.pending:
            return
        if mode.current != mode.pending:
            raise MigError(
                f"GPU {index}: a MIG mode change is pending and needs a GPU reset "
                f"(current={'on' if mode.current else 'off'})"
            )
        self._nvml.set_mig_mode(index, True)
        if not self._nvml.mig_mode(index).current:
            raise MigError(f"GPU {index}: MIG mode enabled but it waits for a GPU reset")

    def release(self, key: InstanceKey) -> None:
        """Destroy the tracked instance (CI then GI) and forget it; errors are logged."""
        with self._state_lock:
            realised = self._tracked.pop(key, None)
        if realised is None:
            return
        with self._locks[key.gpu_index]:
            self._destroy_quietly(
                key.gpu_index, realised.gpu_instance_id, realised.compute_instance_id
            )
        log.info("destroyed MIG %s (%s)", realised.mig_uuid, key)

    def _destroy_quietly(self, index: int, gi_id: int, ci_id: int | None) -> None:
        try:
            if ci_id is not None:
                self._nvml.destroy_compute_instance(index, gi_id, ci_id)
            self._nvml.destroy_gpu_instance(index, gi_id)
        except NvmlError as error:
            log.error("GPU %d: cannot destroy MIG GI %d: %s", index, gi_id, error)

    def reconcile(
        self, referenced: Iterable[InstanceKey], candidates: frozenset[InstanceKey]
    ) -> int:
        """Destroy each key of `candidates` (tracked before pods were listed) not referenced."""
        stale = candidates - set(referenced)
        for key in stale:
            self.release(key)
        return len(stale)

    # ----- startup -----

    def startup(self, active: Sequence[MigAllocation] | None) -> None:
        """Clean idle GPUs, then adopt live instances. `active` None: pods could not be listed."""
        referenced = {a.gpu_uuid for a in active} if active is not None else None
        for gpu in self._gpus.values():
            if not self._allowed[gpu.index] or referenced is None or gpu.uuid in referenced:
                continue
            if not self._busy(gpu):
                with self._locks[gpu.index]:
                    self._clean(gpu)
        live: _LiveInstances = {}
        for allocation in active or ():
            self._adopt(allocation, live)

    def _busy(self, gpu: Gpu) -> bool:
        try:
            if self._nvml.running_processes(gpu.index):
                return True
            if not self._nvml.mig_mode(gpu.index).current:
                return False
            return any(
                self._nvml.mig_device_processes(gpu.index, device.uuid)
                for device in self._nvml.mig_devices(gpu.index)
            )
        except NvmlError as error:
            log.warning("GPU %s: cannot tell whether it is busy, leaving it: %s", gpu.uuid, error)
            return True

    def _clean(self, gpu: Gpu) -> None:
        try:
            self._ensure_mig_mode(gpu.index)
            for device in self._nvml.mig_devices(gpu.index):
                self._nvml.destroy_compute_instance(
                    gpu.index, device.gpu_instance_id, device.compute_instance_id
                )
            for instance in self._nvml.gpu_instances(gpu.index):
                self._nvml.destroy_gpu_instance(gpu.index, instance.id)
        except (MigError, NvmlError) as error:
            log.error("GPU %s: cannot prepare it for dynamic MIG: %s", gpu.uuid, error)

    def _adopt(self, allocation: MigAllocation, live: _LiveInstances) -> None:
        """Track the reservation's instance if NVML still has it; `live` keeps each GPU's
        instances and devices, read once for all the reservations on it."""
        gi_id, ci_id = allocation.gpu_instance_id, allocation.compute_instance_id
        if not allocation.mig_uuid or gi_id is None or ci_id is None:
            log.warning(
                "MIG adoption: reservation of container %d device %d on %s has no runtime "
                "identity yet; skipped",
                allocation.container_index,
                allocation.device_index,
                allocation.gpu_uuid,
            )
            return
        try:
            key = self.key(allocation)
            if key.gpu_index not in live:
                index = key.gpu_index
                live[index] = (self._nvml.gpu_instances(index), self._nvml.mig_devices(index))
            instances, devices = live[key.gpu_index]
        except (MigError, NvmlError) as error:
            log.warning("MIG adoption of %s skipped: %s", allocation.mig_uuid, error)
            return
        gi_live = any(gi.id == gi_id and gi.placement == key.placement for gi in instances)
        device_live = any(
            (d.uuid, d.gpu_instance_id, d.compute_instance_id)
            == (allocation.mig_uuid, gi_id, ci_id)
            for d in devices
        )
        if not (gi_live and device_live):
            log.warning("MIG adoption of %s skipped: the instance is gone", allocation.mig_uuid)
            return
        with self._state_lock:
            self._tracked[key] = Realised(key, gi_id, ci_id, allocation.mig_uuid)
        log.info("adopted MIG %s for %s", allocation.mig_uuid, key)
