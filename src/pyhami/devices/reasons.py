"""Why a card or a node was not chosen: codes whose values are HAMi's wire words.

Card reasons are counted per node and rendered as HAMi's `"<n>/<cards> <Reason>"` list only when
someone reads them; the odd casing (`CardUuidMismatch`) is HAMi's (common.go:25-44).
"""

import enum
from dataclasses import dataclass


class Reason(enum.StrEnum):
    CARD_TYPE_MISMATCH = "CardTypeMismatch"
    CARD_UUID_MISMATCH = "CardUuidMismatch"
    CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
    CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
    CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
    CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
    CARD_NOT_HEALTH = "CardNotHealth"
    CARD_CORDONED = "CardCordoned"
    NUMA_NOT_FIT = "NumaNotFit"
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
    CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
    CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
    RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"

    # Enum's own __hash__ is Python code and runs for every card counted; the value's hash
    # is the same for equal members and also lets a plain word find its Reason in a dict.
    __hash__ = str.__hash__


@dataclass(frozen=True, slots=True)
class CardCheck:
    """One visit of one card during Fit: the reason it was passed over, or None when taken."""

    uuid: str
    index: int
    reason: Reason | None
    container: int = 0  # position of the container in the pod, init containers first
