"""GPU pair scores for `hami.io/node-nvidia-score`, from NVML link facts.

Score of an ordered pair = the PCIe common-ancestor score (same board 60 ... across CPUs 10)
+ 100 per NVLink between them. Direct NVLinks are counted by matching each active link's far-end
bus id to the peer; without direct links, two cards that both reach NVSwitches count the smaller
number of switch links. When the two directions disagree the pair scores 0 and is reported as
asymmetric (the plugin turns that into a Node warning event).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyhami.deviceplugin.inventory import Gpu
from pyhami.model import DevicePairScore
from pyhami.nvml import NvLink, Nvml, TopologyLevel

LEVEL_SCORE = {
    TopologyLevel.SYSTEM: 10,
    TopologyLevel.NODE: 20,
    TopologyLevel.HOSTBRIDGE: 30,
    TopologyLevel.MULTIPLE: 40,
    TopologyLevel.SINGLE: 50,
    TopologyLevel.INTERNAL: 60,
}
NVLINK_SCORE = 100


@dataclass(frozen=True, slots=True)
class PairScores:
    scores: tuple[DevicePairScore, ...]
    asymmetric: tuple[tuple[str, str], ...]  # (uuid, uuid) pairs whose directions disagree


def _nvlinks(links: Mapping[str, tuple[NvLink, ...]], source: Gpu, target: Gpu) -> int:
    """NVLinks from `source` to `target`: the direct ones, or without any, the smaller number of
    NVSwitch links of the two (0 unless both reach a switch)."""
    direct = sum(
        1
        for link in links[source.uuid]
        if not link.remote_is_switch and link.remote_bus_id == target.bus_id
    )
    switched = (sum(link.remote_is_switch for link in links[gpu.uuid]) for gpu in (source, target))
    return direct or min(switched)


def read_pair_scores(nvml: Nvml, gpus: Sequence[Gpu]) -> PairScores:
    """Ask NVML for links and common ancestors, then score every ordered pair (raises NvmlError)."""
    links = {gpu.uuid: nvml.nvlinks(gpu.index) for gpu in gpus}
    # What each direction of a pair says: (common ancestor, NVLinks).
    facts = {
        (a.uuid, b.uuid): (nvml.topology_level(a.index, b.index), _nvlinks(links, a, b))
        for a in gpus
        for b in gpus
        if a.uuid != b.uuid
    }

    def score(pair: tuple[str, str]) -> int:
        forward = facts[pair]
        if forward != facts[pair[::-1]]:
            return 0
        level, nvlinks = forward
        return LEVEL_SCORE[level] + NVLINK_SCORE * nvlinks

    rows = tuple(
        DevicePairScore(gpu.uuid, {b: score((a, b)) for a, b in sorted(facts) if a == gpu.uuid})
        for gpu in gpus
    )
    asymmetric = tuple(
        (a.uuid, b.uuid)
        for i, a in enumerate(gpus)
        for b in gpus[i + 1 :]
        if facts[a.uuid, b.uuid] != facts[b.uuid, a.uuid]
    )
    return PairScores(scores=rows, asymmetric=asymmetric)
