"""The allocation record: what a DRA-prepared container was given, for the vGPU monitor.

A device-plugin pod carries its devices in the `hami.io/vgpu-devices-allocated` annotation; a
pod whose GPUs come through DRA has none. The DRA driver therefore writes this record into the
container's cache folder (beside libvgpu's region, a folder the container sees read-only), and
the monitor reads it when the pod has no allocation annotation:

    {"version":1,"devices":[{"uuid":"GPU-…","memoryMiB":6144,"cores":25}]}

Devices are in the container's order, the order of `CUDA_DEVICE_MEMORY_LIMIT_<i>`. The decoder
is strict, unlike HAMi's annotation decoders: the text is bounded (`MAX_RECORD_BYTES`), every
key must be known and present once, every value is range-checked, and anything else raises
`ProtocolError` naming the problem.
"""

import json
import re
from collections.abc import Sequence

from pyhami.model import ContainerDevice, ContainerDevices
from pyhami.protocol.arithmetic import INT32_MAX
from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.keys import NVIDIA_VENDOR

FIELD = "allocation record"
RECORD_FILE_NAME = "allocation.json"
RECORD_VERSION = 1
MAX_RECORD_BYTES = 8192  # 16 devices take about 1.5 KiB
MAX_RECORD_DEVICES = 16  # libvgpu's CUDA_DEVICE_MAX_COUNT
MAX_CORES = 100
# An NVML UUID (`GPU-…`, `MIG-…`), at most 95 characters: libvgpu keeps 96 bytes with the NUL.
_UUID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,94}", re.ASCII)
_RECORD_KEYS = ("version", "devices")
_DEVICE_KEYS = ("uuid", "memoryMiB", "cores")


def encode_allocation_record(devices: Sequence[ContainerDevice]) -> str:
    """The record for one container's NVIDIA devices; refuses what `decode` would refuse."""
    for device in devices:
        if device.type != NVIDIA_VENDOR:
            raise ProtocolError(FIELD, device.type, f"device type is not {NVIDIA_VENDOR}")
    record = {
        "version": RECORD_VERSION,
        "devices": [
            {"uuid": d.uuid, "memoryMiB": d.usedmem, "cores": d.usedcores} for d in devices
        ],
    }
    text = json.dumps(record, separators=(",", ":"))
    decode_allocation_record(text)  # one definition of valid, shared with the reader
    return text


def decode_allocation_record(text: str) -> ContainerDevices:
    """The devices of a record (type NVIDIA); raises ProtocolError on anything else."""
    if len(text) > MAX_RECORD_BYTES:
        raise ProtocolError(FIELD, text, f"longer than {MAX_RECORD_BYTES} characters")
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise ProtocolError(FIELD, text, "JSON nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, duplicate keys, NaN, a 5,000-digit number
        raise ProtocolError(FIELD, text, f"invalid JSON: {err}") from None
    record = _object(text, "record", document, _RECORD_KEYS)
    version = record["version"]
    if type(version) is not int or version != RECORD_VERSION:
        raise ProtocolError(FIELD, text, f"version is {version!r}, only {RECORD_VERSION} is read")
    listed = record["devices"]
    if not isinstance(listed, list) or not 0 < len(listed) <= MAX_RECORD_DEVICES:
        raise ProtocolError(
            FIELD, text, f"devices must be a list of 1..{MAX_RECORD_DEVICES} devices"
        )
    devices = tuple(_device(text, index, item) for index, item in enumerate(listed))
    uuids = [device.uuid for device in devices]
    if len(set(uuids)) != len(uuids):
        raise ProtocolError(FIELD, text, "a device uuid is listed twice")
    return devices


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("an object has a key twice")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number")


def _object(text: str, where: str, value: object, keys: tuple[str, ...]) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ProtocolError(FIELD, text, f"{where} is not an object")
    if sorted(value) != sorted(keys):
        raise ProtocolError(
            FIELD, text, f"{where} has keys {sorted(value)}, want exactly {sorted(keys)}"
        )
    return value


def _int(text: str, where: str, value: object, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ProtocolError(FIELD, text, f"{where} is {value!r}, not an integer in {low}..{high}")
    return value


def _device(text: str, index: int, item: object) -> ContainerDevice:
    where = f"devices[{index}]"
    device = _object(text, where, item, _DEVICE_KEYS)
    uuid = device["uuid"]
    if not isinstance(uuid, str) or not _UUID.fullmatch(uuid):
        raise ProtocolError(
            FIELD, text, f"{where}.uuid {uuid!r} is not a GPU uuid (letters, digits, ._/-)"
        )
    return ContainerDevice(
        uuid=uuid,
        type=NVIDIA_VENDOR,
        usedmem=_int(text, f"{where}.memoryMiB", device["memoryMiB"], 1, INT32_MAX),
        usedcores=_int(text, f"{where}.cores", device["cores"], 0, MAX_CORES),
    )
