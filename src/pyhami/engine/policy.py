"""Scores and orderings: which card and which node a policy prefers.

Scores are IEEE float32 like HAMi's Go `float32`: every operation is rounded to float32
(a float64 result of one operation on float32 inputs, rounded once more, is exactly the float32
result). Cards are sorted so that Fit's backwards walk meets the preferred card first.
"""

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from pyhami.devices.vendor import PERCENT_UNSET, CardState
from pyhami.model import ContainerDeviceRequest
from pyhami.protocol import DeviceScoringWeights, GpuPolicy
from pyhami.protocol.arithmetic import percent_of

SCORE_WEIGHT = 10.0  # util.Weight

_F32 = struct.Struct("f")


def f32(value: float) -> float:
    """Round to the nearest float32."""
    return float(_F32.unpack(_F32.pack(value))[0])


def _ratio(numerator: float, denominator: float) -> float:
    return f32(f32(numerator) / f32(denominator))


def device_score(
    card: CardState, requests: Iterable[ContainerDeviceRequest], weights: DeviceScoringWeights
) -> float:
    """HAMi `ComputeScore`: predicted load of the card with this container's requests.

    A request counts only when its type equals the card type exactly, so for real cards
    (`NVIDIA-<model>` vs the request type `NVIDIA`) only the existing usage counts, as in HAMi.
    """
    if card.count == 0 or card.totalcore == 0 or card.totalmem == 0:
        return 0.0
    slots = cores = mem = 0
    for request in requests:
        if request.type != card.type:
            continue
        slots += 1
        cores += request.coresreq
        if request.mem_percentage_req not in (0, PERCENT_UNSET):
            mem += percent_of(card.totalmem, request.mem_percentage_req, wide_product=True)
        else:
            mem += request.memreq
    slot_term = _ratio(weights.slot * (slots + card.used), card.count)
    core_term = _ratio(weights.core * (cores + card.usedcores), card.totalcore)
    mem_term = _ratio(weights.memory * (mem + card.usedmem), card.totalmem)
    return f32(SCORE_WEIGHT * f32(f32(slot_term + core_term) + mem_term))


def node_score(
    *, used: int, count: int, usedcores: int, totalcore: int, usedmem: int, totalmem: int
) -> float:
    """HAMi `ComputeDefaultScore` from a node's sums: its existing load, 0 when any total is 0."""
    if count == 0 or totalcore == 0 or totalmem == 0:
        return 0.0
    load = f32(_ratio(used, count) + _ratio(usedcores, totalcore))
    return f32(SCORE_WEIGHT * f32(load + _ratio(usedmem, totalmem)))


C = TypeVar("C", bound=CardState)
CardSortKey = Callable[[float, CardState], tuple[float, ...]]


def card_order(policy: str, numa_bind: bool) -> CardSortKey:
    """The sort key (ascending = tried last) for a GPU policy string."""
    if "," in policy or policy == GpuPolicy.NUMA:
        chain: list[str] = []
        for item in policy.split(","):
            token = item.strip()
            sort_keys = (GpuPolicy.BINPACK, GpuPolicy.SPREAD, GpuPolicy.NUMA)
            if token in sort_keys and token not in chain:
                chain.append(token)
        if not chain:
            chain = [GpuPolicy.SPREAD]
        if numa_bind and chain[0] != GpuPolicy.NUMA:
            chain = [GpuPolicy.NUMA, *(t for t in chain if t != GpuPolicy.NUMA)]

        def chained(score: float, card: CardState) -> tuple[float, ...]:
            parts: list[float] = []
            for token in chain:
                if token == GpuPolicy.BINPACK:
                    parts.append(score)
                elif token == GpuPolicy.SPREAD:
                    parts.append(-score)
                else:
                    parts.append(card.numa)
            parts.append(card.index)
            return tuple(parts)

        return chained
    if policy == GpuPolicy.MUTEX:
        return lambda score, card: (-card.used, card.numa)
    if numa_bind:
        if policy == GpuPolicy.BINPACK:
            return lambda score, card: (-card.numa, score)
        return lambda score, card: (card.numa, -score)
    if policy == GpuPolicy.BINPACK:
        return lambda score, card: (score, card.numa)
    return lambda score, card: (-score, card.numa)


def sort_cards(
    cards: Sequence[C],
    requests: Sequence[ContainerDeviceRequest],
    weights: DeviceScoringWeights,
    key: CardSortKey,
) -> list[C]:
    """The cards in policy order, stably sorted.

    Go's `sort.Sort` is a stable insertion sort for up to 12 elements, so this matches HAMi
    exactly there; beyond 12 cards Go's pdqsort orders ties in a way only a port of it would
    reproduce, and here ties simply keep their previous order.
    """
    keyed = [(key(device_score(card, requests, weights), card), n) for n, card in enumerate(cards)]
    keyed.sort()
    return [cards[n] for _, n in keyed]
