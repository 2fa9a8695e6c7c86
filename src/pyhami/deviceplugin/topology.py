"""GPU pair scores for `hami.io/node-nvidia-score`, from NVML link facts.

Score of an ordered pair = the PCIe common-ancestor score (same board 60 ... across CPUs 10)
+ 100 per NVLink between them. Direct NVLinks are counted by matching each active link's far-end
bus id to the peer; without direct links, two cards that both reach NVSwitches count the smaller
number of switch links. When the two directions disagree the pair scores 0 and is reported as
asymmetric (the plugin turns that into a Node warning event).
"""

from collections.abc import Sequence
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
class LinkFacts:
    """What NVML says about one card's connections."""

    gpu: Gpu
    nvlinks: tuple[NvLink, ...]


@dataclass(frozen=True, slots=True)
class PairScores:
    scores: tuple[DevicePairScore, ...]
    asymmetric: tuple[tuple[str, str], ...]  # (uuid, uuid) pairs whose directions disagree


def _direct(source: LinkFacts, target: LinkFacts) -> int:
    return sum(
        1
        for link in source.nvlinks
        if not link.remote_is_switch and link.remote_bus_id == target.gpu.bus_id
    )


def _switch_links(facts: LinkFacts) -> int:
    return sum(1 for link in facts.nvlinks if link.remote_is_switch)


def _nvlinks(source: LinkFacts, target: LinkFacts) -> int:
    direct = _direct(source, target)
    if direct == 0 and source.nvlinks and _switch_links(source) and _switch_links(target):
        return min(_switch_links(source), _switch_links(target))
    return direct


def pair_scores(
    facts: Sequence[LinkFacts], levels: dict[tuple[int, int], TopologyLevel]
) -> PairScores:
    """Scores for every ordered pair; `levels[(i, j)]` is the common ancestor of positions i, j."""
    rows: list[DevicePairScore] = []
    asymmetric: list[tuple[str, str]] = []
    for i, source in enumerate(facts):
        row: dict[str, int] = {}
        for j, target in enumerate(facts):
            if i == j:
                continue
            forward = (levels[(i, j)], _nvlinks(source, target))
            backward = (levels[(j, i)], _nvlinks(target, source))
            if forward != backward:
                row[target.gpu.uuid] = 0
                if i < j:
                    asymmetric.append((source.gpu.uuid, target.gpu.uuid))
                continue
            level, links = forward
            row[target.gpu.uuid] = LEVEL_SCORE[level] + NVLINK_SCORE * links
        rows.append(DevicePairScore(uuid=source.gpu.uuid, scores=dict(sorted(row.items()))))
    return PairScores(scores=tuple(rows), asymmetric=tuple(asymmetric))


def read_pair_scores(nvml: Nvml, gpus: Sequence[Gpu]) -> PairScores:
    """Ask NVML for links and common ancestors, then score (raises NvmlError)."""
    facts = [LinkFacts(gpu=gpu, nvlinks=nvml.nvlinks(gpu.index)) for gpu in gpus]
    levels = {
        (i, j): nvml.topology_level(a.index, b.index)
        for i, a in enumerate(gpus)
        for j, b in enumerate(gpus)
        if i != j
    }
    return pair_scores(facts, levels)
