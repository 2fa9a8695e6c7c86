"""The one percentile every benchmark prints (nearest rank), so their numbers compare."""

from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """The sample `fraction` of the way through the sorted samples (0.5: the median)."""
    if not values:
        raise ValueError("no samples to take a percentile of")
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]
