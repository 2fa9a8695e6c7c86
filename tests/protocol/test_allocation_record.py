"""The DRA driver's allocation record: round trips, and a decoder that refuses every bad value
with a ProtocolError naming it (never another exception)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.model import ContainerDevice
from pyhami.protocol import ProtocolError, decode_allocation_record, encode_allocation_record
from pyhami.protocol.allocation_record import MAX_RECORD_BYTES, MAX_RECORD_DEVICES

UUID = "GPU-6f1c8d2e-0a5b-4c3d-9e8f-1a2b3c4d5e6f"

uuids = st.from_regex(r"\A(GPU|MIG)-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\Z")
devices = st.builds(
    ContainerDevice,
    uuid=uuids,
    type=st.just("NVIDIA"),
    usedmem=st.integers(1, 2**31 - 1),
    usedcores=st.integers(0, 100),
)
device_lists = st.lists(
    devices, min_size=1, max_size=MAX_RECORD_DEVICES, unique_by=lambda d: d.uuid
)


def record(*items: object, version: object = 1) -> str:
    return json.dumps({"version": version, "devices": list(items)})


def device(**changes: object) -> dict[str, object]:
    return {"uuid": UUID, "memoryMiB": 6144, "cores": 25, **changes}


@given(device_lists)
@settings(max_examples=150, deadline=None)
def test_what_is_encoded_decodes_to_the_same_devices_in_the_same_order(
    listed: list[ContainerDevice],
) -> None:
    text = encode_allocation_record(listed)
    assert len(text) <= MAX_RECORD_BYTES
    assert decode_allocation_record(text) == tuple(listed)


def test_the_record_carries_uuid_memory_and_cores() -> None:
    text = encode_allocation_record([ContainerDevice(UUID, "NVIDIA", 6144, 25)])
    assert json.loads(text) == {"version": 1, "devices": [device()]}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "invalid JSON"),
        ("[]", "record is not an object"),
        (json.dumps({"version": 1}), "want exactly"),
        (json.dumps({"version": 1, "devices": [], "extra": 1}), "want exactly"),
        ('{"version": 1, "version": 1, "devices": []}', "a key twice"),
        (record(device(), version=2), "version is 2"),
        (record(device(), version=True), "version is True"),
        (record(device(), version=1.0), "version is 1.0"),
        (record(), "list of 1..16 devices"),
        (record(*[device(uuid=f"GPU-{i}") for i in range(17)]), "list of 1..16 devices"),
        (record(device(), device()), "listed twice"),
        (record(device(memoryMiB=0)), "memoryMiB is 0"),
        (record(device(memoryMiB=2**31)), "memoryMiB is 2147483648"),
        (record(device(memoryMiB="6144")), "memoryMiB is '6144'"),
        (record(device(memoryMiB=True)), "memoryMiB is True"),
        (record(device(cores=101)), "cores is 101"),
        (record(device(cores=-1)), "cores is -1"),
        (record(device(uuid="")), "not a GPU uuid"),
        (record(device(uuid="GPU 1")), "not a GPU uuid"),
        (record(device(uuid="G" * 96)), "not a GPU uuid"),
        (record(device(uuid=7)), "not a GPU uuid"),
        (record(device(shareID="x")), "want exactly"),
        ('{"version": 1, "devices": [{"uuid": "GPU-1", "memoryMiB": NaN, "cores": 1}]}', "NaN"),
        ('{"version": 1, "devices": [{"uuid": "GPU-1", "memoryMiB": 1e999, "cores": 1}]}', "inf"),
        ("[" * 3000 + "]" * 3000, "nested too deeply"),
        ("[" * 900 + "]" * 900, "record is not an object"),
        (" " * MAX_RECORD_BYTES + record(device()), f"longer than {MAX_RECORD_BYTES}"),
    ],
)
def test_a_bad_record_is_refused_with_what_is_wrong(text: str, reason: str) -> None:
    with pytest.raises(ProtocolError, match="allocation record") as refused:
        decode_allocation_record(text)
    assert reason in str(refused.value)


def test_the_encoder_refuses_what_the_decoder_would_refuse() -> None:
    with pytest.raises(ProtocolError, match="not a GPU uuid"):
        encode_allocation_record([ContainerDevice("GPU 1", "NVIDIA", 1, 0)])
    with pytest.raises(ProtocolError, match="type is not NVIDIA"):
        encode_allocation_record([ContainerDevice(UUID, "MLU", 1, 0)])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)


@given(st.text(max_size=300) | json_values.map(json.dumps))
@settings(max_examples=300, deadline=None)
def test_the_decoder_returns_devices_or_a_protocol_error_on_any_text(text: str) -> None:
    try:
        decoded = decode_allocation_record(text)
    except ProtocolError:
        return
    assert 0 < len(decoded) <= MAX_RECORD_DEVICES


@given(device_lists, st.data())
@settings(max_examples=200, deadline=None)
def test_a_mutated_record_decodes_only_to_valid_devices(
    listed: list[ContainerDevice], data: st.DataObject
) -> None:
    text = encode_allocation_record(listed)
    at = data.draw(st.integers(0, len(text) - 1))
    mutated = text[:at] + data.draw(st.text(max_size=3)) + text[at + 1 :]
    try:
        decoded = decode_allocation_record(mutated)
    except ProtocolError:
        return
    for found in decoded:
        assert 1 <= found.usedmem < 2**31 and 0 <= found.usedcores <= 100
    assert len({d.uuid for d in decoded}) == len(decoded)
