"""Samples, histograms and counters out of Prometheus' text format, for the benchmarks."""

from __future__ import annotations

import collections
import re
from collections.abc import Mapping

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def samples(text: str) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            found[(match[1], match[2] or "")] = float(match[3])
    return found


def histogram(
    before: Mapping[tuple[str, str], float],
    after: Mapping[tuple[str, str], float],
    name: str,
    label_filter: str = "",
) -> list[tuple[float, float]]:
    """(upper bound, count in the phase) per cumulative bucket of `name`."""
    buckets: dict[float, float] = collections.defaultdict(float)
    for (metric, labels), value in after.items():
        if metric != f"{name}_bucket" or label_filter not in labels:
            continue
        le = re.search(r'le="([^"]+)"', labels)
        assert le is not None
        buckets[float(le[1])] += value - before.get((metric, labels), 0.0)
    return sorted(buckets.items())


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus' histogram_quantile: linear inside the bucket that holds rank q."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = upper, count
    return None


def counter(
    before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float], name: str
) -> dict[str, float]:
    return {
        labels: value - before.get((metric, labels), 0.0)
        for (metric, labels), value in after.items()
        if metric == name and value - before.get((metric, labels), 0.0)
    }
