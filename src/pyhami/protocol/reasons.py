"""Filter failure reasons: HAMi's reason words with how many were refused for each.

`format_reasons` is HAMi's `GenReason`: `"<count>/<total> <Reason>"` per reason, sorted as
whole strings byte-wise (`"10/12 X"` before `"2/12 Y"`), joined by `", "`. `parse_reasons`
is `ParseReason`: split on `", "`, scan each part like `fmt.Sscanf("%d/%d %s")`, drop the
parts that do not scan (such as a bare `NodeInsufficientDevice`).
"""

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from pyhami.protocol.goparse import GoNumError, parse_int

_K = TypeVar("_K", bound=str)
# Sscanf: %d skips blanks (not newlines), takes a sign and digits; '/' must follow at once;
# the format's space matches any run of blanks, and %s reads the next non-blank word.
_ENTRY = re.compile(r"[^\S\n]*([+-]?\d+)/[^\S\n]*([+-]?\d+)[^\S\n]*(\S+)", re.ASCII)


class Reason(enum.StrEnum):
    """HAMi's reason words (pkg/device/common/common.go:25-44) that pyhami gives, odd casing
    and all (its NodeUnfitPod, NodeFitPod, ModeNotFit, CardNotFoundCustomFilterRule are not)."""

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
    CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
    NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
    RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"


@dataclass(frozen=True, slots=True)
class ReasonCount:
    """One `"<count>/<total> <reason>"` entry."""

    reason: str
    count: int
    total: int


def format_reasons(counts: Mapping[_K, int], total: int) -> str:
    """HAMi `GenReason`: `counts` maps reason → how many cards failed for it, of `total`."""
    return ", ".join(sorted(f"{count}/{total} {reason}" for reason, count in counts.items()))


def parse_reasons(text: str) -> tuple[ReasonCount, ...]:
    """HAMi `ParseReason`: the entries that scan, in order; never raises."""
    entries = []
    for part in text.split(", "):
        match = _ENTRY.match(part)
        if match is None:
            continue
        try:
            count, total = parse_int(match.group(1)), parse_int(match.group(2))
        except GoNumError:
            continue  # Sscanf fails on an int64 overflow, so HAMi drops the part
        entries.append(ReasonCount(reason=match.group(3), count=count, total=total))
    return tuple(entries)
