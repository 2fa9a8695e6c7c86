"""Container devices and pod devices: the to-allocate / allocated annotations.

    pod-value := { container ";" }      container := { device ":" }
    device    := UUID "," Type "," Usedmem "," Usedcores

Decoding is HAMi's `DecodeContainerDevices` / `DecodePodDevices` (per vendor) exactly: `;`
splits with Go's `strings.Split` (so a trailing `;` yields one more, empty, container:
decode→encode of `A:;` is `A:;;`, kept as HAMi does it), parts of a container without `,` are
skipped, fields past the fourth are ignored, and only Usedmem/Usedcores are parsed (Go
`ParseInt(s, 10, 32)`). `Idx` and `Slots` do not travel and decode as 0.

Placeholders. HAMi HEAD writes placeholders only for containers whose
node device `Type` equals the vendor key, so for NVIDIA the value lists only the containers
that got GPUs (dense), while its device plugin and init-container accounting assume one
segment per container. pyhami **writes one segment per pod container, init containers
first, then app containers** (the legacy form that HAMi's decoders and docs describe). The
decoder is the same for both forms, so HAMi's dense values decode too; which container a dense
segment belongs to is the reader's business (HAMi's device plugin pops the first non-empty one).

Encoding is HAMi's `EncodeContainerDevices` / `EncodePodSingleDevice` byte for byte, except
that values the grammar cannot carry are refused (a `,` `:` `;` in UUID or Type, numbers
outside int32).
"""

from collections.abc import Sequence

from pyhami.model import ContainerDevice, ContainerDevices, PodSingleDevice
from pyhami.protocol.errors import ProtocolError, check_int32, parse_field
from pyhami.protocol.goparse import parse_int32

FIELD = "container devices"
MISSING_FIELDS = "pod annotation format error, missing fields, do not use nodeName in task spec"


def decode_container_devices(value: str) -> ContainerDevices:
    """HAMi `DecodeContainerDevices`: one container's `uuid,type,mem,cores:` list."""
    devices = []
    for part in value.split(":"):
        if "," not in part:
            continue  # HAMi skips these silently (empty parts, a missing final ':')
        fields = part.split(",")
        if len(fields) < 4:
            raise ProtocolError(FIELD, value, MISSING_FIELDS)
        devices.append(
            ContainerDevice(
                uuid=fields[0],
                type=fields[1],
                usedmem=parse_field(FIELD, value, "memory", fields[2], parse_int32),
                usedcores=parse_field(FIELD, value, "core", fields[3], parse_int32),
            )
        )
    return tuple(devices)


def decode_pod_single_device(value: str, field: str = "pod devices") -> PodSingleDevice:
    """One vendor's pod-devices value: every `;`-separated part, empty ones included.

    An error names `field` (the annotation key when known) and carries the whole value."""
    try:
        return tuple(decode_container_devices(part) for part in value.split(";"))
    except ProtocolError as err:
        raise ProtocolError(field, value, err.reason) from None


def encode_container_devices(devices: Sequence[ContainerDevice]) -> str:
    """HAMi `EncodeContainerDevices`: every device as `uuid,type,mem,cores:`."""
    return "".join(_encode_device(device) for device in devices)


def _encode_device(device: ContainerDevice) -> str:
    for name, text in (("uuid", device.uuid), ("type", device.type)):
        if any(sep in text for sep in ",:;"):
            raise ProtocolError(FIELD, text, f"device {name} contains ',', ':' or ';'")
    for name, number in (("usedmem", device.usedmem), ("usedcores", device.usedcores)):
        check_int32(FIELD, f"device {device.uuid} {name}", number)
    return f"{device.uuid},{device.type},{device.usedmem},{device.usedcores}:"


def encode_pod_single_device(containers: Sequence[Sequence[ContainerDevice]]) -> str:
    """HAMi `EncodePodSingleDevice`: each container's devices followed by `;`."""
    return "".join(encode_container_devices(devices) + ";" for devices in containers)
