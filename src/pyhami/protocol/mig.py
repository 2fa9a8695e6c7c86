"""MIG allocations, `hami.io/vgpu-mig-allocations`.

A JSON array, keys in order `containerIndex, deviceIndex, gpuUUID, profile, placement`,
then the runtime identity `migUUID` (omitted when empty), `gpuInstanceID` and
`computeInstanceID` (omitted when unset; 0 is written when set). `containerIndex` is the
`;` segment of the vendor's pod-devices value (init containers first).

The decoder is HAMi's: `""` means none, then Go JSON, then per entry: negative index, empty
`gpuUUID`/`profile` or `placement.size == 0` is incomplete; 0 or all 3 runtime fields;
no duplicate (container, device). The encoder applies the same checks before writing, so
what it writes always decodes.
"""

from collections.abc import Sequence

from pyhami.model import MigAllocation, MigPlacement
from pyhami.protocol.arithmetic import INT64_MAX, INT64_MIN, UINT32_MAX
from pyhami.protocol.errors import ProtocolError, check_range
from pyhami.protocol.gojson import FieldNames, Reader, dumps

FIELD = "MIG allocations"
_FIELDS = FieldNames(
    "containerIndex",
    "deviceIndex",
    "gpuUUID",
    "profile",
    "placement",
    "migUUID",
    "gpuInstanceID",
    "computeInstanceID",
)
_PLACEMENT_FIELDS = FieldNames("start", "size")


def decode_mig_allocations(value: str) -> tuple[MigAllocation, ...]:
    """HAMi `DecodeMigAllocations`, with its validation."""
    if value == "":
        return ()
    reader = Reader(FIELD, value)

    def entry(where: str, item: object) -> MigAllocation:
        fields = reader.fields(where, item, _FIELDS)
        return MigAllocation(
            container_index=reader.go_int(f"{where}.containerIndex", fields.get("containerIndex")),
            device_index=reader.go_int(f"{where}.deviceIndex", fields.get("deviceIndex")),
            gpu_uuid=reader.string(f"{where}.gpuUUID", fields.get("gpuUUID")),
            profile=reader.string(f"{where}.profile", fields.get("profile")),
            placement=read_placement(reader, f"{where}.placement", fields.get("placement")),
            mig_uuid=reader.string(f"{where}.migUUID", fields.get("migUUID")),
            gpu_instance_id=reader.optional_integer(
                f"{where}.gpuInstanceID", fields.get("gpuInstanceID"), "uint32", 0, UINT32_MAX
            ),
            compute_instance_id=reader.optional_integer(
                f"{where}.computeInstanceID",
                fields.get("computeInstanceID"),
                "uint32",
                0,
                UINT32_MAX,
            ),
        )

    allocations = reader.parse(lambda doc: reader.array("allocations", doc, entry)) or ()
    _validate(value, allocations)
    return allocations


def read_placement(reader: Reader, where: str, value: object) -> MigPlacement:
    """A `{"start", "size"}` placement (`null` is Go's zero value, a value not a pointer)."""
    fields = reader.fields(where, value, _PLACEMENT_FIELDS)
    return MigPlacement(
        start=reader.uint32(f"{where}.start", fields.get("start")),
        size=reader.uint32(f"{where}.size", fields.get("size")),
    )


def _validate(value: str, allocations: Sequence[MigAllocation]) -> None:
    seen: set[tuple[int, int]] = set()
    for i, a in enumerate(allocations):
        if (
            a.container_index < 0
            or a.device_index < 0
            or not a.gpu_uuid
            or not a.profile
            or a.placement.size == 0
        ):
            raise ProtocolError(FIELD, value, f"MIG allocation {i} is incomplete")
        runtime = (
            a.mig_uuid != "",
            a.gpu_instance_id is not None,
            a.compute_instance_id is not None,
        )
        if any(runtime) and not all(runtime):
            raise ProtocolError(FIELD, value, f"MIG allocation {i} has partial runtime identity")
        slot = (a.container_index, a.device_index)
        if slot in seen:
            raise ProtocolError(
                FIELD, value, f"duplicate MIG allocation for container {slot[0]} device {slot[1]}"
            )
        seen.add(slot)


def encode_mig_allocations(allocations: Sequence[MigAllocation]) -> str:
    """The annotation value (compact Go JSON); `[]` for none (HAMi then writes nothing)."""
    rows = []
    for a in allocations:
        row: dict[str, object] = {
            "containerIndex": a.container_index,
            "deviceIndex": a.device_index,
            "gpuUUID": a.gpu_uuid,
            "profile": a.profile,
            "placement": {"start": a.placement.start, "size": a.placement.size},
        }
        if a.mig_uuid:
            row["migUUID"] = a.mig_uuid
        if a.gpu_instance_id is not None:
            row["gpuInstanceID"] = a.gpu_instance_id
        if a.compute_instance_id is not None:
            row["computeInstanceID"] = a.compute_instance_id
        rows.append(row)
    encoded = dumps(rows)
    _validate(encoded, allocations)
    for i, a in enumerate(allocations):
        for name, number in (
            ("containerIndex", a.container_index),
            ("deviceIndex", a.device_index),
        ):
            check_range(FIELD, f"allocations[{i}].{name}", number, INT64_MIN, INT64_MAX)
        for name, unsigned in (
            ("placement.start", a.placement.start),
            ("placement.size", a.placement.size),
            ("gpuInstanceID", a.gpu_instance_id),
            ("computeInstanceID", a.compute_instance_id),
        ):
            if unsigned is not None:
                check_range(FIELD, f"allocations[{i}].{name}", unsigned, 0, UINT32_MAX)
    return encoded
