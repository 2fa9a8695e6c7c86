"""Resource quantities as kube-apiserver writes them back: decoded into `resource.Quantity`, put
in a resource list (container requests and limits, pod overhead, node capacity, quota) and encoded
again, so `4000` is stored as `4k`, `0.5` as `500m` and `1024Mi` as `1Gi`.

Kubernetes' rules (apimachinery's `resource.Quantity`, core/v1's resource-list defaulting):

* the suffix picks the format: a binary one (`Ki` … `Ei`) BinarySI, a decimal one (`n u m k M
  G T P E` or none) DecimalSI, `e<n>`/`E<n>` DecimalExponent;
* the value is exact, except that a resource list rounds a value finer than 1m up (away from
  zero) to the next milli, and a binary value is capped at 2^63-1;
* the canonical text: `0` for zero; a binary value that is whole and at least 1024 in size as
  its digits times the largest power of 1024 that divides it (`1536Mi`, `1Gi`); any other value
  as its digits without trailing zeros times the largest power of 1000 that keeps them whole
  (`1500m`, `4k`), then that power's SI suffix (none beyond E: `1000E` reads back as `1`) or
  `e<3k>` for DecimalExponent;
* a text that is already short and canonical-looking is kept verbatim (the parser's fast path
  remembers it): for decimal, up to 18 digits, scaled by a multiple of 3 no finer than 1m, not
  ending in `000` and not starting with `0`; for binary, an integer whose low three bits are not
  all zero. This keeps `1.500`, `01`, `+1` and `1E3` as written.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12,
                      "P": 15, "E": 18}  # fmt: skip
_DECIMAL_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL_EXPONENTS.items()}
_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_SUFFIXES = {exponent // 10: suffix for suffix, exponent in _BINARY_EXPONENTS.items()}
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
# sign, digits before the point (leading zeros dropped), after it, and the suffix
_NUMBER = re.compile(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_MAX_DIGITS = 18  # what an int64 holds for sure
_MILLI = Fraction(1, 1000)  # a resource list keeps nothing finer
_INT64_MAX = 2**63 - 1
# Exponents kube-apiserver could not hold either (it keeps them in 32 bits): refused here.
_MAX_EXPONENT = 10**4
FORMAT_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
SUFFIX_MESSAGE = "unable to parse quantity's suffix"

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"
# Where each resource keeps resource lists: paths of keys, `*` for every item of a list.
_CONTAINER_LISTS = (("resources", "limits"), ("resources", "requests"))
_POD_LISTS = (
    *(
        ("spec", group, "*", *inner)
        for group in ("containers", "initContainers", "ephemeralContainers")
        for inner in _CONTAINER_LISTS
    ),
    ("spec", "overhead"),
    ("spec", "resources", "limits"),
    ("spec", "resources", "requests"),
    *(
        ("status", group, "*", *inner)
        for group in ("containerStatuses", "initContainerStatuses")
        for inner in (("allocatedResources",), *_CONTAINER_LISTS)
    ),
)
RESOURCE_LISTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "Pod": _POD_LISTS,
    "Node": (("status", "capacity"), ("status", "allocatable")),
    "ResourceQuota": (("spec", "hard"), ("status", "hard"), ("status", "used")),
}


class QuantityFormatError(ValueError):
    """Text kube-apiserver's decoder refuses as a quantity; the message is its own."""


@dataclass(frozen=True, slots=True)
class _Parts:
    negative: bool
    whole: str  # digits before the point, leading zeros dropped ("0" when none are left)
    fraction: str  # digits after the point
    suffix: str


def _split(text: str) -> _Parts:
    """The number's parts, read as Kubernetes' parser reads them (it allows `1.`, `.5`, `1.G`)."""
    match = _NUMBER.fullmatch(text)
    assert match is not None  # every text matches: the suffix takes what the number does not
    sign, whole, fraction, suffix = match.groups()
    letters = len(suffix) - len(suffix.lstrip("".join(_SUFFIX_LETTERS)))
    rest = suffix[letters:]
    rest = rest[1:] if rest[:1] in ("-", "+") else rest
    if not all(char in _DIGITS for char in rest):
        raise QuantityFormatError(FORMAT_MESSAGE)
    return _Parts(sign == "-", whole or "0", fraction or "", suffix)


def _interpret(suffix: str) -> tuple[int, int, str]:
    """(base, exponent, format) of a suffix."""
    if suffix in _DECIMAL_EXPONENTS:
        return 10, _DECIMAL_EXPONENTS[suffix], DECIMAL_SI
    if suffix in _BINARY_EXPONENTS:
        return 2, _BINARY_EXPONENTS[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        try:
            exponent = int(suffix[1:])  # `_split` let only a sign and ASCII digits through
        except ValueError:
            raise QuantityFormatError(SUFFIX_MESSAGE) from None
        if abs(exponent) <= _MAX_EXPONENT:
            return 10, exponent, DECIMAL_EXPONENT
    raise QuantityFormatError(SUFFIX_MESSAGE)


def _kept_as_written(parts: _Parts, exponent: int, quantity_format: str) -> bool:
    """Whether the parser's fast path takes the text and remembers it as the canonical one."""
    shifted = parts.whole + parts.fraction
    if quantity_format == BINARY_SI:
        if parts.fraction:
            return False
        if 15 - len(parts.whole) - exponent * 3 // 10 - 1 < 0:
            return False
        value = int(parts.whole)
        return (value << exponent) <= _INT64_MAX and value & 0x07 != 0
    scale = exponent - len(parts.fraction)
    return (
        len(shifted) <= _MAX_DIGITS
        and scale >= -3  # finer ones are rounded to 1m and written anew
        and scale % 3 == 0
        and not shifted.endswith("000")
        and shifted[0] != "0"
    )


def _decoded(parts: _Parts, base: int, exponent: int, quantity_format: str) -> Fraction:
    """The value a resource list keeps: rounded up (away from zero) to 1m, a binary one capped."""
    magnitude = Fraction(int(parts.whole + parts.fraction), 10 ** len(parts.fraction))
    magnitude = Fraction(math.ceil(magnitude * Fraction(base) ** exponent / _MILLI)) * _MILLI
    if quantity_format == BINARY_SI:
        magnitude = min(magnitude, Fraction(_INT64_MAX))
    return -magnitude if parts.negative else magnitude


def _strip(value: int, factor: int) -> tuple[int, int]:
    """`value` without its factors of `factor`, and how many there were."""
    times = 0
    while value >= factor and value % factor == 0:
        value //= factor
        times += 1
    return value, times


def _formatted(value: Fraction, quantity_format: str) -> str:
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if quantity_format == BINARY_SI and magnitude >= 1024 and magnitude.denominator == 1:
        number, power = _strip(magnitude.numerator, 1024)
        return f"{sign}{number}{_BINARY_SUFFIXES.get(power, '')}"
    # any other value (a binary one that is small or not whole too) is written as decimal
    millis = magnitude / _MILLI  # whole: `_decoded` rounded it
    number, power = _strip(millis.numerator, 10)
    power -= 3
    thousands = power - power % 3
    number *= 10 ** (power - thousands)
    if quantity_format == DECIMAL_EXPONENT:
        suffix = f"e{thousands}" if thousands else ""
    else:
        # kube-apiserver writes a power with no SI name (beyond E) without a suffix at all
        suffix = _DECIMAL_SUFFIXES.get(thousands, "")
    return f"{sign}{number}{suffix}"


def canonical_quantity(written: object) -> str:
    """The quantity as kube-apiserver returns it; QuantityFormatError when it refuses it.

    A JSON number is taken by its text, as the decoder takes it."""
    if isinstance(written, bool) or not isinstance(written, (str, int, float)):
        raise QuantityFormatError(FORMAT_MESSAGE)
    text = written.strip() if isinstance(written, str) else str(written)
    if not text:
        raise QuantityFormatError(FORMAT_MESSAGE)
    if text == "0":
        return text
    parts = _split(text)
    base, exponent, quantity_format = _interpret(parts.suffix)
    if _kept_as_written(parts, exponent, quantity_format):
        return text
    return _formatted(_decoded(parts, base, exponent, quantity_format), quantity_format)


def canonicalize_resource_lists(kind: str, obj: dict[str, Any]) -> None:
    """Every quantity in the object's resource lists (RESOURCE_LISTS) in kube-apiserver's form,
    in place; QuantityFormatError names the first one it would refuse."""
    for path in RESOURCE_LISTS.get(kind, ()):
        for values in _found(obj, path):
            for name, written in values.items():
                values[name] = canonical_quantity(written)


def _found(node: Any, path: tuple[str, ...]) -> list[dict[str, Any]]:
    """The maps at `path` under `node` (what is missing, or of another type on the way, is
    skipped); a resource list that is not a map is refused, as Go's decoder refuses it."""
    if not path:
        if not isinstance(node, dict):
            raise QuantityFormatError(f"cannot unmarshal {node!r} into a v1.ResourceList")
        return [node]
    head, rest = path[0], path[1:]
    if head == "*":
        items = node if isinstance(node, list) else []
        return [found for item in items for found in _found(item, rest)]
    child = node.get(head) if isinstance(node, dict) else None
    return _found(child, rest) if child is not None else []
