"""A card as the scheduler sees it at decision time: capacity plus what is in use."""

from dataclasses import dataclass

from pyhami.model.device import DevicePairScore, MigProfile


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """Snapshot of one card's capacity and usage (HAMi `DeviceUsage`)."""

    id: str
    index: int
    used: int
    count: int
    usedmem: int
    totalmem: int
    usedcores: int
    totalcore: int
    type: str
    numa: int = 0
    mode: str = ""
    health: bool = True
    mig_profiles: tuple[MigProfile, ...] = ()
    pair_score: DevicePairScore | None = None
