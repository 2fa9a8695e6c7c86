"""Device and node scores, and the card orders of every GPU policy."""

import pytest

from pyhami.engine import LedgerCard
from pyhami.engine.policy import (
    card_order,
    device_score,
    f32,
    node_score,
    sort_cards,
)
from pyhami.model import ContainerDeviceRequest
from pyhami.protocol import DeviceScoringWeights

from .builders import card, ledger_cards


def gpu(
    uuid: str,
    *,
    type: str = "NVIDIA",
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    count: int = 10,
    numa: int = 0,
    index: int = 0,
) -> LedgerCard:
    info = card(uuid, count=count, type_=type, numa=numa, index=index)
    return ledger_cards((info, used, usedmem, usedcores))[0]


W = DeviceScoringWeights()
ASK = ContainerDeviceRequest(1, "NVIDIA", 1000, 101, 20)


def test_node_score_is_existing_load() -> None:
    """HAMi's worked scoring example: node1 = 3.0, node2 = 8.0."""
    assert node_score(
        used=1, count=20, usedcores=25, totalcore=200, usedmem=2000, totalmem=16000
    ) == pytest.approx(3.0)
    assert node_score(
        used=1, count=20, usedcores=75, totalcore=200, usedmem=6000, totalmem=16000
    ) == pytest.approx(8.0)
    assert node_score(used=0, count=0, usedcores=0, totalcore=1, usedmem=0, totalmem=1) == 0.0


def test_device_score_counts_the_request_only_for_an_equal_type() -> None:
    idle = gpu("d3", type="NVIDIA")
    assert device_score(idle, [ASK], W) == pytest.approx(4.25)
    busy = gpu("d4", type="NVIDIA", used=1, usedmem=6000, usedcores=75)
    assert device_score(busy, [ASK], W) == pytest.approx(20.25)
    real = gpu("d", type="NVIDIA-A100", used=1, usedmem=4000, usedcores=50)
    assert device_score(real, [ASK], W) == pytest.approx(10 * (0.1 + 0.5 + 0.5))
    assert device_score(gpu("z", count=0), [ASK], W) == 0.0


def test_device_score_books_a_percentage_as_hamis_score_does() -> None:
    """int64 product, truncated toward zero, then int32 (Fit wraps the product instead)."""
    memory_only = DeviceScoringWeights(slot=0, core=0, memory=1)
    negative = ledger_cards((card("neg", -1001), 0, 0, 0))[0]  # a register may say anything
    third = ContainerDeviceRequest(1, "NVIDIA", 0, 33, 0)
    # Go: -33033 / 100 = -330; floor division would book -331.
    assert device_score(negative, [third], memory_only) == f32(10 * f32(f32(-330) / f32(-1001)))
    huge = ledger_cards((card("huge", 30_000_000), 0, 0, 0))[0]
    whole = ContainerDeviceRequest(1, "NVIDIA", 0, 100, 0)
    assert device_score(huge, [whole], memory_only) == 10.0


def test_weights_scale_each_term() -> None:
    card = gpu("d", type="X", used=5, usedmem=4000, usedcores=50)
    slots_only = DeviceScoringWeights(slot=2, core=0, memory=0)
    assert device_score(card, [], slots_only) == pytest.approx(10.0)


def test_scores_are_float32() -> None:
    assert f32(0.1) != 0.1 and f32(f32(0.1)) == f32(0.1)


def order(policy: str, numa_bind: bool = False, cards=None) -> list[str]:  # type: ignore[no-untyped-def]
    cards = cards or [
        gpu("idle0", index=0, numa=1),
        gpu("busy", index=1, numa=0, used=3, usedmem=6000, usedcores=60),
        gpu("half", index=2, numa=1, used=1, usedmem=4000, usedcores=50),
        gpu("idle1", index=3, numa=0),
    ]
    return [c.id for c in sort_cards(cards, [], W, card_order(policy, numa_bind))]


def test_binpack_puts_busiest_card_last() -> None:
    assert order("binpack") == ["idle1", "idle0", "half", "busy"]


def test_spread_puts_idlest_card_last_ties_by_numa() -> None:
    assert order("spread") == ["busy", "half", "idle1", "idle0"]
    assert order("topology-aware") == order("spread")
    assert order("") == order("spread")


def test_mutex_by_used_then_numa() -> None:
    assert order("mutex") == ["busy", "half", "idle1", "idle0"]


def test_numa_bind_groups_by_numa_first() -> None:
    assert order("binpack", numa_bind=True) == ["idle0", "half", "idle1", "busy"]
    assert order("spread", numa_bind=True) == ["busy", "idle1", "half", "idle0"]


def test_chains() -> None:
    assert order("numa") == ["busy", "idle1", "idle0", "half"]  # numa then index
    assert order("binpack,numa") == ["idle1", "idle0", "half", "busy"]
    assert order("numa,binpack") == ["idle1", "busy", "idle0", "half"]
    assert order("mutex,topology-aware") == order("spread,x")  # empty chain is spread
    assert order("spread,binpack", numa_bind=True) == order("numa,spread")
