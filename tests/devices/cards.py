"""A card builder for Fit tests: one line states the hardware and its usage."""

from collections.abc import Sequence
from dataclasses import dataclass

from pyhami.model import MigPlacement, MigProfile


@dataclass(frozen=True, slots=True)
class Card:
    id: str
    index: int = 0
    used: int = 0
    count: int = 10
    usedmem: int = 0
    totalmem: int = 8000
    usedcores: int = 0
    totalcore: int = 100
    type: str = "NVIDIA"
    numa: int = 0
    mode: str = ""
    health: bool = True
    mig_profiles: tuple[MigProfile, ...] = ()
    mig_in_use: Sequence[MigPlacement] = ()


def gpu(uuid: str, **fields: object) -> Card:
    return Card(uuid, **fields)  # type: ignore[arg-type]


ONE_G = MigProfile(
    "1g.10gb", 9856, 15, 1, tuple(MigPlacement(start, 1) for start in range(7))
)
THREE_G = MigProfile("3g.40gb", 40192, 43, 3, (MigPlacement(0, 4), MigPlacement(4, 4)))
SEVEN_G = MigProfile("7g.80gb", 80000, 100, 7, (MigPlacement(0, 8),))
A100_PROFILES = (ONE_G, THREE_G, SEVEN_G)
