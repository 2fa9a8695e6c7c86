"""HAMi's NVIDIA `Fit`: which cards of one node one container request gets.

The cards arrive sorted by the GPU policy and are walked **from the end**, so the last card is
the most preferred. The check order and reason words are HAMi's, because the reason string a
node gets is part of the filter answer.
"""

from collections.abc import Collection, Sequence

from pyhami.devices.inventory import PairScores
from pyhami.devices.nvidia.mig import can_place_all
from pyhami.devices.nvidia.topology import best_combination, worst_single
from pyhami.devices.reasons import CardCheck
from pyhami.devices.selectors import CardSelectors
from pyhami.devices.vendor import (
    REASON_BY_WORD,
    WHOLE_CARD_CORES,
    CardState,
    FitOutcome,
    FitPolicy,
    QuotaCheck,
    fixed_memory,
    resolve_memory,
)
from pyhami.model import ContainerDevice, ContainerDeviceRequest
from pyhami.protocol import NVIDIA_VENDOR, DeviceMode, Reason

MIG_MODE = DeviceMode.MIG.value

# The per-card loop counts plain words: reading an enum member and hashing it (Enum's
# __hash__ is Python code) costs several times more, per card.
_ALLOCATED_CARDS_INSUFFICIENT_REQUEST = Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST.value
_CARD_COMPUTE_UNITS_EXHAUSTED = Reason.CARD_COMPUTE_UNITS_EXHAUSTED.value
_CARD_CORDONED = Reason.CARD_CORDONED.value
_CARD_INSUFFICIENT_CORE = Reason.CARD_INSUFFICIENT_CORE.value
_CARD_INSUFFICIENT_MEMORY = Reason.CARD_INSUFFICIENT_MEMORY.value
_CARD_MIG_TOPOLOGY_INFEASIBLE = Reason.CARD_MIG_TOPOLOGY_INFEASIBLE.value
_CARD_NOT_HEALTH = Reason.CARD_NOT_HEALTH.value
_CARD_TIME_SLICING_EXHAUSTED = Reason.CARD_TIME_SLICING_EXHAUSTED.value
_CARD_TYPE_MISMATCH = Reason.CARD_TYPE_MISMATCH.value
_CARD_UUID_MISMATCH = Reason.CARD_UUID_MISMATCH.value
_EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT.value
_NUMA_NOT_FIT = Reason.NUMA_NOT_FIT.value
_RESOURCE_QUOTA_NOT_FIT = Reason.RESOURCE_QUOTA_NOT_FIT.value


def fit(
    cards: Sequence[CardState],
    request: ContainerDeviceRequest,
    *,
    selectors: CardSelectors,
    policy: FitPolicy,
    cordoned: Collection[str] = frozenset(),
    pair_scores: PairScores | None = None,
    quota_ok: QuotaCheck | None = None,
    trace: list[CardCheck] | None = None,
    container: int = 0,
) -> FitOutcome:
    """Fit one container's request onto `cards` (sorted; the last is tried first).

    This loop runs for every card of every candidate node when nothing fits, so it reads
    each card once and keeps the per-request work outside.
    """
    nums = origin = request.nums
    # HAMi clamps the cores to 100 at step 8, before any check that reads them, and the clamp
    # sticks; so every card that gets that far sees the clamped value: clamp once, here.
    coresreq = min(request.coresreq, WHOLE_CARD_CORES)
    exclusive = coresreq == WHOLE_CARD_CORES
    zero_cores = coresreq == 0
    vendor = request.type
    type_matches = vendor == NVIDIA_VENDOR
    numa_enforced = type_matches and selectors.numa_bind
    filters_types = selectors.filters_types
    filters_uuids = selectors.filters_uuids
    need_topology = policy.need_topology
    is_mutex = policy.is_mutex
    fixed = fixed_memory(request)
    memreq = last_total = -1
    prevnuma = -1
    # (card, memory, cores) per gathered card; ContainerDevices are built only for an answer.
    taken: list[tuple[CardState, int, int]] = []
    reasons: dict[str, int] = {}
    i = len(cards) - 1
    while i >= 0:
        card = cards[i]
        i -= 1
        reason: str | None = None
        if not card.health:
            reason = _CARD_NOT_HEALTH
        elif cordoned and card.id in cordoned:
            reason = _CARD_CORDONED
        elif not type_matches or (filters_types and not selectors.type_ok(card.type, card.mode)):
            reason = _CARD_TYPE_MISMATCH
        if reason is None and numa_enforced and prevnuma != card.numa:
            # A NUMA change discards the run gathered so far, before any capacity check.
            if nums != origin:
                reasons[_NUMA_NOT_FIT] = reasons.get(_NUMA_NOT_FIT, 0) + len(taken)
            nums = origin
            prevnuma = card.numa
            taken = []
        if reason is None:
            used = card.used
            if filters_uuids and not selectors.uuid_ok(card.id):
                reason = _CARD_UUID_MISMATCH
            elif card.count <= used:
                reason = _CARD_TIME_SLICING_EXHAUSTED
            elif is_mutex and used > 0:
                reason = _EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                totalmem = card.totalmem
                if fixed is not None:
                    memreq = fixed
                elif totalmem != last_total:  # cards of a node are mostly alike
                    memreq = resolve_memory(request, totalmem)
                    last_total = totalmem
                totalcore = card.totalcore
                usedcores = card.usedcores
                if quota_ok is not None and not quota_ok(
                    _devices([*taken, (card, memreq, coresreq)], vendor)
                ):
                    reason = _RESOURCE_QUOTA_NOT_FIT
                elif totalmem - card.usedmem < memreq:
                    reason = _CARD_INSUFFICIENT_MEMORY
                elif totalcore - usedcores < coresreq:
                    reason = _CARD_INSUFFICIENT_CORE
                elif exclusive and totalcore == WHOLE_CARD_CORES and used > 0:
                    reason = _EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                elif zero_cores and totalcore != 0 and usedcores == totalcore:
                    reason = _CARD_COMPUTE_UNITS_EXHAUSTED
                elif card.mode == MIG_MODE and not can_place_all(
                    card.mig_profiles,
                    card.mig_in_use,
                    (mem for other, mem, _ in taken if other.id == card.id),
                    memreq,
                ):
                    reason = _CARD_MIG_TOPOLOGY_INFEASIBLE
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + 1
            if trace is not None:
                trace.append(CardCheck(card.id, card.index, REASON_BY_WORD[reason], container))
            continue
        if nums > 0:
            if not need_topology:
                nums -= 1
            taken.append((card, memreq, coresreq))
            if trace is not None:
                trace.append(CardCheck(card.id, card.index, None, container))
        if nums == 0 and not need_topology:
            return FitOutcome(True, _devices(taken, vendor), reasons, len(cards))
        if card.mode == MIG_MODE:
            i += 1  # a MIG card can host several instances of one request: look at it again
    if need_topology and len(taken) >= origin:
        if len(taken) > origin:
            uuids = [entry[0].id for entry in taken]
            scores = pair_scores or {}
            if origin == 1:
                taken = [worst_single(taken, uuids, scores)]
            else:
                taken = best_combination(taken, uuids, scores, origin)
        return FitOutcome(True, _devices(taken, vendor), reasons, len(cards))
    if taken:
        reasons[_ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(taken)
    return FitOutcome(False, (), reasons, len(cards))


def _devices(
    taken: Sequence[tuple[CardState, int, int]], vendor: str
) -> tuple[ContainerDevice, ...]:
    return tuple(
        ContainerDevice(card.id, vendor, memory, cores, card.index) for card, memory, cores in taken
    )
