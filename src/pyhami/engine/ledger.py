"""The usage ledger: every card's used slots, memory and cores, kept up to date incrementally.

HAMi rebuilds all usage from all pods on every filter call. Here a node
registration or a pod allocation is applied once, when it changes, at a cost of O(devices of
the pod) — O(pods on the node) when the node's registration changes. The invariant, checked by
property tests: after any sequence of changes the ledger equals one built from scratch from
the final nodes and pods.

The ledger also keeps each node's default score (its existing load) in two sorted orders, so
a decision can visit candidate nodes best-first without sorting them.
"""

import copy as _copy
from bisect import bisect_left, insort
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from pyhami.devices.inventory import NodeInventory
from pyhami.engine.collapse import app_only_usage, collapse_init_usage
from pyhami.engine.columns import CardColumns
from pyhami.engine.policy import node_score
from pyhami.model import (
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    MigPlacement,
    MigProfile,
    NodeName,
    PodSingleDevice,
)
from pyhami.protocol import NVIDIA_VENDOR, DeviceMode

MIG_MODE = DeviceMode.MIG.value
HAMI_CORE_MODE = DeviceMode.HAMI_CORE.value
PodKey = str  # the pod UID, or "namespace/name" where a pod has none (offline input)


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """A pod's NVIDIA allocation as recorded in its annotations (or just decided).

    `containers` holds one entry per pod container, init containers first, exactly as
    `hami.io/vgpu-devices-allocated` lists them; the ledger collapses them itself.
    """

    key: PodKey
    namespace: str
    name: str
    node: NodeName
    containers: PodSingleDevice
    init_count: int = 0
    mig_allocations: tuple[MigAllocation, ...] = ()
    # Every classic init container terminated with exit code 0: only the sidecars' and the
    # app containers' usage remains, as HAMi's pod informer counts it.
    init_finished: bool = False
    # Positions of the native sidecars among the init containers: held for the pod's life.
    sidecars: frozenset[int] = frozenset()


class LedgerCard:
    """One card's capacity and usage. Mutable on purpose: it is the ledger's own state, and
    the engine reads it in place (read-only) instead of copying 40,000 cards per decision."""

    __slots__ = (
        "count",
        "health",
        "id",
        "index",
        "mig_in_use",
        "mig_profiles",
        "mode",
        "numa",
        "registered_health",
        "slot",
        "totalcore",
        "totalmem",
        "type",
        "unhealthy_marks",
        "used",
        "usedcores",
        "usedmem",
    )

    def __init__(self, info: DeviceInfo) -> None:
        self.id = info.id
        self.index = info.index
        self.count = info.count
        self.totalmem = info.devmem
        self.totalcore = info.devcore
        self.type = info.type
        self.numa = info.numa
        self.mode = info.mode
        self.mig_profiles: tuple[MigProfile, ...] = info.mig_profiles
        self.registered_health = info.health
        self.health = info.health
        self.used = 0
        self.usedmem = 0
        self.usedcores = 0
        self.mig_in_use: list[MigPlacement] = []
        self.unhealthy_marks = 0  # pods whose MIG bookkeeping contradicts this card's mode
        self.slot = -1  # its row in the ledger's CardColumns

    def working_copy(self) -> "LedgerCard":
        """A copy a decision may book on (its columns slot is never written back)."""
        copy = _copy.copy(self)
        copy.mig_in_use = list(self.mig_in_use)
        return copy

    def usage(self) -> DeviceUsage:
        return DeviceUsage(
            id=self.id,
            index=self.index,
            used=self.used,
            count=self.count,
            usedmem=self.usedmem,
            totalmem=self.totalmem,
            usedcores=self.usedcores,
            totalcore=self.totalcore,
            type=self.type,
            numa=self.numa,
            mode=self.mode,
            health=self.health,
            mig_profiles=self.mig_profiles,
        )


class LedgerNode:
    """A registered node: its cards in registration order and its load sums."""

    __slots__ = (
        "by_uuid",
        "cards",
        "count",
        "has_mig",
        "inventory",
        "mig_poison",
        "name",
        "score",
        "slot",
        "totalcore",
        "totalmem",
        "typed_cards",
        "used",
        "usedcores",
        "usedmem",
    )

    def __init__(self, name: NodeName, inventory: NodeInventory, vendor_name: str) -> None:
        self.name = name
        self.inventory = inventory
        self.cards = tuple(LedgerCard(info) for info in inventory.devices)
        # HAMi `getNodeResources`: the cards whose type names the vendor, case-insensitively.
        vendor = vendor_name.lower()
        self.typed_cards = tuple(c for c in self.cards if vendor in c.type.lower())
        self.has_mig = any(card.mode == MIG_MODE for card in self.cards)
        self.by_uuid: dict[str, LedgerCard] = {}
        for card in self.cards:
            self.by_uuid.setdefault(card.id, card)
        self.count = sum(card.count for card in self.cards)
        self.totalcore = sum(card.totalcore for card in self.cards)
        self.totalmem = sum(card.totalmem for card in self.cards)
        self.used = self.usedcores = self.usedmem = 0
        self.mig_poison = 0  # pods with a MIG reservation on a GPU this node does not have
        self.score = 0.0
        self.slot = -1  # its node slot in the ledger's CardColumns

    def rescore(self) -> None:
        self.score = node_score(
            used=self.used,
            count=self.count,
            usedcores=self.usedcores,
            totalcore=self.totalcore,
            usedmem=self.usedmem,
            totalmem=self.totalmem,
        )


@dataclass(slots=True)
class _Applied:
    """What one pod contributed to one node, so it can be taken back exactly."""

    usage: list[tuple[LedgerCard, int, int, int]]
    mig: list[tuple[LedgerCard, MigPlacement]]
    marks: list[LedgerCard]
    poison: bool


@dataclass(slots=True)
class _PodRecord:
    allocation: PodAllocation
    usage: ContainerDevices  # collapsed (or app-only once shrunk), one entry per card
    shrunk: bool
    applied: _Applied | None = None


class Ledger:
    """Per-card usage of every known node from every known pod allocation.

    `vendor_name` is the scheduling vendor's (`Vendor.name`): Fit sees the cards whose type
    contains it, and pod usage is booked under it.
    """

    def __init__(self, vendor_name: str = NVIDIA_VENDOR) -> None:
        self.vendor_name = vendor_name
        self._nodes: dict[NodeName, LedgerNode] = {}
        self._pods: dict[PodKey, _PodRecord] = {}
        self._pods_by_node: dict[NodeName, set[PodKey]] = {}
        self._namespace_usage: dict[str, tuple[int, int]] = {}
        # (score, name) ascending: spread's preference; (-score, name): binpack's.
        self._spread_order: list[tuple[float, NodeName]] = []
        self._binpack_order: list[tuple[float, NodeName]] = []
        self.columns = CardColumns()

    # ----- nodes -----------------------------------------------------------------------------

    def upsert_node(self, name: NodeName, inventory: NodeInventory) -> None:
        """Add a node or replace its registration; its pods are re-applied to the new cards."""
        old = self._nodes.get(name)
        if old is not None and old.inventory == inventory:
            return
        keys = self._pods_by_node.get(name, set())
        if old is not None:
            for key in keys:
                self._unapply(self._pods[key])
            self._unorder(old)
            self._release_columns(old)
        node = LedgerNode(name, inventory, self.vendor_name)
        self._nodes[name] = node
        node.slot = self.columns.add_node()
        typed = {id(card) for card in node.typed_cards}
        for card in node.cards:
            card.slot = self.columns.add_card(
                node.slot,
                totals=(card.count, card.totalmem, card.totalcore),
                typed=id(card) in typed,
                cordoned=card.id in inventory.cordoned,
            )
            self._sync(card)
        for key in sorted(keys):
            self._apply(self._pods[key], node)
        node.rescore()
        self._order(node)

    def remove_node(self, name: NodeName) -> None:
        """Forget a node; its pods stay known and count again if it comes back."""
        node = self._nodes.pop(name, None)
        if node is None:
            return
        for key in self._pods_by_node.get(name, set()):
            self._pods[key].applied = None
        self._unorder(node)
        self._release_columns(node)

    def _release_columns(self, node: LedgerNode) -> None:
        for card in node.cards:
            self.columns.remove_card(card.slot)
        self.columns.remove_node(node.slot)

    def _sync(self, card: LedgerCard) -> None:
        self.columns.set_usage(card.slot, card.used, card.usedmem, card.usedcores, card.health)

    def node(self, name: NodeName) -> LedgerNode | None:
        return self._nodes.get(name)

    def node_names(self) -> list[NodeName]:
        return list(self._nodes)

    def device_usage(self, name: NodeName) -> tuple[DeviceUsage, ...]:
        """A frozen snapshot of one node's cards (for metrics, explanations, tests)."""
        node = self._nodes.get(name)
        return () if node is None else tuple(card.usage() for card in node.cards)

    def preferred_nodes(
        self, spread: bool, among: Collection[NodeName] | None = None
    ) -> Iterator[LedgerNode]:
        """Nodes best first: highest load for binpack, lowest for spread; ties by name.

        `among` restricts them to the given names; a small set is sorted on its own rather
        than filtered out of the whole cluster's order.
        """
        nodes = self._nodes
        if among is not None and len(among) * 16 < len(nodes):
            known = [nodes[name] for name in set(among) if name in nodes]
            sign = 1 if spread else -1
            known.sort(key=lambda node: (sign * node.score, node.name))
            return iter(known)
        order = self._spread_order if spread else self._binpack_order
        if among is None:
            return (nodes[name] for _, name in order)
        return (nodes[name] for _, name in order if name in among)

    # ----- pods ------------------------------------------------------------------------------

    def add_pod(self, allocation: PodAllocation) -> None:
        """Record (or replace) a pod's allocation. A pod once shrunk to app-only usage stays
        shrunk, as in HAMi: its finished init containers never count again."""
        previous = self._pods.get(allocation.key)
        shrunk = allocation.init_finished or (previous is not None and previous.shrunk)
        if previous is not None:
            self.remove_pod(allocation.key)
        collapse = app_only_usage if shrunk else collapse_init_usage
        usage = collapse(
            allocation.containers, allocation.init_count, self.vendor_name, allocation.sidecars
        )
        record = _PodRecord(allocation, usage, shrunk)
        self._pods[allocation.key] = record
        self._pods_by_node.setdefault(allocation.node, set()).add(allocation.key)
        self._charge_namespace(allocation.namespace, usage, +1)
        node = self._nodes.get(allocation.node)
        if node is not None:
            self._unorder(node)
            self._apply(record, node)
            node.rescore()
            self._order(node)

    def remove_pod(self, key: PodKey) -> None:
        """Forget a pod's allocation; removing an unknown pod is a no-op (idempotent undo)."""
        record = self._pods.pop(key, None)
        if record is None:
            return
        allocation = record.allocation
        keys = self._pods_by_node[allocation.node]
        keys.discard(key)
        if not keys:
            del self._pods_by_node[allocation.node]
        self._charge_namespace(allocation.namespace, record.usage, -1)
        node = self._nodes.get(allocation.node)
        if node is not None and record.applied is not None:
            self._unorder(node)
            self._unapply(record)
            node.rescore()
            self._order(node)

    def pod(self, key: PodKey) -> PodAllocation | None:
        record = self._pods.get(key)
        return None if record is None else record.allocation

    def pod_keys(self) -> list[PodKey]:
        return list(self._pods)

    def pods_on(self, node: NodeName) -> list[PodAllocation]:
        """The allocations charged to `node`, each as the ledger counts it (a pod once shrunk
        to app-only usage says its init containers finished)."""
        found = []
        for key in sorted(self._pods_by_node.get(node, ())):
            record = self._pods[key]
            allocation = record.allocation
            if record.shrunk and not allocation.init_finished:
                allocation = replace(allocation, init_finished=True)
            found.append(allocation)
        return found

    def namespace_usage(self, namespace: str) -> tuple[int, int]:
        """(memory MiB, cores) the namespace's pods hold, for ResourceQuota checks."""
        return self._namespace_usage.get(namespace, (0, 0))

    # ----- internals -------------------------------------------------------------------------

    def _charge_namespace(self, namespace: str, usage: ContainerDevices, sign: int) -> None:
        mem, cores = self._namespace_usage.get(namespace, (0, 0))
        mem += sign * sum(device.usedmem for device in usage)
        cores += sign * sum(device.usedcores for device in usage)
        if mem == 0 and cores == 0:
            self._namespace_usage.pop(namespace, None)
        else:
            self._namespace_usage[namespace] = (mem, cores)

    def _order(self, node: LedgerNode) -> None:
        insort(self._spread_order, (node.score, node.name))
        insort(self._binpack_order, (-node.score, node.name))

    def _unorder(self, node: LedgerNode) -> None:
        for order, key in (
            (self._spread_order, (node.score, node.name)),
            (self._binpack_order, (-node.score, node.name)),
        ):
            at = bisect_left(order, key)
            if at < len(order) and order[at] == key:
                del order[at]

    def _apply(self, record: _PodRecord, node: LedgerNode) -> None:
        """Add one pod's usage and MIG bookkeeping to `node`, by HAMi's usage rules."""
        applied = _Applied([], [], [], False)
        reservations: dict[str, list[MigPlacement]] = {}
        for allocation in record.allocation.mig_allocations:
            reservations.setdefault(allocation.gpu_uuid, []).append(allocation.placement)
        for device in record.usage:
            card = node.by_uuid.get(device.uuid)
            if card is None:
                continue  # HAMi only logs an allocation on a card the node no longer has
            slots = max(device.slots, 1)
            applied.usage.append((card, slots, device.usedmem, device.usedcores))
            pending = reservations.get(device.uuid)
            if pending:
                if card.mode == HAMI_CORE_MODE:
                    applied.marks.append(card)
                else:
                    applied.mig.append((card, pending.pop(0)))
            elif card.mode == MIG_MODE:
                applied.marks.append(card)  # a MIG card used without a reservation: fail closed
        for uuid, leftover in reservations.items():
            if not leftover:
                continue
            card = node.by_uuid.get(uuid)
            if card is None:
                applied.poison = True
            elif card.mode == MIG_MODE:
                applied.mig.extend((card, placement) for placement in leftover)
            else:
                applied.marks.append(card)
        self._add(node, applied, +1)
        record.applied = applied

    def _unapply(self, record: _PodRecord) -> None:
        applied = record.applied
        if applied is None:
            return
        node = self._nodes[record.allocation.node]
        self._add(node, applied, -1)
        record.applied = None

    def _add(self, node: LedgerNode, applied: _Applied, sign: int) -> None:
        for card, slots, mem, cores in applied.usage:
            card.used += sign * slots
            card.usedmem += sign * mem
            card.usedcores += sign * cores
            node.used += sign * slots
            node.usedmem += sign * mem
            node.usedcores += sign * cores
        for card, placement in applied.mig:
            if sign > 0:
                card.mig_in_use.append(placement)
            else:
                card.mig_in_use.remove(placement)
        touched = set(applied.marks)
        for card in applied.marks:
            card.unhealthy_marks += sign
        if applied.poison:
            node.mig_poison += sign
            touched.update(card for card in node.cards if card.mode == MIG_MODE)
        for card in touched:
            card.health = (
                card.registered_health
                and card.unhealthy_marks == 0
                and not (card.mode == MIG_MODE and node.mig_poison > 0)
            )
        for card in touched.union(entry[0] for entry in applied.usage):
            self._sync(card)


def build_ledger(
    nodes: Mapping[NodeName, NodeInventory],
    pods: Sequence[PodAllocation],
    vendor_name: str = NVIDIA_VENDOR,
) -> Ledger:
    """A ledger built from scratch (HAMi's way, per decision; used as the baseline)."""
    ledger = Ledger(vendor_name)
    for name, inventory in nodes.items():
        ledger.upsert_node(name, inventory)
    for allocation in pods:
        ledger.add_pod(allocation)
    return ledger
