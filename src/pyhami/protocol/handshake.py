"""Handshake values, `hami.io/node-handshake[-<vendor>]`.

HAMi's NVIDIA device plugin no longer answers: its scheduler writes the request once and then
judges an NVIDIA node by its allocatable GPUs alone (docs/hami-compatibility.md).

The scheduler writes `Requesting_<YYYY-MM-DD HH:MM:SS>` in its local wall-clock time; other
device plugins answer `Reported …`. Reading is total, as in HAMi's `CheckHealth`: a value
containing `Requesting` is a request (its time is None when there is no `_` or the text
after the first `_` is not a wall-clock time); anything else counts as reported.
"""

from dataclasses import dataclass
from datetime import datetime

from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.times import format_wall_clock, parse_wall_clock

REQUESTING = "Requesting"


@dataclass(frozen=True, slots=True)
class Handshake:
    """A parsed handshake value; `requested_at` is a naive wall-clock time."""

    requesting: bool
    requested_at: datetime | None = None


def format_handshake_request(now: datetime) -> str:
    """`Requesting_<now>`, `now` being the writer's local wall-clock time."""
    return f"{REQUESTING}_{format_wall_clock(now)}"


def parse_handshake(value: str) -> Handshake:
    if REQUESTING not in value:
        return Handshake(requesting=False)
    _, underscore, stamp = value.partition("_")
    if not underscore:
        return Handshake(requesting=True)
    try:
        return Handshake(requesting=True, requested_at=parse_wall_clock(stamp))
    except ProtocolError:
        return Handshake(requesting=True)  # HAMi treats an unreadable time as "still fresh"
