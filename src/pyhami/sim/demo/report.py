"""The demo's words: one progress line per pod, then the outcome table and the reasons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyhami.sim.demo.results import CardShare, NodeWhy, PodResult

if TYPE_CHECKING:
    from pyhami.sim.demo.usage import PodUsage

# HAMi's reason words (why Fit refused a card) in a sentence a user can act on.
REASON_WORDS = {
    "CardTypeMismatch": "card type not selected by the pod",
    "CardUuidMismatch": "card UUID not selected by the pod",
    "CardTimeSlicingExhausted": "card already shared by deviceSplitCount tasks",
    "CardComputeUnitsExhausted": "card cores all in use",
    "CardInsufficientMemory": "not enough free memory",
    "CardInsufficientCore": "not enough free cores",
    "CardNotHealth": "card unhealthy",
    "CardCordoned": "card cordoned",
    "NumaNotFit": "cards not on one NUMA node",
    "ExclusiveDeviceAllocateConflict": "exclusive use wanted, card is shared",
    "CardNotFoundCustomFilterRule": "card removed by a filter rule",
    "CardMigTopologyInfeasible": "no MIG placement",
    "NodeInsufficientDevice": "fewer cards than the pod asks for",
    "AllocatedCardsInsufficientRequest": "too few cards fit",
    "ResourceQuotaNotFit": "namespace quota exceeded",
    "ModeNotFit": "card mode (hami-core / mig) not selected",
}


def progress_line(result: PodResult) -> str:
    ref = result.name if result.namespace == "default" else f"{result.namespace}/{result.name}"
    if result.ok:
        cards = len({share.uuid for share in result.cards})
        what = {0: "no GPU", 1: "1 card"}.get(cards, f"{cards} cards")
        return f"  ok   {ref:<22} -> {result.node}, {what} ({result.seconds:.1f}s)"
    if result.phase == "Pending":
        return f"  --   {ref:<22} no node fits ({result.seconds:.1f}s)"
    return f"  !!   {ref:<22} {result.phase}: {result.message}"


def _share(share: CardShare) -> str:
    model = share.model.removeprefix("NVIDIA ").removeprefix("Tesla ")
    return f"{model:<16} #{share.index:<2} {share.memory_mib:>6} MiB {share.cores:>4}%"


def _why(why: NodeWhy) -> str:
    parts = [
        f"{count}/{why.cards} {REASON_WORDS.get(reason, reason)} ({reason})"
        for reason, count in sorted(why.counts.items())
    ]
    if not parts:  # a node-level reason carries no card counts
        word = REASON_WORDS.get(why.reason)
        parts = [f"{word} ({why.reason})" if word else why.reason]
    return f"      {why.node:<12} " + "; ".join(parts)


def _used(usage: PodUsage | None) -> str:
    return "-" if usage is None else f"{usage.used_mib}/{usage.limit_mib} MiB"


def outcome_table(
    results: Sequence[PodResult], usage: Mapping[tuple[str, str], PodUsage] | None = None
) -> str:
    """The pods and their cards; with `usage`, each running pod's measured use / limit."""
    width = max([len("POD"), *(len(r.name) for r in results)])
    head = f"{'POD':<{width}}  {'NODE':<12} {'CARD':<20} {'MEMORY':>10} {'CORES':>5}  STATUS"
    lines = [head if usage is None else f"{head:<{len(head) + 3}}USED/LIMIT"]
    for result in results:
        if result.ok and result.cards:
            for position, share in enumerate(result.cards):
                first = position == 0
                name = result.name if first else ""
                node = share.node if first else ""
                status = result.phase if first else ""
                if usage is not None and first:
                    status = f"{status:<9}{_used(usage.get((result.namespace, result.name)))}"
                lines.append(f"{name:<{width}}  {node:<12} {_share(share)}  {status}")
        elif result.ok:
            lines.append(f"{result.name:<{width}}  {result.node:<12} {'(no GPU)':<37}  Running")
        else:
            what = "not scheduled" if result.phase == "Pending" else result.phase
            lines.append(f"{result.name:<{width}}  {'-':<12} {'-':<37}  {what}")
            if result.message:
                lines.append(f"      {result.message}")
            lines.extend(_why(why) for why in result.why)
    return "".join(f"{line.rstrip()}\n" for line in lines)


def summary_line(results: Sequence[PodResult], seconds: float) -> str:
    running = sum(1 for r in results if r.ok)
    pending = sum(1 for r in results if r.phase == "Pending")
    other = len(results) - running - pending
    text = f"{len(results)} pods: {running} running, {pending} not schedulable"
    if other:
        text += f", {other} refused or failed"
    return f"{text}; {seconds:.1f}s in all"
