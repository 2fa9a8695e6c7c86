"""The node lock, `hami.io/mutex.lock`.

Value `<RFC 3339 time>,<namespace>,<pod name>`, or only the time (legacy, no owner). The
time is the writer's clock, passed in; its offset is written as given (`Z` for UTC).
Deviation: HAMi's `ParseNodeLock` returns the owner together with a time
error; here a bad time is simply a ProtocolError. A lock is expired when
`now - time > timeout`.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.times import format_rfc3339, parse_rfc3339

FIELD = "node lock"
SEPARATOR = ","


@dataclass(frozen=True, slots=True)
class NodeLock:
    """A parsed lock: when it was taken and by which pod (both empty for a legacy lock)."""

    time: datetime
    namespace: str = ""
    name: str = ""


def owner_suffix(namespace: str, name: str) -> str:
    """The `,<namespace>,<name>` tail by which HAMi recognises a pod's own lock."""
    return f"{SEPARATOR}{namespace}{SEPARATOR}{name}"


def format_node_lock(now: datetime, namespace: str = "", name: str = "") -> str:
    """HAMi `GenerateNodeLockKeyByPod`; with no namespace and name the legacy time-only form."""
    for what, text in (("namespace", namespace), ("name", name)):
        if SEPARATOR in text:
            raise ProtocolError(FIELD, text, f"pod {what} {text!r} contains ','")
    stamp = format_rfc3339(now)
    if not namespace and not name:
        return stamp
    return stamp + owner_suffix(namespace, name)


def parse_node_lock(value: str) -> NodeLock:
    """HAMi `ParseNodeLock`: the legacy time-only form or exactly three comma parts."""
    if SEPARATOR not in value:
        return NodeLock(time=_time(value, value))
    parts = value.split(SEPARATOR)
    if len(parts) != 3:
        why = f"malformed lock annotation: expected 3 parts, got {len(parts)} from {value}"
        raise ProtocolError(FIELD, value, why)
    return NodeLock(time=_time(value, parts[0]), namespace=parts[1], name=parts[2])


def _time(value: str, stamp: str) -> datetime:
    try:
        return parse_rfc3339(stamp)
    except ProtocolError as err:
        raise ProtocolError(FIELD, value, err.reason) from None


def is_expired(lock: NodeLock, now: datetime, timeout: timedelta) -> bool:
    """HAMi's expiry test: strictly more than `timeout` has passed since the lock was taken."""
    if now.utcoffset() is None:
        raise ProtocolError(FIELD, now.isoformat(), "the current time has no UTC offset")
    return now - lock.time > timeout
