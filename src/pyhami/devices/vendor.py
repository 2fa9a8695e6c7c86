"""The vendor seam: what the engine asks of a device backend, and the card facts it shares.

The engine schedules a pod through one `Vendor`, handed to it in `EngineConfig` by the service
(which builds it from the device configuration at start). The engine never imports a backend:
NVIDIA (`devices.nvidia.vendor`) is one implementation, and a test defines another.

Also here: the share-of-card request arithmetic every HAMi backend uses (a memory amount or a
percentage of each card, cores in percent of one card) and the shapes of Fit's inputs and answer.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from pyhami.devices.inventory import PairScores
from pyhami.devices.reasons import CardCheck
from pyhami.devices.selectors import CardSelectors
from pyhami.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerView,
    MigPlacement,
    MigProfile,
)
from pyhami.protocol import Reason, VendorKeys
from pyhami.protocol.arithmetic import percent_of

PERCENT_UNSET = 101  # HAMi's sentinel: no memory percentage was given
WHOLE_CARD_CORES = 100


class CardState(Protocol):
    """A card's capacity and current usage, as Fit and the scores read it (HAMi `DeviceUsage`)."""

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


# Reason words back to Reason (Fit counts plain words: hashing an enum member costs more).
REASON_BY_WORD = {reason.value: reason for reason in Reason}


class FitOutcome(NamedTuple):
    """Fit's answer: the chosen devices and the per-reason counts.

    A NamedTuple rather than a frozen dataclass: one is made per candidate node, and a
    tuple is built several times faster.

    On failure HAMi also returns the partial last run; it decides nothing, so it is left out
    here (a trace shows which cards were gathered).
    """

    ok: bool
    devices: tuple[ContainerDevice, ...]
    counts: Mapping[str, int]  # reason word -> how many cards (plain words: cheap to count)
    total: int  # the number of cards considered: the denominator of the reason string


def fixed_memory(request: ContainerDeviceRequest) -> int | None:
    """The MiB a request books on any card, or None when it is a share of each card.

    An absolute amount wins over a percentage, as in HAMi.
    """
    if request.mem_percentage_req == PERCENT_UNSET or request.memreq != 0:
        return max(request.memreq, 0)
    return None


def resolve_memory(request: ContainerDeviceRequest, totalmem: int) -> int:
    """The MiB a request books on a card: absolute, else a percentage of this card (int32)."""
    memreq = request.memreq if request.memreq > 0 else 0
    if request.mem_percentage_req != PERCENT_UNSET and request.memreq == 0:
        memreq = percent_of(totalmem, request.mem_percentage_req)
    return memreq


class ContainerSpecError(ValueError):
    """A container's resources cannot be read; the message names the container and the key."""


class Vendor(Protocol):
    """One device backend, as the engine uses it (HAMi's `Devices` interface, trimmed to what a
    decision reads). Implementations are pure and immutable."""

    @property
    def name(self) -> str:
        """The device type its requests and allocations carry; its cards' types contain it
        (case-insensitively), as HAMi's `getNodeResources` selects them."""

    @property
    def keys(self) -> VendorKeys:
        """The pod and node annotation keys it reads and writes (the protocol's table row)."""

    @property
    def column_screen(self) -> bool:
        """Whether, for a request without card filters, its Fit makes exactly the checks of
        the engine's numpy column screen (`engine/columns.py`), so the screen may stand in."""

    def container_request(self, container: ContainerView) -> ContainerDeviceRequest | None:
        """The container's request, or None when it asks for none of this vendor's devices.
        ContainerSpecError when a resource value is unreadable or out of range."""

    def card_selectors(self, annotations: Mapping[str, str]) -> CardSelectors:
        """The pod's per-card filters, read once per pod from its annotations."""

    def fit(
        self,
        cards: Sequence[CardState],
        request: ContainerDeviceRequest,
        *,
        selectors: CardSelectors,
        policy: FitPolicy,
        cordoned: Collection[str],
        pair_scores: PairScores,
        quota_ok: QuotaCheck | None,
        trace: list[CardCheck] | None,
        container: int,
    ) -> FitOutcome:
        """HAMi `Fit`: which of `cards` (policy-sorted; the last is tried first) the request
        gets, with the per-reason counts of the cards it cannot use.

        Without NUMA binding, quota and MIG cards its yes/no and counts must not depend on card
        order: the engine then asks it first on the cards in registration order (the cheap
        screen of many nodes) and sorts only for the node that passes."""

    def partition(self, card: CardState, memory: int) -> tuple[MigProfile, MigPlacement] | None:
        """For a card in MIG mode: the instance (profile, placement) a booking of `memory` MiB
        gets, None when none is free. Never asked for a backend whose cards have no MIG mode."""
