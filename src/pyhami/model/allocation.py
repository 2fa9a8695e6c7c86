"""What the scheduler assigned: one card to one container, per container, per vendor."""

from dataclasses import dataclass

from pyhami.model.device import MigPlacement


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One card (or a share of it) assigned to one container (HAMi `ContainerDevice`).

    Only uuid, type, usedmem and usedcores travel in annotations; idx and slots are
    in-memory bookkeeping (slots counts how many containers share the entry after
    init-container collapsing).
    """

    uuid: str
    type: str
    usedmem: int
    usedcores: int
    idx: int = 0
    slots: int = 0


ContainerDevices = tuple[ContainerDevice, ...]
# One entry per container, init containers first (index = container position).
PodSingleDevice = tuple[ContainerDevices, ...]


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One dynamic-MIG reservation (`hami.io/vgpu-mig-allocations[]`)."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    # Runtime identity, filled by the device plugin once the instance exists (all or none).
    mig_uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def runtime_ready(self) -> bool:
        return (
            self.mig_uuid != ""
            and self.gpu_instance_id is not None
            and self.compute_instance_id is not None
        )
