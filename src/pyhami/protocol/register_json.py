"""Node device register, JSON form: `hami.io/node-nvidia-register` and the
other JSON vendors.

Encoding is byte-exact with HAMi v2.10 `MarshalNodeDevices`: keys `id, index, count, devmem,
devcore, type, numa, mode, migProfiles, health`, each omitted when zero; inside a MIG
profile nothing is omitted and `placements` may be `null`. `custom_info` and
`device_vendor` are never written (HAMi neither).

Decoding is Go's `json.Unmarshal` (see `gojson`): missing fields are zero, so a missing
`mode` stays `""` (unlike the colon form's `hami-core`) and a missing `health` is false;
`null` is the empty list. Deviation: a `null` *element* is refused (HAMi would keep a nil
pointer and crash later).
"""

from collections.abc import Sequence
from types import MappingProxyType

from pyhami.model import DeviceInfo, MigProfile
from pyhami.protocol.arithmetic import INT64_MAX, INT64_MIN, UINT32_MAX, UINT64_MAX
from pyhami.protocol.errors import check_int32, check_range
from pyhami.protocol.gojson import FieldNames, Reader, dumps
from pyhami.protocol.mig import read_placement

FIELD = "node device register"
_DEVICE_FIELDS = FieldNames(
    "id",
    "index",
    "count",
    "devmem",
    "devcore",
    "type",
    "numa",
    "mode",
    "migProfiles",
    "health",
    "custominfo",
    "devicevendor",
    "migtemplate",
)
_PROFILE_FIELDS = FieldNames("name", "memoryMB", "core", "sliceCount", "placements")


def decode_node_devices_json(value: str) -> tuple[DeviceInfo, ...]:
    """HAMi `UnMarshalNodeDevices`: the register JSON array to devices, in order."""
    reader = Reader(FIELD, value)
    devices = reader.parse(
        lambda doc: reader.array("devices", doc, lambda w, v: _device(reader, w, v))
    )
    return devices or ()


def _device(reader: Reader, where: str, value: object) -> DeviceInfo:
    if value is None:
        raise reader.fail(where, "a device entry is null")
    fields = reader.fields(where, value, _DEVICE_FIELDS)
    custom = fields.get("custominfo")
    # migtemplate is a legacy field nothing reads; Go would only check its shape.
    template = fields.get("migtemplate")
    if template is not None and not isinstance(template, list):
        raise reader.mismatch(f"{where}.migtemplate", template, "slice")
    profiles = reader.array(
        f"{where}.migProfiles", fields.get("migProfiles"), lambda w, v: _profile(reader, w, v)
    )
    return DeviceInfo(
        id=reader.string(f"{where}.id", fields.get("id")),
        index=reader.integer(f"{where}.index", fields.get("index"), "uint", 0, UINT64_MAX),
        count=reader.int32(f"{where}.count", fields.get("count")),
        devmem=reader.int32(f"{where}.devmem", fields.get("devmem")),
        devcore=reader.int32(f"{where}.devcore", fields.get("devcore")),
        type=reader.string(f"{where}.type", fields.get("type")),
        numa=reader.go_int(f"{where}.numa", fields.get("numa")),
        mode=reader.string(f"{where}.mode", fields.get("mode")),
        mig_profiles=profiles or (),
        health=reader.boolean(f"{where}.health", fields.get("health")),
        custom_info=None
        if custom is None
        else MappingProxyType(reader.mapping(f"{where}.custominfo", custom, reader.anything)),
        device_vendor=reader.string(f"{where}.devicevendor", fields.get("devicevendor")),
    )


def _profile(reader: Reader, where: str, value: object) -> MigProfile:
    # A null profile or placement is Go's zero value (they are slices of values).
    fields = reader.fields(where, value, _PROFILE_FIELDS)
    placements = reader.array(
        f"{where}.placements", fields.get("placements"), lambda w, v: read_placement(reader, w, v)
    )
    return MigProfile(
        name=reader.string(f"{where}.name", fields.get("name")),
        memory_mb=reader.int32(f"{where}.memoryMB", fields.get("memoryMB")),
        core=reader.int32(f"{where}.core", fields.get("core")),
        slice_count=reader.int32(f"{where}.sliceCount", fields.get("sliceCount")),
        placements=placements,
    )


def encode_node_devices(devices: Sequence[DeviceInfo]) -> str:
    """HAMi `MarshalNodeDevices`, byte for byte. Refuses numbers its Go types cannot hold."""
    return dumps([_device_json(i, device) for i, device in enumerate(devices)])


def _check(where: str, number: int, low: int, high: int) -> int:
    return check_range(FIELD, where, number, low, high)


def _device_json(i: int, device: DeviceInfo) -> dict[str, object]:
    at = f"devices[{i}]"
    body: dict[str, object] = {
        "id": device.id,
        "index": _check(f"{at}.index", device.index, 0, UINT64_MAX),
        "count": check_int32(FIELD, f"{at}.count", device.count),
        "devmem": check_int32(FIELD, f"{at}.devmem", device.devmem),
        "devcore": check_int32(FIELD, f"{at}.devcore", device.devcore),
        "type": device.type,
        "numa": _check(f"{at}.numa", device.numa, INT64_MIN, INT64_MAX),
        "mode": device.mode,
        "migProfiles": [
            _profile_json(f"{at}.migProfiles[{j}]", p) for j, p in enumerate(device.mig_profiles)
        ],
        "health": device.health,
    }
    return {key: item for key, item in body.items() if item not in ("", 0, False, [])}


def _profile_json(at: str, profile: MigProfile) -> dict[str, object]:
    return {
        "name": profile.name,
        "memoryMB": check_int32(FIELD, f"{at}.memoryMB", profile.memory_mb),
        "core": check_int32(FIELD, f"{at}.core", profile.core),
        "sliceCount": check_int32(FIELD, f"{at}.sliceCount", profile.slice_count),
        "placements": None
        if profile.placements is None
        else [
            {
                "start": _check(f"{at}.placements[{k}].start", p.start, 0, UINT32_MAX),
                "size": _check(f"{at}.placements[{k}].size", p.size, 0, UINT32_MAX),
            }
            for k, p in enumerate(profile.placements)
        ],
    }
