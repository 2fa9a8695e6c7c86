"""Topology-aware choice among the cards that passed Fit.

Pair scores are directional (`scores[a][b]` is read for the pair whose earlier member is `a`);
a missing score counts as 0. HAMi panics on a candidate missing from the node's score table;
here it simply has no scores.
"""

from collections.abc import Sequence
from itertools import combinations
from typing import TypeVar

from pyhami.devices.inventory import PairScores

T = TypeVar("T")


def worst_single(candidates: Sequence[T], uuids: Sequence[str], scores: PairScores) -> T:
    """The candidate least connected to the others (first one on ties), keeping good links free."""
    best_index = 0
    best_total: int | None = None
    for i, uuid in enumerate(uuids):
        row = scores.get(uuid, {})
        total = sum(row.get(other, 0) for j, other in enumerate(uuids) if j != i)
        if best_total is None or total < best_total:
            best_index, best_total = i, total
    return candidates[best_index]


def best_combination(
    candidates: Sequence[T], uuids: Sequence[str], scores: PairScores, size: int
) -> list[T]:
    """The `size` candidates with the highest summed pair score; the first maximum wins.

    Scores may be negative (a hand-written or third-party score table): the best combination
    is taken whatever its sign, so a fitting request always gets its `size` cards.
    """
    best: tuple[int, ...] = ()
    best_score: int | None = None
    for combo in combinations(range(len(uuids)), size):
        score = 0
        for a_pos, a in enumerate(combo):
            row = scores.get(uuids[a], {})
            for b in combo[a_pos + 1 :]:
                score += row.get(uuids[b], 0)
        if best_score is None or score > best_score:
            best, best_score = combo, score
    return [candidates[i] for i in best]
