"""The one error every decoder raises (and every encoder, for values the wire cannot carry)."""

from collections.abc import Callable
from typing import TypeVar

from pyhami.protocol.arithmetic import INT32_MAX, INT32_MIN
from pyhami.protocol.goparse import GoNumError, go_quote

_T = TypeVar("_T")

_SHOWN = 200  # characters of a bad value quoted in a message


class ProtocolError(ValueError):
    """An annotation value (or a value to encode) that breaks its format.

    `field` names what was being read ("node device register", "hami.io/bind-phase", ...),
    `value` is the offending text, `reason` the explanation (HAMi's own error text where
    HAMi has one, so it can be compared). The message always names the field and the bad
    value, so a person can find and fix it.
    """

    field: str
    value: str
    reason: str

    def __init__(self, field: str, value: str, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        message = reason if field in reason else f"{field}: {reason}"
        if go_quote(value[:_SHOWN]) not in message and (value == "" or value not in message):
            shown = go_quote(value[:_SHOWN]) + ("..." if len(value) > _SHOWN else "")
            message = f"{message} (value {shown})"
        super().__init__(message)


def check_range(field: str, where: str, number: int, low: int, high: int) -> int:
    """`number` if the Go type of `where` can hold it, else a ProtocolError (for encoders)."""
    if not low <= number <= high:
        raise ProtocolError(field, str(number), f"{where} {number} is outside [{low}, {high}]")
    return number


def check_int32(field: str, where: str, number: int) -> int:
    """`number` if a Go `int32` (HAMi's device quantities) can hold it, else a ProtocolError."""
    return check_range(field, where, number, INT32_MIN, INT32_MAX)


def parse_field(field: str, value: str, name: str, text: str, parse: Callable[[str], _T]) -> _T:
    """One field of a delimited annotation `value`, read by a Go parser; Go's error names it."""
    try:
        return parse(text)
    except GoNumError as err:
        raise ProtocolError(field, value, f"invalid {name} field: {err}") from None
