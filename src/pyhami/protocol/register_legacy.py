"""Node device register, legacy colon form: Hygon DCU, Iluvatar.

`id,count,devmem,devcore,type,numa,health[,index,mode]:` per device. The encoder always
writes the 9-field form (as HAMi's `EncodeNodeDevices`) but, unlike HAMi, refuses values it
cannot represent: text containing `,` or `:` (there is no escaping), numbers outside the Go
types, and MIG profiles (the form has no place for them). The decoder is HAMi's
`DecodeNodeDevices` exactly, including its tolerance for empty segments and its error texts.

Deviation (unstable round trip): HAMi encodes an empty device list as `""`, which its own
decoder rejects (`missing device separator`); pyhami writes `":"`, which both decode to the
empty list.
"""

from collections.abc import Sequence

from pyhami.model import DeviceInfo
from pyhami.protocol.arithmetic import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from pyhami.protocol.errors import ProtocolError, check_range, parse_field
from pyhami.protocol.goparse import atoi, go_quote, parse_bool, parse_int32

FIELD = "node device register (colon form)"
_LEGACY_MODE = "hami-core"  # what a 7-field entry means


def decode_node_devices_legacy(value: str) -> tuple[DeviceInfo, ...]:
    """HAMi `DecodeNodeDevices`: devices in input order; any bad field fails the whole value."""
    if ":" not in value:
        raise ProtocolError(FIELD, value, "node annotation missing device separator")
    return tuple(_device(value, segment) for segment in value.split(":") if segment)


def _device(value: str, segment: str) -> DeviceInfo:
    if "," not in segment:
        raise ProtocolError(FIELD, value, f"malformed node annotation segment: {go_quote(segment)}")
    fields = segment.split(",")
    if len(fields) not in (7, 9):
        why = f"unexpected field count {len(fields)} in node annotation"
        raise ProtocolError(FIELD, value, why)
    count = parse_field(FIELD, value, "count", fields[1], parse_int32)
    devmem = parse_field(FIELD, value, "memory", fields[2], parse_int32)
    devcore = parse_field(FIELD, value, "core", fields[3], parse_int32)
    # HAMi reads health before numa, so a value bad in both fails on health.
    health = parse_field(FIELD, value, "health", fields[6], parse_bool)
    numa = parse_field(FIELD, value, "numa", fields[5], atoi)
    index, mode = 0, _LEGACY_MODE
    if len(fields) == 9:
        index = parse_field(FIELD, value, "index", fields[7], atoi)
        if index < 0:
            raise ProtocolError(FIELD, value, f"index field must not be negative: {index}")
        mode = fields[8]
    return DeviceInfo(
        id=fields[0],
        index=index,
        count=count,
        devmem=devmem,
        devcore=devcore,
        type=fields[4],
        numa=numa,
        mode=mode,
        health=health,
    )


def encode_node_devices_legacy(devices: Sequence[DeviceInfo]) -> str:
    """HAMi `EncodeNodeDevices`: the 9-field form, every device terminated by `:`."""
    return "".join(_encode_device(i, device) for i, device in enumerate(devices)) or ":"


def _encode_device(i: int, device: DeviceInfo) -> str:
    at = f"devices[{i}]"
    if device.mig_profiles:
        raise ProtocolError(FIELD, device.id, f"{at} has MIG profiles; the colon form has none")
    for name, text in (("id", device.id), ("type", device.type), ("mode", device.mode)):
        if "," in text or ":" in text:
            raise ProtocolError(FIELD, text, f"{at}.{name} contains ',' or ':' (no escaping)")
    for name, number, low, high in (
        ("count", device.count, INT32_MIN, INT32_MAX),
        ("devmem", device.devmem, INT32_MIN, INT32_MAX),
        ("devcore", device.devcore, INT32_MIN, INT32_MAX),
        ("numa", device.numa, INT64_MIN, INT64_MAX),
        ("index", device.index, 0, INT64_MAX),
    ):
        check_range(FIELD, f"{at}.{name}", number, low, high)
    health = "true" if device.health else "false"
    return (
        f"{device.id},{device.count},{device.devmem},{device.devcore},{device.type},"
        f"{device.numa},{health},{device.index},{device.mode}:"
    )
