"""HAMi's NVIDIA `Fit`: which cards of one node one container request gets (nvidia-fit-score.md §5).

The cards arrive sorted by the GPU policy and are walked **from the end**, so the last card is
the most preferred. The check order and reason words are HAMi's, because the reason string a
node gets is part of the filter answer.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pyhami.devices.nvidia.mig import can_place_all
from pyhami.devices.nvidia.request import NVIDIA, PERCENT_UNSET
from pyhami.devices.nvidia.selectors import CardSelectors
from pyhami.devices.nvidia.topology import PairScores, best_combination, worst_single
from pyhami.devices.reasons import CardCheck, Reason
from pyhami.model import ContainerDevice, ContainerDeviceRequest, MigPlacement, MigProfile

MIG_MODE = "mig"
HAMI_CORE_MODE = "hami-core"
WHOLE_CARD_CORES = 100


class CardState(Protocol):
    """A card's capacity and current usage, as Fit reads it (HAMi `DeviceUsage`)."""

    @property
    def id(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def used(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def usedmem(self) -> int: ...
    @property
    def totalmem(self) -> int: ...
    @property
    def usedcores(self) -> int: ...
    @property
    def totalcore(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def numa(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def health(self) -> bool: ...
    @property
    def mig_profiles(self) -> tuple[MigProfile, ...]: ...
    @property
    def mig_in_use(self) -> Sequence[MigPlacement]: ...


# Given the devices this container would hold (the gathered ones plus the candidate card),
# does the pod still fit its namespace quota? None: the namespace has no quota.
QuotaCheck = Callable[[tuple[ContainerDevice, ...]], bool]


@dataclass(frozen=True, slots=True)
class FitPolicy:
    """The GPU-policy flags Fit reads (`topology-aware` and `mutex` are filters, not sorts)."""

    need_topology: bool = False
    is_mutex: bool = False


@dataclass(frozen=True, slots=True)
class FitOutcome:
    """Fit's answer: the chosen devices (or the partial last run) and the per-reason counts."""

    ok: bool
    devices: tuple[ContainerDevice, ...]
    reasons: Mapping[Reason, int]
    total: int  # the number of cards considered: the denominator of the reason string


def _int32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def _quot(a: int, b: int) -> int:
    """Go's integer division: truncation toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def resolve_memory(request: ContainerDeviceRequest, totalmem: int) -> int:
    """The MiB a request books on a card: absolute, else a percentage of this card (int32)."""
    memreq = request.memreq if request.memreq > 0 else 0
    if request.mem_percentage_req != PERCENT_UNSET and request.memreq == 0:
        memreq = _quot(_int32(totalmem * request.mem_percentage_req), 100)
    return memreq


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
    """Fit one container's request onto `cards` (sorted; the last is tried first)."""
    nums = origin = request.nums
    coresreq = request.coresreq
    type_matches = request.type == NVIDIA
    numa_enforced = type_matches and selectors.numa_bind
    filters_types = selectors.filters_types
    filters_uuids = selectors.filters_uuids
    prevnuma = -1
    taken: list[ContainerDevice] = []
    reasons: dict[Reason, int] = {}

    def miss(card: CardState, reason: Reason) -> None:
        reasons[reason] = reasons.get(reason, 0) + 1
        if trace is not None:
            trace.append(CardCheck(card.id, card.index, reason, container))

    i = len(cards) - 1
    while i >= 0:
        card = cards[i]
        i -= 1
        if not card.health:
            miss(card, Reason.CARD_NOT_HEALTH)
            continue
        if cordoned and card.id in cordoned:
            miss(card, Reason.CARD_CORDONED)
            continue
        if not type_matches or (filters_types and not selectors.type_ok(card.type, card.mode)):
            miss(card, Reason.CARD_TYPE_MISMATCH)
            continue
        if numa_enforced and prevnuma != card.numa:
            # A NUMA change discards the run gathered so far, before any capacity check.
            if nums != origin:
                reasons[Reason.NUMA_NOT_FIT] = reasons.get(Reason.NUMA_NOT_FIT, 0) + len(taken)
            nums = origin
            prevnuma = card.numa
            taken = []
        if filters_uuids and not selectors.uuid_ok(card.id):
            miss(card, Reason.CARD_UUID_MISMATCH)
            continue
        if card.count <= card.used:
            miss(card, Reason.CARD_TIME_SLICING_EXHAUSTED)
            continue
        if policy.is_mutex and card.used > 0:
            miss(card, Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
            continue
        # The clamp sticks for the remaining cards and for the booked cores (HAMi logs it).
        coresreq = min(coresreq, WHOLE_CARD_CORES)
        memreq = resolve_memory(request, card.totalmem)
        if quota_ok is not None and not quota_ok(
            (*taken, ContainerDevice(card.id, request.type, memreq, coresreq, card.index))
        ):
            miss(card, Reason.RESOURCE_QUOTA_NOT_FIT)
            continue
        if card.totalmem - card.usedmem < memreq:
            miss(card, Reason.CARD_INSUFFICIENT_MEMORY)
            continue
        if card.totalcore - card.usedcores < coresreq:
            miss(card, Reason.CARD_INSUFFICIENT_CORE)
            continue
        if card.totalcore == WHOLE_CARD_CORES and coresreq == WHOLE_CARD_CORES and card.used > 0:
            miss(card, Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
            continue
        if card.totalcore != 0 and card.usedcores == card.totalcore and coresreq == 0:
            miss(card, Reason.CARD_COMPUTE_UNITS_EXHAUSTED)
            continue
        is_mig = card.mode == MIG_MODE
        if is_mig and not can_place_all(
            card.mig_profiles,
            card.mig_in_use,
            (t.usedmem for t in taken if t.uuid == card.id),
            memreq,
        ):
            miss(card, Reason.CARD_MIG_TOPOLOGY_INFEASIBLE)
            continue
        if nums > 0:
            if not policy.need_topology:
                nums -= 1
            taken.append(ContainerDevice(card.id, request.type, memreq, coresreq, card.index))
            if trace is not None:
                trace.append(CardCheck(card.id, card.index, None, container))
        if nums == 0 and not policy.need_topology:
            return FitOutcome(True, tuple(taken), reasons, len(cards))
        if is_mig:
            i += 1  # a MIG card can host several instances of one request: look at it again
    if policy.need_topology and len(taken) >= origin:
        if len(taken) > origin:
            uuids = [t.uuid for t in taken]
            scores = pair_scores or {}
            if origin == 1:
                taken = [worst_single(taken, uuids, scores)]
            else:
                taken = best_combination(taken, uuids, scores, origin)
        return FitOutcome(True, tuple(taken), reasons, len(cards))
    if taken:
        reasons[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(taken)
    return FitOutcome(False, tuple(taken), reasons, len(cards))
