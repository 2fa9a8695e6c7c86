"""What a node offers to the scheduler: its registered cards, their pair scores, cordoned cards."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pyhami.model import DeviceInfo

# uuid -> other uuid -> score (`hami.io/node-nvidia-score`), read in one direction.
PairScores = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """One node's devices as registered, plus the node-level facts Fit reads."""

    devices: tuple[DeviceInfo, ...]
    # Empty without topology scoring.
    pair_scores: PairScores = field(default_factory=lambda: MappingProxyType({}))
    # UUIDs listed in `hami.io/device-cordon`: no new allocations there.
    cordoned: frozenset[str] = frozenset()
