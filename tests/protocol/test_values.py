"""Selection, policy, reason, weight, handshake, time and patch values."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from pyhami.kube.patches import (
    mig_allocations_patch,
    node_annotations_patch,
    pod_annotations_patch,
    pod_labels_patch,
    remove_annotations_patch,
)
from pyhami.model import ContainerDevice, DeviceInfo, MigProfile
from pyhami.protocol import (
    KEY_NODE_LOCK,
    VENDORS,
    DeviceScoringWeights,
    Handshake,
    ProtocolError,
    Reason,
    ReasonCount,
    RegisterForm,
    encode_container_devices,
    encode_node_devices_legacy,
    format_device_scoring_weights,
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
    policy_contains,
    vgpu_mode_accepts,
)


@pytest.mark.parametrize(
    "use, nouse, uuid, want",
    [
        (None, None, "GPU-a", True),
        ("GPU-a,GPU-b", None, "GPU-a", True),
        (" GPU-a , GPU-b ", None, "GPU-b", True),
        ("GPU-a", None, "GPU-c", False),
        ("gpu-a", None, "GPU-a", False),  # exact, case-sensitive
        ("  ", None, "GPU-c", True),  # blank imposes nothing
        (None, "GPU-c", "GPU-c", False),
        (None, "GPU-c", "GPU-a", True),
        ("GPU-a", "GPU-a", "GPU-a", False),
    ],
)
def test_uuid_lists(use: str | None, nouse: str | None, uuid: str, want: bool) -> None:
    assert parse_uuid_selector(use, nouse).accepts(uuid) is want


@pytest.mark.parametrize(
    "use, nouse, card, want",
    [
        ("A100,V100", None, "NVIDIA-Tesla V100-PCIE-32GB", True),
        ("a10", None, "NVIDIA A100", True),  # substring, case-insensitive: A10 matches A100
        ("H100", None, "NVIDIA A100", False),
        (None, "A10", "NVIDIA A100", False),
        (None, "A10", "NVIDIA T4", True),
        (" , ", None, "NVIDIA T4", False),  # not blank, but no item can match
        ("H100, ,", None, "NVIDIA T4", False),  # empty items never match
    ],
)
def test_type_lists(use: str | None, nouse: str | None, card: str, want: bool) -> None:
    assert parse_type_selector(use, nouse).accepts(card) is want


@pytest.mark.parametrize(
    "value, mode, want",
    [
        (None, "mig", True),
        ("mig", "mig", True),
        ("mig,hami-core", "hami-core", True),
        ("mig", "hami-core", False),
        ("mig", "", True),
    ],
)
def test_vgpu_mode_is_a_substring_test(value: str | None, mode: str, want: bool) -> None:
    assert vgpu_mode_accepts(value, mode) is want


@pytest.mark.parametrize(
    "value, want",
    [("true", True), ("1", True), ("T", True), ("yes", False), ("false", False), (None, False)],
)
def test_numa_bind(value: str | None, want: bool) -> None:
    assert parse_numa_bind(value) is want


def test_device_cordon_trims_and_skips_empties() -> None:
    assert parse_device_cordon("GPU-a, GPU-b,,  ,") == frozenset({"GPU-a", "GPU-b"})
    assert parse_device_cordon(None) == frozenset()


@pytest.mark.parametrize(
    "policy, name, want",
    [
        ("binpack,numa", "numa", True),
        (" binpack , numa ", "binpack", True),
        ("binpack", "bin", False),
        ("topology-aware", "topology-aware", True),
        (None, "spread", False),
    ],
)
def test_policy_contains(policy: str | None, name: str, want: bool) -> None:
    assert policy_contains(policy, name) is want


def test_scoring_weights_absent_and_trimmed() -> None:
    assert parse_device_scoring_weights(None) == DeviceScoringWeights(1, 1, 1)
    assert parse_device_scoring_weights(" memory = 3 ,slot=1, core=0") == DeviceScoringWeights(
        1, 0, 3
    )


@pytest.mark.parametrize(
    "value, tail",
    [
        ("slot=1,core=2", "expected slot, core, and memory weights"),
        ("slot=1,core=2,memory=3,x=1", "expected slot, core, and memory weights"),
        ("slot=1,core,memory=1", "expected key=value entries"),
        ("slot=1,slot=2,memory=1", 'duplicate "slot" weight'),
        ("slot=1,slot=x,memory=1", 'duplicate "slot" weight'),  # before the integer check
        ("slot=1,gpu=x,memory=1", '"gpu" weight must be an integer'),  # before unknown key
        ("slot=1,core=1.5,memory=1", '"core" weight must be an integer'),
        ("slot=1,core=1_0,memory=1", '"core" weight must be an integer'),
        ("slot=1,core=-2,memory=1", '"core" weight must not be negative'),
        ("slot=1,gpu=2,memory=1", 'unknown weight "gpu"'),
        ("slot=0,core=0,memory=0", "at least one weight must be positive"),
    ],
)
def test_scoring_weights_messages_are_hamis(value: str, tail: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_device_scoring_weights(value)
    quoted = value.replace('"', '\\"')
    assert (
        str(caught.value) == f'invalid hami.io/device-scoring-weights annotation "{quoted}": {tail}'
    )


def test_scoring_weights_encoder_refuses_what_hami_rejects() -> None:
    with pytest.raises(ProtocolError):
        format_device_scoring_weights(DeviceScoringWeights(0, 0, 0))


def test_reason_words_are_hamis() -> None:
    assert len(Reason) == 14
    assert Reason.CARD_UUID_MISMATCH == "CardUuidMismatch"


def test_reasons_sort_as_whole_strings() -> None:
    counts = {
        Reason.CARD_INSUFFICIENT_CORE: 1,
        Reason.CARD_INSUFFICIENT_MEMORY: 2,
        Reason.CARD_UUID_MISMATCH: 3,
        Reason.CARD_TIME_SLICING_EXHAUSTED: 4,
    }
    assert format_reasons(counts, 10) == (
        "1/10 CardInsufficientCore, 2/10 CardInsufficientMemory, 3/10 CardUuidMismatch, "
        "4/10 CardTimeSlicingExhausted"
    )
    assert format_reasons({"X": 10, "Y": 2}, 12) == "10/12 X, 2/12 Y"
    assert format_reasons({}, 3) == ""


def test_reasons_hami_examples() -> None:
    counts = {
        Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1,
        Reason.CARD_MIG_TOPOLOGY_INFEASIBLE: 1,
    }
    assert format_reasons(counts, 1) == (
        "1/1 AllocatedCardsInsufficientRequest, 1/1 CardMigTopologyInfeasible"
    )


@pytest.mark.parametrize(
    "text, want",
    [
        ("1/2 A, NodeInsufficientDevice, 3/4 B", (ReasonCount("A", 1, 2), ReasonCount("B", 3, 4))),
        ("1/2 A trailing words", (ReasonCount("A", 1, 2),)),
        (" 1/ 2  A", (ReasonCount("A", 1, 2),)),
        ("1/2A", (ReasonCount("A", 1, 2),)),
        ("-1/+2 A", (ReasonCount("A", -1, 2),)),
        ("1 /2 A", ()),
        ("1/2", ()),
        ("99999999999999999999/2 A", ()),
        ("", ()),
    ],
)
def test_parse_reasons_scans_like_sscanf(text: str, want: tuple[ReasonCount, ...]) -> None:
    assert parse_reasons(text) == want


@pytest.mark.parametrize(
    "value, want",
    [
        ("Requesting_2026-08-21 12:00:00", Handshake(True, datetime(2026, 8, 21, 12))),
        ("Requesting", Handshake(True)),
        ("Requesting_garbage", Handshake(True)),
        ("Requesting_2026-02-30 12:00:00", Handshake(True)),
        ("Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895", Handshake(False)),
        ("Reported_2024-01-23 04:30:04", Handshake(False)),
        ("", Handshake(False)),
    ],
)
def test_handshake_reading_is_total(value: str, want: Handshake) -> None:
    assert parse_handshake(value) == want


@pytest.mark.parametrize(
    "value",
    [
        "2026-8-21T12:00:00Z",
        "2026-08-21T12:00:00",
        "2026-08-21T12:00:00+0800",
        "2026-08-21T24:00:00Z",
        "2026-02-30T12:00:00Z",
        "2026-08-21T12:00:60Z",
        "2026-08-21T12:00:00.Z",
        "2026-08-21t12:00:00Z",
        "2026-08-21T12:00:00z",
        "2026-08-21T12:00:00+25:00",
        " 2026-08-21T12:00:00Z",
        "2026-08-21T123:00:00Z",
    ],
)
def test_rfc3339_refuses_what_go_refuses(value: str) -> None:
    with pytest.raises(ProtocolError):
        parse_rfc3339(value)


def test_rfc3339_offsets_of_a_day_are_refused_though_go_takes_them() -> None:
    """Documented deviation: Python time zones stop below 24 h."""
    with pytest.raises(ProtocolError):
        parse_rfc3339("2026-08-21T12:00:00+24:00")


def test_rfc3339_accepts_what_gos_fallback_parser_accepts() -> None:
    assert parse_rfc3339("2026-08-21T1:00:00Z") == datetime(2026, 8, 21, 1, tzinfo=UTC)
    assert parse_rfc3339("2026-08-21T12:00:00,5Z") == datetime(
        2026, 8, 21, 12, 0, 0, 500000, tzinfo=UTC
    )
    assert parse_rfc3339("2026-08-21T12:00:00+05:60") == datetime(2026, 8, 21, 6, tzinfo=UTC)


def test_rfc3339_negative_offset_and_go_formatting() -> None:
    moment = parse_rfc3339("2026-08-21T07:00:00-05:00")
    assert moment == datetime(2026, 8, 21, 12, tzinfo=UTC)
    assert format_rfc3339(moment) == "2026-08-21T07:00:00-05:00"
    assert format_rfc3339(datetime(26, 1, 2, 3, 4, 5, 999, tzinfo=UTC)) == "0026-01-02T03:04:05Z"


def test_times_refuse_naive_datetimes() -> None:
    with pytest.raises(ProtocolError):
        format_node_lock(datetime(2026, 8, 21), "ns", "pod")
    with pytest.raises(ProtocolError):
        format_unix_seconds(datetime(2026, 8, 21))


def test_unix_seconds_floor_before_the_epoch_and_parse() -> None:
    assert format_unix_seconds(datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)) == "-1"
    assert parse_unix_seconds("1755763200") == datetime(2025, 8, 21, 8, tzinfo=UTC)
    with pytest.raises(ProtocolError):
        parse_unix_seconds("1e9")
    with pytest.raises(ProtocolError):
        parse_unix_seconds("9223372036854775807")  # a valid int64, but no datetime holds it


def test_lock_expiry_uses_the_time_passed_in() -> None:
    lock = parse_node_lock("2026-08-21T20:00:00+08:00,default,gpu-pod")
    taken = datetime(2026, 8, 21, 12, tzinfo=UTC)
    assert not is_expired(lock, taken + timedelta(minutes=5), timedelta(minutes=5))
    assert is_expired(lock, taken + timedelta(minutes=5, seconds=1), timedelta(minutes=5))
    with pytest.raises(ProtocolError):
        is_expired(lock, datetime(2026, 8, 21), timedelta(minutes=5))


def test_lock_owner_may_not_contain_the_separator() -> None:
    with pytest.raises(ProtocolError):
        format_node_lock(datetime(2026, 8, 21, tzinfo=UTC), "a,b", "pod")


@pytest.mark.parametrize("value", ["Allocating", "", "done", " success"])
def test_bind_phase_refuses_other_words(value: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_bind_phase(value)
    assert "hami.io/bind-phase" in str(caught.value)


def test_patch_bodies_are_hamis() -> None:
    assert node_annotations_patch({"b": "2", "a": "1"}) == json.loads(
        '{"metadata":{"annotations":{"a":"1","b":"2"}}}'
    )
    assert remove_annotations_patch([KEY_NODE_LOCK]) == json.loads(
        '{"metadata":{"annotations":{"hami.io/mutex.lock":null}}}'
    )
    assert pod_labels_patch({"hami.io/scheduler-role": "leader"}) == json.loads(
        '{"metadata":{"labels":{"hami.io/scheduler-role":"leader"}}}'
    )
    assert mig_allocations_patch("[]", "7") == json.loads(
        '{"metadata":{"annotations":{"hami.io/vgpu-mig-allocations":"[]"},"resourceVersion":"7"}}'
    )


def test_pod_patch_label_only_for_a_non_empty_node() -> None:
    assert "labels" not in pod_annotations_patch({"hami.io/vgpu-node": ""})["metadata"]
    assert "labels" not in pod_annotations_patch({"hami.io/bind-phase": "success"})["metadata"]


def test_encoders_refuse_what_the_grammar_cannot_carry() -> None:
    with pytest.raises(ProtocolError):
        encode_container_devices([ContainerDevice("GPU:a", "NVIDIA", 1, 1)])
    with pytest.raises(ProtocolError):
        encode_container_devices([ContainerDevice("GPU-a", "NVIDIA", 2**31, 1)])
    with pytest.raises(ProtocolError):
        encode_node_devices_legacy([DeviceInfo("a,b")])
    with pytest.raises(ProtocolError):
        encode_node_devices_legacy([DeviceInfo("a", mig_profiles=(MigProfile("p", 1, 1, 1),))])


def test_colon_form_encodes_no_devices_as_a_decodable_separator() -> None:
    """HAMi writes "" (which its decoder rejects); we write ":"."""
    assert encode_node_devices_legacy([]) == ":"


def test_vendor_table_spellings() -> None:
    assert VENDORS["Biren"].to_allocate == "hami.io/Biren-devices-to-allocate"
    assert VENDORS["Vastai"].allocated == "hami.io/Vastai-devices-allocated"
    assert VENDORS["XPU"].register == "hami.io/node-register-xpu"
    assert VENDORS["AMD"].use_uuid == "amd.com/use-gpu-uuid"
    assert VENDORS["Mthreads"].use_uuid == "mthreads.ai/use-gpuuuid"
    assert VENDORS["DCU"].register_form is RegisterForm.COLON
