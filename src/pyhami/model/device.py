"""A physical card as its node registers it (HAMi `DeviceInfo`)."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """Where a MIG instance sits on the GPU: first memory slice and slice count."""

    start: int
    size: int


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One dynamic-MIG profile a card offers (`migProfiles[]` in the register JSON)."""

    name: str
    memory_mb: int
    core: int
    slice_count: int
    # None mirrors HAMi writing `"placements": null`; an empty tuple is `[]`.
    placements: tuple[MigPlacement, ...] | None = None


@dataclass(frozen=True, slots=True)
class DevicePairScore:
    """Topology score from one card to each other card on the node (`hami.io/node-nvidia-score`)."""

    uuid: str
    scores: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One registered device, in the field order HAMi's `MarshalNodeDevices` writes."""

    id: str
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = ""
    mig_profiles: tuple[MigProfile, ...] = ()
    health: bool = False
    # Accepted by HAMi's decoder but never written by its encoder.
    custom_info: Mapping[str, object] | None = None
    device_vendor: str = ""
