"""`hami.io/device-scoring-weights`: how much each term weighs in a card's score.

Exactly three `key=value` items, keys `slot`, `core`, `memory` in any order, values
non-negative int64, at least one positive; absent means 1,1,1. Error texts are HAMi's,
prefixed `invalid hami.io/device-scoring-weights annotation "<value>": `.
"""

from dataclasses import dataclass

from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.goparse import GoNumError, go_quote, parse_int, trim_space
from pyhami.protocol.keys import KEY_DEVICE_SCORING_WEIGHTS

_KEYS = ("slot", "core", "memory")


@dataclass(frozen=True, slots=True)
class DeviceScoringWeights:
    """How much free slots, cores and memory count when scoring a card."""

    slot: int = 1
    core: int = 1
    memory: int = 1


def parse_device_scoring_weights(value: str | None) -> DeviceScoringWeights:
    """HAMi `ParseDeviceScoringWeights`; None (annotation absent) gives the defaults."""
    if value is None:
        return DeviceScoringWeights()

    def fail(why: str) -> ProtocolError:
        return ProtocolError(
            KEY_DEVICE_SCORING_WEIGHTS,
            value,
            f"invalid {KEY_DEVICE_SCORING_WEIGHTS} annotation {go_quote(value)}: {why}",
        )

    parts = value.split(",")
    if len(parts) != 3:
        raise fail("expected slot, core, and memory weights")
    weights: dict[str, int] = {}
    for part in parts:
        key, equals, number = trim_space(part).partition("=")
        if not equals:
            raise fail("expected key=value entries")
        key = trim_space(key)
        if key in weights:
            raise fail(f"duplicate {go_quote(key)} weight")
        try:
            weight = parse_int(trim_space(number), 64)
        except GoNumError:
            raise fail(f"{go_quote(key)} weight must be an integer") from None
        if weight < 0:
            raise fail(f"{go_quote(key)} weight must not be negative")
        if key not in _KEYS:
            raise fail(f"unknown weight {go_quote(key)}")
        weights[key] = weight
    if not any(weights.values()):
        raise fail("at least one weight must be positive")
    return DeviceScoringWeights(**weights)


def format_device_scoring_weights(weights: DeviceScoringWeights) -> str:
    """The annotation value `slot=<s>,core=<c>,memory=<m>`; refuses what HAMi would reject."""
    value = f"slot={weights.slot},core={weights.core},memory={weights.memory}"
    parse_device_scoring_weights(value)
    return value
