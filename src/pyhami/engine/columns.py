"""Every ledger card as numpy columns, to screen one request against all nodes at once.

When no node fits, HAMi's answer still needs every node's reason counts, which in Python
means the Fit loop over every card of the cluster. For the common request — one GPU
container, no NUMA binding, no quota, no type or UUID filters — a card's fate does not
depend on card order, so HAMi's Fit check sequence can be run as
array operations over all cards, and per-node counts taken with one `bincount`.
Nodes with MIG cards are never screened here: their Fit revisits cards.

The ledger keeps the columns in step with its cards (the same incremental updates), so the
screen reads current usage without building anything per decision.
"""

import numpy as np
import numpy.typing as npt

from pyhami.devices.vendor import WHOLE_CARD_CORES, FitPolicy, fixed_memory
from pyhami.model import ContainerDeviceRequest
from pyhami.protocol import Reason
from pyhami.protocol.arithmetic import percent_of

# Codes of the screen, in HAMi's check order; 0 = the card passes every check.
SCREEN_WORDS = (
    "",
    Reason.CARD_NOT_HEALTH.value,
    Reason.CARD_CORDONED.value,
    Reason.CARD_TIME_SLICING_EXHAUSTED.value,
    Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT.value,  # mutex: the card is in use
    Reason.CARD_INSUFFICIENT_MEMORY.value,
    Reason.CARD_INSUFFICIENT_CORE.value,
    Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT.value,  # a whole-card request on a used card
    Reason.CARD_COMPUTE_UNITS_EXHAUSTED.value,
)
_CODES = len(SCREEN_WORDS)
Ints = npt.NDArray[np.int64]


class CardColumns:
    """Card capacity and usage by slot; each ledger card and node owns one slot."""

    _FIELDS = ("used", "count", "usedmem", "totalmem", "usedcores", "totalcore", "node")

    def __init__(self) -> None:
        self._capacity = 0
        self.used: Ints = np.zeros(0, np.int64)
        self.count: Ints = np.zeros(0, np.int64)
        self.usedmem: Ints = np.zeros(0, np.int64)
        self.totalmem: Ints = np.zeros(0, np.int64)
        self.usedcores: Ints = np.zeros(0, np.int64)
        self.totalcore: Ints = np.zeros(0, np.int64)
        self.node: Ints = np.zeros(0, np.int64)  # the owning node's slot
        self.health = np.zeros(0, np.bool_)
        self.cordoned = np.zeros(0, np.bool_)
        self.active = np.zeros(0, np.bool_)  # a live card Fit considers (type names the vendor)
        self._free_cards: list[int] = []
        self._next_card = 0
        self._free_nodes: list[int] = []
        self.node_slots = 0

    def add_node(self) -> int:
        if self._free_nodes:
            return self._free_nodes.pop()
        self.node_slots += 1
        return self.node_slots - 1

    def remove_node(self, slot: int) -> None:
        self._free_nodes.append(slot)

    def add_card(
        self, node_slot: int, *, totals: tuple[int, int, int], typed: bool, cordoned: bool
    ) -> int:
        """A slot for a new card of `node_slot` with (count, totalmem, totalcore)."""
        if self._free_cards:
            slot = self._free_cards.pop()
        else:
            if self._next_card == self._capacity:
                self._grow()
            slot = self._next_card
            self._next_card += 1
        self.count[slot], self.totalmem[slot], self.totalcore[slot] = totals
        self.used[slot] = self.usedmem[slot] = self.usedcores[slot] = 0
        self.node[slot] = node_slot
        self.cordoned[slot] = cordoned
        self.active[slot] = typed
        return slot

    def remove_card(self, slot: int) -> None:
        self.active[slot] = False
        self._free_cards.append(slot)

    def set_usage(self, slot: int, used: int, usedmem: int, usedcores: int, health: bool) -> None:
        self.used[slot] = used
        self.usedmem[slot] = usedmem
        self.usedcores[slot] = usedcores
        self.health[slot] = health

    def _grow(self) -> None:
        size = max(1024, self._capacity * 2)
        for name in (*self._FIELDS, "health", "cordoned", "active"):
            old = getattr(self, name)
            new = np.zeros(size, old.dtype)
            new[: self._capacity] = old
            setattr(self, name, new)
        self._capacity = size

    def screen(self, request: ContainerDeviceRequest, policy: FitPolicy) -> tuple[Ints, Ints]:
        """Per node slot: the cards Fit would consider, and the count of each screen code.

        Exactly HAMi's per-card checks for an order-free request; the caller turns counts
        into a verdict (passing >= nums fits; else the counts plus
        AllocatedCardsInsufficientRequest = passing).
        """
        n = self._next_card
        used, usedmem, usedcores = self.used[:n], self.usedmem[:n], self.usedcores[:n]
        totalmem, totalcore = self.totalmem[:n], self.totalcore[:n]
        coresreq = min(request.coresreq, WHOLE_CARD_CORES)
        fixed = fixed_memory(request)
        if fixed is not None:
            memreq: Ints | int = fixed
        else:
            memreq = percent_of(totalmem, request.mem_percentage_req)
        never = np.zeros(n, np.bool_)
        conditions = [
            ~self.health[:n],
            self.cordoned[:n],
            self.count[:n] <= used,
            (used > 0) if policy.is_mutex else never,
            totalmem - usedmem < memreq,
            totalcore - usedcores < coresreq,
            (totalcore == WHOLE_CARD_CORES) & (used > 0) if coresreq == WHOLE_CARD_CORES else never,
            (totalcore != 0) & (usedcores == totalcore) if coresreq == 0 else never,
        ]
        codes = np.select(conditions, list(range(1, _CODES)), 0)
        active = self.active[:n]
        nodes = self.node[:n][active]
        size = self.node_slots
        typed = np.bincount(nodes, minlength=size)
        counts = np.bincount(nodes * _CODES + codes[active], minlength=size * _CODES)
        return typed, counts.reshape(size, _CODES)
