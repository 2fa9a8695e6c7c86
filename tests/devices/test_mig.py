"""MIG profile and placement choice."""

from pyhami.devices.nvidia.mig import (
    can_place_all,
    ordered_placements,
    overlaps,
    select_candidate,
    select_placement,
)
from pyhami.model import MigPlacement, MigProfile

from .cards import A100_PROFILES, ONE_G, SEVEN_G, THREE_G

P = MigPlacement


def test_overlap_is_half_open() -> None:
    assert overlaps(P(0, 2), P(1, 1))
    assert not overlaps(P(0, 2), P(2, 2))


def test_small_slices_pack_from_the_top_large_from_the_bottom() -> None:
    assert [p.start for p in ordered_placements(ONE_G)] == [6, 5, 4, 3, 2, 1, 0]
    assert [p.start for p in ordered_placements(THREE_G)] == [4, 0]
    two_g = MigProfile("2g.20gb", 19968, 28, 2, (P(4, 2), P(0, 2), P(2, 2)))
    assert [p.start for p in ordered_placements(two_g)] == [0, 2, 4]
    assert ordered_placements(MigProfile("4g.40gb", 1, 1, 4, None)) == []


def test_consecutive_1g_instances_take_6_then_5() -> None:
    first = select_placement(A100_PROFILES, [], "1g.10gb")
    second = select_placement(A100_PROFILES, [first] if first else [], "1g.10gb")
    assert (first, second) == (P(6, 1), P(5, 1))


def test_candidate_is_the_smallest_profile_with_room() -> None:
    assert select_candidate(A100_PROFILES, [], 5000) == (ONE_G, P(6, 1))
    assert select_candidate(A100_PROFILES, [], 20000) == (THREE_G, P(4, 4))
    # With both 3g slots blocked by 1g instances, a 20 GB request has nowhere to go.
    assert select_candidate(A100_PROFILES, [P(6, 1), P(0, 1)], 20000) is None
    assert select_candidate(A100_PROFILES, [], 90000) is None
    assert select_candidate((SEVEN_G,), [P(3, 1)], 1) is None


def test_custom_rule_places_queued_entries_first() -> None:
    assert can_place_all(A100_PROFILES, [], [40000], 40000)
    assert not can_place_all(A100_PROFILES, [], [40000, 40000], 1000)
