"""The three time encodings of the protocol. Times are always passed in.

* unix seconds as decimal (`hami.io/vgpu-time`, `hami.io/bind-time`): `format_unix_seconds`;
* Go `time.DateTime` `YYYY-MM-DD HH:MM:SS`, a wall-clock time without zone (handshake);
* RFC 3339 with second precision and the writer's offset, `Z` for UTC (node lock).

Parsing follows Go's `time.Parse` (for RFC 3339 its fast path, then its general parser as
fallback, which is the more tolerant of the two): four-digit year, two-digit month, day,
minute and second in range (the day checked against the month), a one- or two-digit hour,
an optional `.` or `,` fraction (kept to the microsecond), then for RFC 3339 `Z` or
`±hh:mm` with hh ≤ 24 and mm ≤ 60. Deviation: an offset of 24 h or more, which Go accepts
and Python cannot represent, is refused.
"""

import re
from datetime import UTC, datetime, timedelta, timezone

from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.goparse import GoNumError, go_quote, parse_int

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?(?P<zone>Z|[+-]\d{2}:\d{2})",
    re.ASCII,
)
_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?(?P<zone>)", re.ASCII
)


def _aware(field: str, moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ProtocolError(field, moment.isoformat(), "a time without a UTC offset is ambiguous")
    return moment


def format_unix_seconds(now: datetime) -> str:
    """Go `strconv.FormatInt(t.Unix(), 10)`: whole seconds since the epoch, floored."""
    return str((_aware("unix time", now) - _EPOCH) // _SECOND)


def parse_unix_seconds(value: str) -> datetime:
    """A unix-seconds annotation (Go `ParseInt(s, 10, 64)`) as a UTC time."""
    try:
        seconds = parse_int(value, 64)
        return _EPOCH + timedelta(seconds=seconds)
    except (GoNumError, OverflowError) as err:
        raise ProtocolError("unix time", value, f"not a unix time in seconds: {err}") from None


def format_rfc3339(moment: datetime) -> str:
    """Go `t.Format(time.RFC3339)`: seconds precision, `Z` for a zero offset."""
    offset = _aware("RFC 3339 time", moment).utcoffset() or timedelta()
    stamp = f"{_date(moment)}T{moment:%H:%M:%S}"
    if not offset:
        return stamp + "Z"
    minutes = int(abs(offset).total_seconds()) // 60  # Go drops offset seconds
    sign = "-" if offset < timedelta() else "+"
    return f"{stamp}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _date(moment: datetime) -> str:
    return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"


def _fields(field: str, layout: str, pattern: re.Pattern[str], value: str) -> tuple[datetime, str]:
    """The naive datetime in `value`'s leading date-time fields, and the text after them."""
    match = pattern.fullmatch(value)
    why = f"parsing time {go_quote(value)} as {go_quote(layout)}"
    if match is None:
        raise ProtocolError(field, value, why)
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    micro = int((match.group(7) or "0")[:6].ljust(6, "0"))
    try:
        moment = datetime(year, month, day, hour, minute, second, micro)
    except ValueError as err:
        raise ProtocolError(field, value, f"{why}: {err}") from None
    return moment, match.group("zone") or ""


def parse_rfc3339(value: str) -> datetime:
    """Go `time.Parse(time.RFC3339, value)`: an aware datetime with the written offset."""
    moment, zone = _fields("RFC 3339 time", "2006-01-02T15:04:05Z07:00", _RFC3339, value)
    if zone == "Z":
        return moment.replace(tzinfo=UTC)
    hours, minutes = int(zone[1:3]), int(zone[4:6])
    delta = timedelta(hours=hours, minutes=minutes)
    if hours > 24 or minutes > 60 or delta >= timedelta(hours=24):
        raise ProtocolError("RFC 3339 time", value, f"time zone offset {zone} out of range")
    return moment.replace(tzinfo=timezone(-delta if zone[0] == "-" else delta))


def format_wall_clock(moment: datetime) -> str:
    """Go `t.Format(time.DateTime)`: the wall-clock fields of `moment`, no zone."""
    return f"{_date(moment)} {moment:%H:%M:%S}"


def parse_wall_clock(value: str) -> datetime:
    """Go `time.ParseInLocation(time.DateTime, value, loc)`: a naive wall-clock datetime."""
    return _fields("wall-clock time", "2006-01-02 15:04:05", _DATETIME, value)[0]
