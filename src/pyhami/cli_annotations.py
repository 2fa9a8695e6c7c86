"""`pyhami annotations decode|encode`: HAMi annotation values for people.

`decode KEY VALUE` prints the structure as JSON (or a table with `--table`); `encode KEY
JSON` reads that same JSON and prints the annotation value. The two round-trip except for
pod-devices values, whose decoding has HAMi's one extra empty container (see below). A
VALUE or JSON of `-` is read from stdin. KEY is an annotation key (any vendor's register,
to-allocate/allocated, pair-score, MIG, lock, handshake, bookkeeping, policy or selector
key) or `reasons` for a filter-reason string. Pod-devices values decode as HAMi decodes them,
so the trailing `;` shows as one more, empty, container (as HAMi decodes it).
"""

import dataclasses
import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import typer

from pyhami import protocol
from pyhami.cli_habits import Output, OutputOption, as_data, command_group
from pyhami.model import ContainerDevice, DeviceInfo, DevicePairScore, MigAllocation
from pyhami.protocol import ProtocolError

annotations_app = command_group("annotations", "Decode and encode HAMi annotation values.")


@dataclass(frozen=True, slots=True)
class Format:
    """How one kind of annotation value turns into JSON-able data and back."""

    name: str
    decode: Callable[[str], object]
    encode: Callable[[Any], str]


def _from_text(data: Any) -> str:
    if not isinstance(data, str):
        raise ProtocolError("input", json.dumps(data), "expected a JSON string")
    return data


def _lock_json(data: Any) -> str:
    lock = _build(protocol.NodeLock, data)
    return protocol.format_node_lock(lock.time, lock.namespace, lock.name)


def _handshake_json(data: Any) -> str:
    handshake = _build(protocol.Handshake, data)
    if not handshake.requesting or handshake.requested_at is None:
        raise ProtocolError("input", json.dumps(data), "only a request with a time can be encoded")
    return protocol.format_handshake_request(handshake.requested_at)


def _reasons_json(data: Any) -> str:
    entries = _build(tuple[protocol.ReasonCount, ...], data)
    totals = {entry.total for entry in entries}
    if len(totals) > 1:
        raise ProtocolError("input", json.dumps(data), "all entries must share one total")
    return protocol.format_reasons(
        {e.reason: e.count for e in entries}, totals.pop() if totals else 0
    )


def _register(form: protocol.RegisterForm) -> Format:
    if form is protocol.RegisterForm.COLON:
        return Format(
            "node device register (colon form)",
            protocol.decode_node_devices_legacy,
            lambda data: protocol.encode_node_devices_legacy(_build(tuple[DeviceInfo, ...], data)),
        )
    return Format(
        "node device register (JSON)",
        protocol.decode_node_devices_json,
        lambda data: protocol.encode_node_devices(_build(tuple[DeviceInfo, ...], data)),
    )


POD_DEVICES = Format(
    "pod devices",
    protocol.decode_pod_single_device,
    lambda data: protocol.encode_pod_single_device(
        _build(tuple[tuple[ContainerDevice, ...], ...], data)
    ),
)
PAIR_SCORES = Format(
    "device pair scores",
    protocol.decode_pair_scores,
    lambda data: protocol.encode_pair_scores(_build(tuple[DevicePairScore, ...], data)),
)
MIG_ALLOCATIONS = Format(
    "MIG allocations",
    protocol.decode_mig_allocations,
    lambda data: protocol.encode_mig_allocations(_build(tuple[MigAllocation, ...], data)),
)
NODE_LOCK = Format("node lock", protocol.parse_node_lock, _lock_json)
HANDSHAKE = Format("handshake", protocol.parse_handshake, _handshake_json)
UNIX_TIME = Format(
    "unix seconds",
    protocol.parse_unix_seconds,
    lambda data: protocol.format_unix_seconds(_build(datetime, data)),
)
BIND_PHASE = Format(
    "bind phase",
    protocol.parse_bind_phase,
    lambda data: str(protocol.parse_bind_phase(_from_text(data))),
)
WEIGHTS = Format(
    "device scoring weights",
    protocol.parse_device_scoring_weights,
    lambda data: protocol.format_device_scoring_weights(
        _build(protocol.DeviceScoringWeights, data)
    ),
)
COMMA_LIST = Format(
    "comma list", protocol.split_list, lambda data: ",".join(_build(tuple[str, ...], data))
)
REASONS = Format("filter reasons", protocol.parse_reasons, _reasons_json)
TEXT = Format("text", str, _from_text)


def _formats() -> dict[str, Format]:
    """Every key this command knows, mapped to its format."""
    formats: dict[str, Format] = {"reasons": REASONS}
    for vendor in protocol.VENDORS.values():
        if vendor.register and vendor.register_form is not protocol.RegisterForm.VENDOR_JSON:
            formats[vendor.register] = _register(vendor.register_form)
        if vendor.handshake:
            formats[vendor.handshake] = HANDSHAKE
        formats.update({key: POD_DEVICES for key in (vendor.to_allocate, vendor.allocated) if key})
        selectors = (vendor.use_uuid, vendor.nouse_uuid, vendor.use_type, vendor.nouse_type)
        formats.update({key: COMMA_LIST for key in selectors if key})
    formats.update(
        {
            protocol.KEY_NODE_NVIDIA_SCORE: PAIR_SCORES,
            protocol.KEY_MIG_ALLOCATIONS: MIG_ALLOCATIONS,
            protocol.KEY_NODE_LOCK: NODE_LOCK,
            protocol.KEY_BIND_PHASE: BIND_PHASE,
            protocol.KEY_BIND_TIME: UNIX_TIME,
            protocol.KEY_VGPU_TIME: UNIX_TIME,
            protocol.KEY_VGPU_NODE: TEXT,
            protocol.KEY_DEVICE_SCORING_WEIGHTS: WEIGHTS,
            protocol.KEY_GPU_SCHEDULER_POLICY: COMMA_LIST,
            protocol.KEY_NODE_SCHEDULER_POLICY: TEXT,
            protocol.KEY_DEVICE_CORDON: COMMA_LIST,
            protocol.KEY_NVIDIA_VGPU_MODE: TEXT,
            protocol.KEY_NVIDIA_NUMA_BIND: TEXT,
        }
    )
    return formats


# --- dataclasses <-> JSON-able data -------------------------------------------------------


def _plain(value: object) -> object:
    """Model values as JSON-able data: dataclasses as objects, tuples as lists, times ISO."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _build(hint: Any, data: Any, where: str = "input") -> Any:
    """The value of type `hint` that `_plain` would have turned into `data`."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _build(inner, data, where)
    if origin is tuple:
        if not isinstance(data, list):
            raise _wrong(where, data, "a list")
        return tuple(_build(args[0], item, f"{where}[{i}]") for i, item in enumerate(data))
    if origin is Mapping or hint is Mapping:
        if not isinstance(data, dict):
            raise _wrong(where, data, "an object")
        value_type = args[1] if args else object
        return types.MappingProxyType(
            {k: _build(value_type, v, f"{where}.{k}") for k, v in data.items()}
        )
    if dataclasses.is_dataclass(hint):
        return _build_record(hint, data, where)
    if hint is datetime:
        try:
            return datetime.fromisoformat(data)
        except (TypeError, ValueError):
            raise _wrong(where, data, "an ISO 8601 time with offset") from None
    if hint is object:
        return data
    if hint is bool and not isinstance(data, bool):
        raise _wrong(where, data, "true or false")
    if hint is int and (isinstance(data, bool) or not isinstance(data, int)):
        raise _wrong(where, data, "an integer")
    if hint is str and not isinstance(data, str):
        raise _wrong(where, data, "a string")
    return data


def _build_record(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise _wrong(where, data, f"an object with the fields of {cls.__name__}")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ProtocolError(
            where, json.dumps(data), f"unknown field(s) {unknown}; known: {sorted(names)}"
        )
    try:
        return cls(**{k: _build(hints[k], v, f"{where}.{k}") for k, v in data.items()})
    except TypeError as err:
        raise ProtocolError(
            where, json.dumps(data), f"cannot build {cls.__name__}: {err}"
        ) from None


def _wrong(where: str, data: object, expected: str) -> ProtocolError:
    return ProtocolError(where, json.dumps(data), f"expected {expected}")


# --- output ---------------------------------------------------------------------------------


def _rows(data: object) -> list[dict[str, object]]:
    """Flat rows for `--table`: one per record, containers of pod devices numbered."""
    if isinstance(data, dict):
        return [{"field": key, "value": value} for key, value in data.items()]
    if not isinstance(data, list):
        return [{"value": data}]
    rows: list[dict[str, object]] = []
    for i, item in enumerate(data):
        if isinstance(item, list):  # a pod-devices container
            rows.extend({"container": i, **device} for device in item if isinstance(device, dict))
            if not item:
                rows.append({"container": i})
        elif isinstance(item, dict):
            rows.append(item)
        else:
            rows.append({"value": item})
    return rows


def _table(rows: Sequence[dict[str, object]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    if not columns:
        return "(empty)"
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _read(argument: str) -> str:
    return sys.stdin.read().rstrip("\n") if argument == "-" else argument


def _format_for(key: str) -> Format:
    formats = _formats()
    if key not in formats:
        typer.echo(f"error: unknown annotation key {key!r}; known keys:", err=True)
        for known in sorted(formats):
            typer.echo(f"  {known}", err=True)
        raise typer.Exit(2)
    return formats[key]


@annotations_app.command("decode")
def decode(
    key: Annotated[
        str,
        typer.Argument(metavar="KEY", help="Annotation key, e.g. hami.io/node-nvidia-register."),
    ],
    value: Annotated[
        str, typer.Argument(metavar="VALUE", help="The annotation value, or - for stdin.")
    ],
    table: Annotated[bool, typer.Option("--table", help="The same as -o table.")] = False,
    output: OutputOption = Output.JSON,
) -> None:
    """Print the structure of an annotation value."""
    chosen = _format_for(key)
    try:
        data = _plain(chosen.decode(_read(value)))
    except ProtocolError as err:
        typer.echo(f"error: {key}: {err}", err=True)
        raise typer.Exit(1) from None
    if table or output in (Output.TABLE, Output.WIDE):
        typer.echo(_table(_rows(data)))
    else:
        typer.echo(as_data(data, output), nl=False)


@annotations_app.command("encode")
def encode(
    key: Annotated[
        str,
        typer.Argument(metavar="KEY", help="Annotation key, e.g. hami.io/vgpu-devices-allocated."),
    ],
    data: Annotated[
        str,
        typer.Argument(metavar="JSON", help="The structure as JSON (as decode prints it), or -."),
    ],
) -> None:
    """Print the annotation value for a structure."""
    chosen = _format_for(key)
    try:
        parsed = json.loads(_read(data))
    except ValueError as err:
        typer.echo(f"error: the input is not JSON: {err}", err=True)
        raise typer.Exit(2) from None
    try:
        typer.echo(chosen.encode(parsed))
    except ProtocolError as err:
        typer.echo(f"error: cannot encode {key} ({chosen.name}): {err}", err=True)
        raise typer.Exit(1) from None
