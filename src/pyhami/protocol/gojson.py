"""Go `encoding/json` semantics for the JSON annotation formats.

Decoding (what `json.Unmarshal` into HAMi's structs accepts): object keys match field names
case-insensitively (Go's simple folding, so U+212A KELVIN SIGN matches `k`), the last
duplicate wins, unknown keys are ignored, `null` leaves the zero value, an integer field
takes only an integer literal in its Go type's range, and type mismatches are errors.
Python's `json` is used for the syntax; numbers are kept as their literal text so the
integer rules can be Go's.

Encoding (what `json.Marshal` writes): compact, struct fields in declaration order (the
caller builds dicts in that order), map keys sorted by the caller, and Go's string escaping:
`<`, `>`, `&`, U+2028 and U+2029 as `\\u00XX`/`\\u20XX`, `\\b \\f \\n \\r \\t` short forms,
other control characters as `\\u00XX`, everything else as raw UTF-8.
"""

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pyhami.protocol.arithmetic import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, UINT32_MAX
from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.goparse import GoNumError, parse_int

_T = TypeVar("_T")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f<>&\u2028\u2029\ud800-\udfff]')


@dataclass(frozen=True, slots=True)
class Number:
    """A JSON number as written, so integer fields can apply Go's rules to the literal."""

    literal: str


@dataclass(frozen=True, slots=True)
class Pairs:
    """A JSON object as its (key, value) pairs in document order (duplicates kept)."""

    items: tuple[tuple[str, object], ...]


def _reject_constant(name: str) -> object:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def loads(field: str, text: str) -> object:
    """Parse JSON syntax; objects become `Pairs`, numbers `Number`, strings get U+FFFD for
    lone surrogates (as Go does for invalid UTF-16 escapes)."""
    try:
        return json.loads(
            text,
            object_pairs_hook=lambda items: Pairs(tuple(items)),
            parse_int=Number,
            parse_float=Number,
            parse_constant=_reject_constant,
        )
    except RecursionError:
        raise ProtocolError(field, text, "JSON nested too deeply") from None
    except ValueError as err:
        raise ProtocolError(field, text, f"invalid JSON: {err}") from None


def clean_text(text: str) -> str:
    return _LONE_SURROGATE.sub("\ufffd", text)


def _fold(name: str) -> str:
    """Go's simple case folding, restricted to what can equal an ASCII field name."""
    if name.isascii():
        return name.lower()
    return "".join(
        "k" if c == "\u212a" else "s" if c == "\u017f" else c.lower() if c.isascii() else c
        for c in name
    )


class FieldNames:
    """A Go struct's JSON field names, folded once for matching."""

    def __init__(self, *names: str) -> None:
        self.exact = frozenset(names)
        self.folded = {_fold(name): name for name in names}

    def match(self, key: str) -> str | None:
        return key if key in self.exact else self.folded.get(_fold(key))


def describe(value: object) -> str:
    """The JSON type word Go uses in its unmarshal errors."""
    if isinstance(value, Pairs):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Number):
        return f"number {value.literal}"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "null"


class Reader:
    """Typed reads from decoded JSON for one annotation; every failure is a ProtocolError."""

    def __init__(self, field: str, text: str) -> None:
        self.field = field
        self.text = text

    def parse(self, read: Callable[[object], _T]) -> _T:
        """Parse the text and `read` the document; nesting deeper than Python can follow
        (about 1000 levels, in the syntax or while reading) is a ProtocolError too."""
        try:
            return read(loads(self.field, self.text))
        except RecursionError:
            raise ProtocolError(self.field, self.text, "JSON nested too deeply") from None

    def fail(self, where: str, why: str) -> ProtocolError:
        return ProtocolError(self.field, self.text, f"{where}: {why}")

    def mismatch(self, where: str, value: object, go_type: str) -> ProtocolError:
        return self.fail(where, f"cannot unmarshal {describe(value)} into Go type {go_type}")

    def fields(self, where: str, value: object, names: FieldNames) -> dict[str, object]:
        """The fields of one JSON object, matched to `names` the way Go's decoder does
        (`null` leaves a struct zero: no fields)."""
        if value is None:
            return {}
        if not isinstance(value, Pairs):
            raise self.mismatch(where, value, "struct")
        found: dict[str, object] = {}
        for key, item in value.items:
            name = names.match(key)
            if name is not None:
                found[name] = item  # a later duplicate (in any case) wins, as in Go
        return found

    def string(self, where: str, value: object) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.mismatch(where, value, "string")
        return clean_text(value)

    def boolean(self, where: str, value: object) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.mismatch(where, value, "bool")
        return value

    def integer(self, where: str, value: object, go_type: str, low: int, high: int) -> int:
        if value is None:
            return 0
        if not isinstance(value, Number):
            raise self.mismatch(where, value, go_type)
        try:
            number = parse_int(value.literal, 64) if low < 0 else _parse_uint(value.literal)
        except GoNumError:
            raise self.mismatch(where, value, go_type) from None
        if not low <= number <= high:
            raise self.mismatch(where, value, go_type)
        return number

    def go_int(self, where: str, value: object) -> int:
        """A Go `int` (64 bits)."""
        return self.integer(where, value, "int", INT64_MIN, INT64_MAX)

    def int32(self, where: str, value: object) -> int:
        """A Go `int32` field: HAMi's device quantities."""
        return self.integer(where, value, "int32", INT32_MIN, INT32_MAX)

    def uint32(self, where: str, value: object) -> int:
        return self.integer(where, value, "uint32", 0, UINT32_MAX)

    def optional_integer(
        self, where: str, value: object, go_type: str, low: int, high: int
    ) -> int | None:
        return None if value is None else self.integer(where, value, go_type, low, high)

    def array(
        self, where: str, value: object, item: Callable[[str, object], _T]
    ) -> tuple[_T, ...] | None:
        """None for `null`, else each element read by `item(where[i], element)`."""
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.mismatch(where, value, "slice")
        return tuple(item(f"{where}[{i}]", element) for i, element in enumerate(value))

    def mapping(
        self, where: str, value: object, item: Callable[[str, object], _T]
    ) -> dict[str, _T]:
        if value is None:
            return {}
        if not isinstance(value, Pairs):
            raise self.mismatch(where, value, "map")
        return {clean_text(k): item(f"{where}[{k!r}]", v) for k, v in value.items}

    def anything(self, where: str, value: object) -> object:
        """A Go `any`: objects become dicts, numbers float64."""
        if isinstance(value, Pairs):
            return self.mapping(where, value, self.anything)
        if isinstance(value, list):
            return [self.anything(f"{where}[{i}]", v) for i, v in enumerate(value)]
        if isinstance(value, Number):
            number = float(value.literal)
            if number in (float("inf"), float("-inf")):
                raise self.mismatch(where, value, "float64")
            return number
        if isinstance(value, str):
            return clean_text(value)
        return value


def _parse_uint(literal: str) -> int:
    if literal.startswith(("-", "+")):
        raise GoNumError("ParseUint", literal, "invalid syntax")
    return parse_int(literal, 65)  # 65 bits: the unsigned 64-bit range fits


def dump_string(text: str) -> str:
    if not _NEEDS_ESCAPE.search(text):
        return f'"{text}"'
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char < " ":
            out.append(f"\\u{ord(char):04x}")
        elif "\ud800" <= char <= "\udfff":
            out.append("\ufffd")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def dumps(value: object) -> str:
    """Compact Go-style JSON; dicts are written in their own order (struct field order)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return dump_string(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{dump_string(k)}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
