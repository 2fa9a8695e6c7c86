"""Go's `strconv` and `strings` primitives, reproduced exactly as HAMi's decoders use them.

`ParseInt(s, 10, bits)`, `Atoi`, `ParseBool`, `%q` quoting, `strings.TrimSpace` and
`strings.ToUpper` differ from Python's `int()`, `str.strip()` and `str.upper()` in the
details (`int(" 1_0 ")` is 10 in Python and an error in Go), and those details decide
which annotation values HAMi accepts. Every function here either returns the Go result or
raises a `GoSyntaxError` / `GoRangeError` whose text is Go's `*NumError` text.
"""

import re

from pyhami.protocol.arithmetic import INT64_MAX

_DECIMAL = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)

_TRUE_WORDS = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE_WORDS = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}
# unicode.IsSpace (what strings.TrimSpace trims); Python's str.strip() also trims \x1c-\x1f.
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


class GoNumError(ValueError):
    """Go's `*strconv.NumError`: `strconv.<func>: parsing "<num>": <why>`."""

    def __init__(self, func: str, num: str, why: str) -> None:
        self.func = func
        self.num = num
        super().__init__(f"strconv.{func}: parsing {go_quote(num)}: {why}")


class GoSyntaxError(GoNumError):
    def __init__(self, func: str, num: str) -> None:
        super().__init__(func, num, "invalid syntax")


class GoRangeError(GoNumError):
    def __init__(self, func: str, num: str) -> None:
        super().__init__(func, num, "value out of range")


def go_quote(text: str) -> str:
    """Go `strconv.Quote` (what `%q` prints): double quotes, Go escapes for the rest."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")  # Go holds no lone surrogates; it would have U+FFFD
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif char == " " or char.isprintable():
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _parse_signed(func: str, text: str, bits: int) -> int:
    """ParseInt(text, 10, bits) with errors reported under `func`."""
    if _DECIMAL.fullmatch(text):  # the common case; int() agrees with Go on this grammar
        value = int(text)
        if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            return value
        raise GoRangeError(func, text)
    if text == "":
        raise GoSyntaxError(func, text)
    digits = text[1:] if text[0] in "+-" else text
    if digits == "":
        raise GoSyntaxError(func, text)
    limit = 2**bits - 1  # ParseUint's bound; the signed bound is checked after the loop
    value = 0
    for char in digits:
        if not "0" <= char <= "9":
            raise GoSyntaxError(func, text)
        value = value * 10 + (ord(char) - 48)
        if value > limit:
            raise GoRangeError(func, text)
    if text[0] == "-":
        if value > 2 ** (bits - 1):
            raise GoRangeError(func, text)
        return -value
    if value > 2 ** (bits - 1) - 1:
        raise GoRangeError(func, text)
    return value


def parse_int(text: str, bits: int = 64) -> int:
    """Go `strconv.ParseInt(text, 10, bits)`: optional sign, ASCII digits, in range."""
    return _parse_signed("ParseInt", text, bits)


def parse_int32(text: str) -> int:
    """Go `strconv.ParseInt(text, 10, 32)`: how HAMi reads an int32 device quantity."""
    return _parse_signed("ParseInt", text, 32)


def atoi(text: str) -> int:
    """Go `strconv.Atoi` on a 64-bit platform."""
    return _parse_signed("Atoi", text, 64)


def parse_bool(text: str) -> bool:
    """Go `strconv.ParseBool`: exactly 1 t T TRUE true True / 0 f F FALSE false False."""
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    raise GoSyntaxError("ParseBool", text)


def trim_space(text: str) -> str:
    """Go `strings.TrimSpace`."""
    return text.strip(GO_SPACE)


def to_upper(text: str) -> str:
    """Go `strings.ToUpper`: simple (one-to-one) case mapping, so `ß` stays `ß`."""
    return "".join(upper if len(upper := char.upper()) == 1 else char for char in text)


class GoDurationError(ValueError):
    """Go's `time.ParseDuration` error: `time: invalid duration "<text>"` and its kin."""


_DURATION_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def parse_duration(text: str) -> float:
    """Go `time.ParseDuration` in seconds: `[-+]` then `<number><unit>`…, or a bare `0`.

    Summed in integer nanoseconds like Go, so `1.5h`, `1h30m` and `90m` agree exactly, and a
    total past int64 nanoseconds is refused as Go refuses it."""
    invalid = GoDurationError(f"time: invalid duration {go_quote(text)}")
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return 0.0
    if rest == "":
        raise invalid
    total_ns = 0
    while rest:
        part = _DURATION_PART.match(rest)
        assert part is not None  # every group may be empty, so the pattern always matches
        whole, fraction, unit = part.group(1), part.group(2) or "", part.group(3)
        if whole == "" and fraction == "":
            raise invalid
        if unit == "":
            raise GoDurationError(f"time: missing unit in duration {go_quote(text)}")
        if unit not in _DURATION_UNIT_NS:
            raise GoDurationError(
                f"time: unknown unit {go_quote(unit)} in duration {go_quote(text)}"
            )
        scale = _DURATION_UNIT_NS[unit]
        total_ns += int(whole or "0") * scale
        if fraction:
            total_ns += int(fraction) * scale // 10 ** len(fraction)
        if total_ns > INT64_MAX:
            raise invalid
        rest = rest[part.end() :]
    return -total_ns / 1e9 if negative else total_ns / 1e9
