"""Dynamic MIG: which profile and placement a request gets on a card.

Small slices (`1g.`, `3g.`) are packed from the top of the GPU, larger ones from the bottom, so
that big instances stay placeable for as long as possible.
"""

from collections.abc import Iterable, Sequence

from pyhami.model import MigPlacement, MigProfile


def overlaps(a: MigPlacement, b: MigPlacement) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


def ordered_placements(profile: MigProfile) -> list[MigPlacement]:
    """Placements in the order they are tried: descending start for 1g./3g., else ascending."""
    descending = profile.name.startswith(("1g.", "3g."))
    return sorted(profile.placements or (), key=lambda p: p.start, reverse=descending)


def select_placement(
    profiles: Sequence[MigProfile], occupied: Iterable[MigPlacement], name: str
) -> MigPlacement | None:
    """The first free placement of the first profile called `name`."""
    taken = tuple(occupied)
    for profile in profiles:
        if profile.name == name:
            for placement in ordered_placements(profile):
                if not any(overlaps(placement, other) for other in taken):
                    return placement
            return None
    return None


def select_candidate(
    profiles: Sequence[MigProfile], occupied: Iterable[MigPlacement], memory: int
) -> tuple[MigProfile, MigPlacement] | None:
    """The instance a request would get: the smallest profile (memory, then slices) with at
    least `memory` MiB and a free slot, and where it sits."""
    taken = tuple(occupied)
    # sorted() is stable, like Go's sort.SliceStable HAMi uses here.
    for profile in sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)):
        if profile.memory_mb >= memory:
            placement = select_placement(profiles, taken, profile.name)
            if placement is not None:
                return profile, placement
    return None


def can_place_all(
    profiles: Sequence[MigProfile],
    occupied: Iterable[MigPlacement],
    queued: Iterable[int],
    memory: int,
) -> bool:
    """Fit's custom rule: the queued requests on this card, then this one, all get instances."""
    taken = list(occupied)
    for queued_memory in queued:
        choice = select_candidate(profiles, taken, queued_memory)
        if choice is None:
            return False
        taken.append(choice[1])  # its placement
    return select_candidate(profiles, taken, memory) is not None
