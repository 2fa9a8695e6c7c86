"""Kubernetes resource quantities (`resource.Quantity`), parsed exactly.

Values are kept as `Fraction`s so "is it an integer" (Go's `AsInt64`) and "round up"
(`Value()`) are exact, whatever the suffix. Grammar (apimachinery `quantity.go`):
`<sign?><digits>[.<digits>]<suffix>` with suffix a binary SI unit (Ki … Ei), a decimal SI unit
(n u m "" k M G T P E) or a decimal exponent (`e3`, `E-2`).
"""

import math
import re
from fractions import Fraction
from typing import NoReturn

from pyhami.protocol.arithmetic import INT64_MAX, INT64_MIN

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity; the message quotes it."""


def parse_quantity(value: object) -> Fraction:
    """The exact value of a quantity given as a string (or a plain number from YAML)."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} must be a string or a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            _bad(value)
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity {value!r} must be a string or a number")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        _bad(value)
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * Fraction(10) ** int(suffix[1:])


def _bad(value: object) -> NoReturn:
    raise QuantityError(f"quantity {value!r} is not a Kubernetes quantity (e.g. 1, 500m, 16Gi)")


def as_int64(value: Fraction) -> int | None:
    """Go's `Quantity.AsInt64`: the value when it is an exact integer that fits in int64."""
    if value.denominator != 1 or not INT64_MIN <= value.numerator <= INT64_MAX:
        return None
    return value.numerator


def value_ceil(value: Fraction) -> int:
    """Go's `Quantity.Value()`: rounded up to an integer."""
    return -((-value.numerator) // value.denominator)
