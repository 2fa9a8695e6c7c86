"""Evaluating one pod on one node, HAMi's `scoreNode`, three ways.

* full: init containers each from the node's usage, app containers accumulating on working
  copies, cards in policy order; it picks the cards;
* quick: Fit on the cards in registration order, no device scores, no sort — exact for the
  yes/no and the reason when card order cannot matter (no NUMA binding, no quota, no MIG
  card), and only up to the first app container;
* screened: the same checks as numpy column operations over every card of the cluster at
  once (`columns.py`), for order-free requests without type or UUID filters.
"""

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from pyhami.devices.reasons import CardCheck
from pyhami.devices.vendor import FitOutcome, FitPolicy, QuotaCheck, Vendor
from pyhami.engine.collapse import collapse_init_usage
from pyhami.engine.columns import SCREEN_WORDS
from pyhami.engine.ledger import MIG_MODE, Ledger, LedgerCard, LedgerNode
from pyhami.engine.pod import EngineConfig, PodPlan
from pyhami.engine.policy import CardSortKey, card_order, sort_cards
from pyhami.engine.quota import QuotaBook, QuotaLimit
from pyhami.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    MigAllocation,
    NodeName,
    PodSingleDevice,
)
from pyhami.protocol import (
    DeviceScoringWeights,
    GpuPolicy,
    Reason,
    format_reasons,
    policy_contains,
)


class NodeFailure(enum.StrEnum):
    """Why a whole node is out; CARDS means the per-card reason counts say it."""

    UNREGISTERED = "node unregistered"
    INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
    CARDS = "cards"
    MIG_ACCOUNTING = "mig-accounting"


UNREGISTERED = NodeFailure.UNREGISTERED.value
_CARDS = NodeFailure.CARDS
_ALLOCATED_INSUFFICIENT = Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST.value
# Nodes tried one by one before the column screen takes over: a fitting node is usually
# among the first few in policy order, and the screen costs a pass over every card.
SEQUENTIAL_NODES = 32
# A screen reads the code counts of failing nodes row by row while at most one node in this
# many fails; beyond that the whole table is converted at once (cheaper per row).
ROW_BY_ROW_SHARE = 8


class NodeVerdict(NamedTuple):
    """One candidate node's answer, with the structured reasons behind its text.

    A NamedTuple rather than a frozen dataclass: one is made per candidate node, and a
    tuple is built several times faster.
    """

    node: NodeName
    fits: bool
    score: float | None = None  # the node's default score (existing load); None if unknown
    failure: NodeFailure | None = None
    container: int | None = None  # the container (init first) that did not fit
    reasons: Mapping[Reason, int] = MappingProxyType({})
    cards: int = 0  # the denominator of the reason counts
    reason: str = ""  # HAMi's FailedNodes text
    devices: PodSingleDevice = ()
    mig_allocations: tuple[MigAllocation, ...] = ()
    checks: tuple[CardCheck, ...] = ()  # every card visit, when traced


@dataclass(frozen=True, slots=True)
class Cycle:
    """Per-pod facts computed once and read for every node."""

    plan: PodPlan
    vendor: Vendor
    weights: DeviceScoringWeights
    fit_policy: FitPolicy
    sort_key: CardSortKey
    quota: QuotaLimit | None
    quota_used: tuple[int, int]
    memory_factor: int
    mig_allowed: bool  # `nvidia.com/vgpu-mode` absent or naming mig
    # Card order cannot change Fit's yes/no here (no NUMA binding, no quota, no GPU sidecar).
    order_free: bool
    screen: tuple[tuple[int, ContainerDeviceRequest], ...]  # what CardColumns can screen
    # No request after the first app container's: a quick or screened pass is the answer.
    one_app_step: bool
    # Reasons and their text by the counts: many nodes fail the same way.
    texts: dict[tuple[tuple[tuple[str, int], ...], int], tuple[str, Mapping[Reason, int]]]


def make_cycle(
    plan: PodPlan,
    weights: DeviceScoringWeights,
    ledger: Ledger,
    config: EngineConfig,
    quotas: QuotaBook | None,
) -> Cycle:
    mode = plan.selectors.vgpu_mode
    quota = None if quotas is None else quotas.limit(plan.namespace)
    # A GPU sidecar's cards are taken before later containers fit, as card order decides.
    order_free = not plan.selectors.numa_bind and quota is None and not plan.gpu_sidecar
    return Cycle(
        plan=plan,
        vendor=config.vendor,
        weights=weights,
        fit_policy=FitPolicy(
            need_topology=policy_contains(plan.gpu_policy, GpuPolicy.TOPOLOGY_AWARE),
            is_mutex=policy_contains(plan.gpu_policy, GpuPolicy.MUTEX),
        ),
        sort_key=card_order(plan.gpu_policy, plan.selectors.numa_bind),
        quota=quota,
        quota_used=ledger.namespace_usage(plan.namespace),
        memory_factor=config.nvidia.memory_factor,
        mig_allowed=mode is None or MIG_MODE in mode,
        order_free=order_free,
        screen=_screenable(plan, order_free and config.vendor.column_screen),
        one_app_step=_one_app_step(plan),
        texts={},
    )


def _one_app_step(plan: PodPlan) -> bool:
    app = [n for n in range(plan.init_count, len(plan.requests)) if plan.requests[n] is not None]
    return len(app) <= 1


def _screenable(plan: PodPlan, order_free: bool) -> tuple[tuple[int, ContainerDeviceRequest], ...]:
    """The containers (position, request) whose per-card checks the columns can run.

    Each init container starts from the node's usage, and so does the first app container:
    for those, Fit's answer does not depend on what another container took. Later app
    containers do, so a node that passes all of these still gets the full evaluation.
    """
    selectors = plan.selectors
    if not order_free or selectors.filters_types or selectors.filters_uuids:
        return ()
    screened = []
    for position, request in enumerate(plan.requests):
        if request is not None:
            screened.append((position, request))
            if position >= plan.init_count:
                break
    return tuple(screened)


class Screen:
    """Verdicts for nodes without MIG cards from one column pass per screened container."""

    def __init__(self, ledger: Ledger, cycle: Cycle) -> None:
        self._cycle = cycle
        self._containers = []
        for position, request in cycle.screen:
            typed, counts = ledger.columns.screen(request, cycle.fit_policy)
            # Python lists for the per-node reads. The code counts (nine per node) are turned
            # into lists row by row, for failing nodes only, while few nodes fail: when the
            # cluster has room most pass, and their rows are never read.
            passes = (typed >= request.nums) & (counts[:, 0] >= request.nums)
            failing = len(passes) - int(np.count_nonzero(passes))
            rows = counts.tolist() if failing * ROW_BY_ROW_SHARE > len(passes) else counts
            self._containers.append((position, request.nums, typed.tolist(), passes.tolist(), rows))
        self._known: dict[tuple[int, ...], tuple[str, Mapping[Reason, int]]] = {}

    def verdict(self, node: LedgerNode) -> NodeVerdict | None:
        """The node's failure (its first failing container's), or None when it may fit."""
        slot = node.slot
        for position, nums, typed_by_node, passes, counts_by_node in self._containers:
            if passes[slot]:
                continue
            typed = typed_by_node[slot]
            if nums > typed:
                return _too_few_cards(node, position, ())
            row = counts_by_node[slot]
            if not isinstance(row, list):
                row = row.tolist()
            if row[0] < nums:
                text, reasons = self._reasons(row, typed)
                # Positional through _make: one verdict per node; keyword __new__ costs more.
                return NodeVerdict._make(
                    (
                        node.name,
                        False,
                        node.score,
                        _CARDS,
                        position,
                        reasons,
                        typed,
                        text,
                        (),
                        (),
                        (),
                    )
                )
        return None

    def _reasons(self, row: list[int], typed: int) -> tuple[str, Mapping[Reason, int]]:
        key = (*row, typed)
        known = self._known.get(key)
        if known is None:
            counts: dict[str, int] = {}
            for code in range(1, len(row)):
                if row[code]:
                    word = SCREEN_WORDS[code]
                    counts[word] = counts.get(word, 0) + row[code]
            if row[0]:
                counts[_ALLOCATED_INSUFFICIENT] = row[0]
            known = self._known[key] = _reasons(self._cycle, counts, typed)
        return known


def evaluate(
    node: LedgerNode, cycle: Cycle, *, quick: bool = False, trace: bool = False
) -> NodeVerdict:
    """HAMi `scoreNode` for one pod on one node.

    `quick` (only where `Cycle.order_free`) stops after the first app container and reports
    fit without choosing cards; the caller then runs the full evaluation.
    """
    plan = cycle.plan
    checks: list[CardCheck] | None = [] if trace else None
    entries: list[ContainerDevices] = []
    migs: list[MigAllocation] = []
    # The cards as the next classic init container finds them: the node's, plus what the
    # sidecars started so far hold. Sidecars and app containers book on one set of working
    # copies, `held`, made at the first of them; the card order of one carries to the next.
    base: Sequence[LedgerCard] = node.typed_cards
    held_order: Sequence[LedgerCard] = node.typed_cards
    held: dict[str, LedgerCard] | None = None
    for position, request in enumerate(plan.requests):
        if request is None:
            entries.append(())
            continue
        lasting = position >= plan.init_count or position in plan.sidecars
        order: Sequence[LedgerCard] = held_order if lasting else base
        if not quick:
            order = sort_cards(order, (request,), cycle.weights, cycle.sort_key)
        result = _fit_container(
            node,
            order,
            request=request,
            position=position,
            cycle=cycle,
            allocated=entries,
            checks=checks,
        )
        if isinstance(result, NodeVerdict):
            return result
        if quick:
            if lasting:
                return NodeVerdict(node.name, True, node.score)
            entries.append(result.devices)
            continue
        if not lasting:
            workspace, _ = _copy_cards(base)  # a classic init container's usage ends with it
        else:
            if held is None:
                held, by_identity = _copy_cards(node.typed_cards)
                order = [by_identity[id(card)] for card in order]
                base = [by_identity[id(card)] for card in node.typed_cards]
            held_order = order
            workspace = held
        booked = _book(cycle.vendor, result.devices, workspace, position, migs)
        if isinstance(booked, str):
            return NodeVerdict(
                node.name,
                False,
                node.score,
                failure=NodeFailure.MIG_ACCOUNTING,
                container=position,
                reason=booked,
                checks=tuple(checks or ()),
            )
        entries.append(booked)
    return NodeVerdict(
        node.name,
        True,
        node.score,
        devices=tuple(entries),
        mig_allocations=tuple(migs),
        checks=tuple(checks or ()),
    )


def _copy_cards(
    cards: Sequence[LedgerCard],
) -> tuple[dict[str, LedgerCard], dict[int, LedgerCard]]:
    """Working copies: by UUID (the first card with it, as HAMi's lookup) and by identity."""
    by_uuid: dict[str, LedgerCard] = {}
    by_identity: dict[int, LedgerCard] = {}
    for card in cards:
        copy = card.working_copy()
        by_identity[id(card)] = copy
        by_uuid.setdefault(card.id, copy)
    return by_uuid, by_identity


def _fit_container(
    node: LedgerNode,
    order: Sequence[LedgerCard],
    *,
    request: ContainerDeviceRequest,
    position: int,
    cycle: Cycle,
    allocated: Sequence[ContainerDevices],
    checks: list[CardCheck] | None,
) -> FitOutcome | NodeVerdict:
    """HAMi `fitInDevices` for one container: the device-count check, then Fit."""
    if request.nums > len(order) and not (
        cycle.mig_allowed and any(card.mode == MIG_MODE for card in order)
    ):
        return _too_few_cards(node, position, tuple(checks or ()))
    outcome = cycle.vendor.fit(
        order,
        request,
        selectors=cycle.plan.selectors,
        policy=cycle.fit_policy,
        cordoned=node.inventory.cordoned,
        pair_scores=node.inventory.pair_scores,
        quota_ok=None if cycle.quota is None else _quota_check(cycle.quota, cycle, allocated),
        trace=checks,
        container=position,
    )
    if outcome.ok:
        return outcome
    text, reasons = _reasons(cycle, outcome.counts, outcome.total)
    return NodeVerdict(
        node.name,
        False,
        node.score,
        failure=NodeFailure.CARDS,
        container=position,
        reasons=reasons,
        cards=outcome.total,
        reason=text,
        checks=tuple(checks or ()),
    )


def _too_few_cards(node: LedgerNode, position: int, checks: tuple[CardCheck, ...]) -> NodeVerdict:
    """HAMi's `NodeInsufficientDevice`: the container asks for more cards than the node has."""
    return NodeVerdict(
        node.name,
        False,
        node.score,
        failure=NodeFailure.INSUFFICIENT_DEVICE,
        container=position,
        reason=NodeFailure.INSUFFICIENT_DEVICE.value,
        checks=checks,
    )


def _reasons(
    cycle: Cycle, counts: Mapping[str, int], total: int
) -> tuple[str, Mapping[Reason, int]]:
    """HAMi's reason text and the typed counts, made once per distinct outcome."""
    key = (tuple(counts.items()), total)
    known = cycle.texts.get(key)
    if known is None:
        typed = MappingProxyType({Reason(word): count for word, count in counts.items()})
        known = cycle.texts[key] = (format_reasons(counts, total), typed)
    return known


def _quota_check(
    limit: QuotaLimit, cycle: Cycle, allocated: Sequence[ContainerDevices]
) -> QuotaCheck:
    """HAMi `fitQuota`, with the pod's true container indexes (a HAMi bug fixed, see below).

    HAMi builds the hypothetical pod from the app containers alone during the app phase, so its
    collapse takes the first app containers for init containers and under-counts
    (docs/hami-compatibility.md, "Init containers in quota"); here the init allocations are included
    at their real positions.
    """
    before = tuple(allocated)

    def fits(container: tuple[ContainerDevice, ...]) -> bool:
        usage = collapse_init_usage(
            (*before, container), cycle.plan.init_count, cycle.vendor.name, cycle.plan.sidecars
        )
        memory = sum(device.usedmem for device in usage)
        cores = sum(device.usedcores for device in usage)
        return limit.fits(cycle.quota_used, memory, cores, cycle.memory_factor)

    return fits


def _book(
    vendor: Vendor,
    devices: Sequence[ContainerDevice],
    workspace: Mapping[str, LedgerCard],
    position: int,
    migs: list[MigAllocation],
) -> ContainerDevices | str:
    """HAMi `AddResourceUsage` for each chosen card: MIG instance choice, then the usage."""
    booked = []
    for device_index, device in enumerate(devices):
        card = workspace[device.uuid]
        if card.mode == MIG_MODE:
            choice = vendor.partition(card, device.usedmem)
            if choice is None:
                return (
                    f"AddResourceUsage failed for device {card.id}: "
                    "MIG profile and placement allocation failed"
                )
            # The instance's real size replaces the request, as in HAMi.
            profile, placement = choice
            device = replace(  # noqa: PLW2901
                device, usedmem=profile.memory_mb, usedcores=profile.core
            )
            card.mig_in_use.append(placement)
            migs.append(MigAllocation(position, device_index, card.id, profile.name, placement))
        card.used += 1
        card.usedcores += device.usedcores
        card.usedmem += device.usedmem
        booked.append(device)
    return tuple(booked)
