"""Hypothesis properties: decode(encode(x)) == x for every format, and bounded fuzzing showing
that every decoder either answers or raises ProtocolError, never anything else."""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePairScore,
    MigAllocation,
    MigPlacement,
    MigProfile,
)
from pyhami.protocol import (
    DeviceScoringWeights,
    NodeLock,
    ProtocolError,
    Reason,
    decode_container_devices,
    decode_mig_allocations,
    decode_node_devices,
    decode_node_devices_json,
    decode_node_devices_legacy,
    decode_pair_scores,
    decode_pod_single_device,
    encode_container_devices,
    encode_mig_allocations,
    encode_node_devices,
    encode_node_devices_legacy,
    encode_pair_scores,
    encode_pod_single_device,
    format_device_scoring_weights,
    format_handshake_request,
    format_node_lock,
    format_reasons,
    format_rfc3339,
    format_unix_seconds,
    is_expired,
    parse_bind_phase,
    parse_device_cordon,
    parse_device_scoring_weights,
    parse_handshake,
    parse_node_lock,
    parse_numa_bind,
    parse_reasons,
    parse_rfc3339,
    parse_type_selector,
    parse_unix_seconds,
    parse_uuid_selector,
    parse_wall_clock,
    policy_contains,
    split_list,
)

ROUND_TRIP = settings(max_examples=120, deadline=None)
FUZZ = settings(max_examples=100, deadline=None)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT32 = st.integers(0, 2**32 - 1)
# Go strings hold no lone surrogates; everything else is fair game.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


def text_without(separators: str) -> st.SearchStrategy[str]:
    return st.text(
        st.characters(exclude_categories=["Cs"], exclude_characters=separators), max_size=12
    )


placements = st.builds(MigPlacement, start=UINT32, size=UINT32)
profiles = st.builds(
    MigProfile,
    name=TEXT,
    memory_mb=INT32,
    core=INT32,
    slice_count=INT32,
    placements=st.none() | st.lists(placements, max_size=3).map(tuple),
)
json_devices = st.builds(
    DeviceInfo,
    id=TEXT,
    index=st.integers(0, 2**64 - 1),
    count=INT32,
    devmem=INT32,
    devcore=INT32,
    type=TEXT,
    numa=INT64,
    mode=TEXT,
    mig_profiles=st.lists(profiles, max_size=2).map(tuple),
    health=st.booleans(),
)
colon_devices = st.builds(
    DeviceInfo,
    id=text_without(",:"),
    index=st.integers(0, 2**63 - 1),
    count=INT32,
    devmem=INT32,
    devcore=INT32,
    type=text_without(",:"),
    numa=INT64,
    mode=text_without(",:"),
    health=st.booleans(),
)
container_devices = st.lists(
    st.builds(
        ContainerDevice,
        uuid=text_without(",:;"),
        type=text_without(",:;"),
        usedmem=INT32,
        usedcores=INT32,
    ),
    max_size=3,
).map(tuple)
pod_single_devices = st.lists(container_devices, max_size=4).map(tuple)
pair_scores = st.builds(DevicePairScore, uuid=TEXT, scores=st.dictionaries(TEXT, INT64, max_size=3))
zones = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
aware_times = st.builds(
    lambda moment, zone: moment.replace(tzinfo=zone),
    st.datetimes(datetime(1, 1, 2), datetime(9999, 12, 30)).map(lambda d: d.replace(microsecond=0)),
    zones,
)


@ROUND_TRIP
@given(st.lists(json_devices, max_size=3))
def test_register_json_round_trip(devices: list[DeviceInfo]) -> None:
    encoded = encode_node_devices(devices)
    assert decode_node_devices_json(encoded) == tuple(devices)
    assert json.loads(encoded) is not None  # and it is valid JSON


@ROUND_TRIP
@given(st.lists(colon_devices, max_size=3))
def test_register_colon_round_trip(devices: list[DeviceInfo]) -> None:
    encoded = encode_node_devices_legacy(devices)
    assert decode_node_devices_legacy(encoded) == tuple(devices)


@ROUND_TRIP
@given(st.lists(pair_scores, max_size=3))
def test_pair_scores_round_trip(scores: list[DevicePairScore]) -> None:
    assert decode_pair_scores(encode_pair_scores(scores)) == tuple(scores)


@ROUND_TRIP
@given(container_devices)
def test_container_devices_round_trip(devices: tuple[ContainerDevice, ...]) -> None:
    assert decode_container_devices(encode_container_devices(devices)) == devices


@ROUND_TRIP
@given(pod_single_devices)
def test_pod_devices_round_trip_adds_exactly_one_empty_container(
    containers: tuple[tuple[ContainerDevice, ...], ...],
) -> None:
    """Kept from HAMi: the trailing `;` decodes as one more (empty) container."""
    encoded = encode_pod_single_device(containers)
    assert decode_pod_single_device(encoded) == (*containers, ())


@st.composite
def mig_allocation_lists(draw: st.DrawFn) -> list[MigAllocation]:
    slots = draw(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), unique=True, max_size=4))
    allocations = []
    for container, device in slots:
        ready = draw(st.booleans())
        allocations.append(
            MigAllocation(
                container_index=container,
                device_index=device,
                gpu_uuid=draw(TEXT.filter(bool)),
                profile=draw(TEXT.filter(bool)),
                placement=MigPlacement(draw(UINT32), draw(st.integers(1, 2**32 - 1))),
                mig_uuid=draw(TEXT.filter(bool)) if ready else "",
                gpu_instance_id=draw(UINT32) if ready else None,
                compute_instance_id=draw(UINT32) if ready else None,
            )
        )
    return allocations


@ROUND_TRIP
@given(mig_allocation_lists())
def test_mig_allocations_round_trip(allocations: list[MigAllocation]) -> None:
    assert decode_mig_allocations(encode_mig_allocations(allocations)) == tuple(allocations)


@ROUND_TRIP
@given(aware_times, text_without(","), text_without(","))
def test_node_lock_round_trip(moment: datetime, namespace: str, name: str) -> None:
    lock = parse_node_lock(format_node_lock(moment, namespace, name))
    assert lock == NodeLock(moment, namespace, name)
    assert lock.time.utcoffset() == moment.utcoffset()


@ROUND_TRIP
@given(aware_times, st.integers(0, 10**6), st.integers(-(10**6), 10**6))
def test_lock_expiry_is_strictly_after_timeout(
    moment: datetime, timeout_s: int, age_s: int
) -> None:
    lock = parse_node_lock(format_node_lock(moment, "ns", "pod"))
    now = moment + timedelta(seconds=age_s)
    if now.year < 9999 and now.year > 1:
        assert is_expired(lock, now, timedelta(seconds=timeout_s)) == (age_s > timeout_s)


@ROUND_TRIP
@given(aware_times)
def test_rfc3339_and_unix_seconds_round_trip(moment: datetime) -> None:
    assert parse_rfc3339(format_rfc3339(moment)) == moment
    assert parse_unix_seconds(format_unix_seconds(moment)) == moment.astimezone(UTC)


@ROUND_TRIP
@given(
    st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31)).map(lambda d: d.replace(microsecond=0))
)
def test_handshake_round_trip(moment: datetime) -> None:
    handshake = parse_handshake(format_handshake_request(moment))
    assert handshake.requesting and handshake.requested_at == moment


@ROUND_TRIP
@given(
    st.builds(
        DeviceScoringWeights, INT64.filter(lambda n: n >= 0), st.integers(0, 9), st.integers(1, 9)
    )
)
def test_scoring_weights_round_trip(weights: DeviceScoringWeights) -> None:
    assert parse_device_scoring_weights(format_device_scoring_weights(weights)) == weights


@ROUND_TRIP
@given(
    st.dictionaries(st.sampled_from(Reason), st.integers(0, 10**6), max_size=6),
    st.integers(0, 10**6),
)
def test_reasons_round_trip(counts: dict[Reason, int], total: int) -> None:
    parsed = parse_reasons(format_reasons(counts, total))
    assert {entry.reason: entry.count for entry in parsed} == counts
    assert all(entry.total == total for entry in parsed)


# --- fuzzing: only ProtocolError may escape ---------------------------------------------------

DECODERS: dict[str, Callable[[str], object]] = {
    "node devices": decode_node_devices,
    "node devices json": decode_node_devices_json,
    "node devices colon": decode_node_devices_legacy,
    "pair scores": decode_pair_scores,
    "container devices": decode_container_devices,
    "pod single device": decode_pod_single_device,
    "mig allocations": decode_mig_allocations,
    "node lock": parse_node_lock,
    "handshake": parse_handshake,
    "bind phase": parse_bind_phase,
    "scoring weights": parse_device_scoring_weights,
    "reasons": parse_reasons,
    "rfc3339": parse_rfc3339,
    "wall clock": parse_wall_clock,
    "unix seconds": parse_unix_seconds,
    "split list": split_list,
    "device cordon": parse_device_cordon,
    "numa bind": parse_numa_bind,
    "policy": lambda v: policy_contains(v, "binpack"),
    "uuid lists": lambda v: parse_uuid_selector(v, v).accepts("GPU-a"),
    "type lists": lambda v: parse_type_selector(v, v).accepts("NVIDIA A100"),
}
# Characters that matter to some grammar, so random strings often get past the first check.
GRAMMAR = st.text(
    st.sampled_from(list(',:;=[]{}"\\ -+.0123456789eEtTfFZz_aGPU\u212a\u017f\n')), max_size=40
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | TEXT,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "index",
                    "count",
                    "health",
                    "uuid",
                    "score",
                    "migProfiles",
                    "placements",
                    "placement",
                    "size",
                    "gpuUUID",
                    "profile",
                    "migUUID",
                    "gpuInstanceID",
                    "containerIndex",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def _only_protocol_errors(decode: Callable[[str], object], value: str) -> None:
    try:
        decode(value)
    except ProtocolError as err:
        assert str(err)  # and it says something


@pytest.mark.parametrize("name", sorted(DECODERS))
@FUZZ
@given(value=st.text(max_size=60) | GRAMMAR)
def test_fuzz_text(name: str, value: str) -> None:
    _only_protocol_errors(DECODERS[name], value)


@pytest.mark.parametrize("name", ["node devices json", "pair scores", "mig allocations"])
@FUZZ
@given(value=st.lists(json_values, max_size=3).map(json.dumps) | json_values.map(json.dumps))
def test_fuzz_json_shapes(name: str, value: str) -> None:
    _only_protocol_errors(DECODERS[name], value)


VALID = {
    "node devices": encode_node_devices(
        [DeviceInfo("GPU-a", 1, 10, 100, 100, "T", 1, "mig", (), True)]
    ),
    "node devices colon": "GPU-a,10,7680,100,T,0,true,1,hami-core:",
    "pod single device": "GPU-a,NVIDIA,3000,30:;B,NVIDIA,1,2:;",
    "mig allocations": encode_mig_allocations(
        [MigAllocation(0, 0, "GPU-a", "1g.5gb", MigPlacement(6, 1), "MIG-a", 1, 0)]
    ),
    "node lock": "2026-08-21T20:00:00+08:00,default,gpu-pod",
    "scoring weights": "slot=1,core=2,memory=3",
    "pair scores": '[{"uuid":"GPU-0","score":{"GPU-1":100}}]',
}


@st.composite
def mutations(draw: st.DrawFn, valid: str) -> str:
    chars = list(valid)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(chars)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        if action == "insert":
            chars.insert(at, draw(st.characters(exclude_categories=["Cs"])))
        elif chars and at < len(chars):
            if action == "delete":
                del chars[at]
            else:
                chars[at] = draw(st.sampled_from(list(',:;"{}[]-+0912eE. ')))
    return "".join(chars)


@pytest.mark.parametrize("name", sorted(VALID))
@FUZZ
@given(data=st.data())
def test_fuzz_mutated_valid_values(name: str, data: st.DataObject) -> None:
    _only_protocol_errors(DECODERS[name], data.draw(mutations(VALID[name])))
