"""Go encoding/json rules applied to the JSON formats."""

import pytest

from pyhami.model import DeviceInfo, MigPlacement, MigProfile
from pyhami.protocol import (
    ProtocolError,
    decode_mig_allocations,
    decode_node_devices,
    decode_pair_scores,
    encode_node_devices,
)


def test_keys_match_case_insensitively_and_last_duplicate_wins() -> None:
    (device,) = decode_node_devices('[{"ID":"a","Count":1,"count":2,"HEALTH":true,"Mode":"mig"}]')
    assert device == DeviceInfo("a", count=2, health=True, mode="mig")


def test_long_s_folds_to_s_like_gos_equal_fold() -> None:
    """U+017F LATIN SMALL LETTER LONG S simple-folds to "s" in Go, so it matches sliceCount."""
    profiles = '[{"id":"a","migProfiles":[{"name":"p","\u017fliceCount":3,"placements":null}]}]'
    assert decode_node_devices(profiles)[0].mig_profiles == (MigProfile("p", 0, 0, 3, None),)


def test_unknown_keys_ignored_nulls_are_zero_and_legacy_fields_accepted() -> None:
    value = (
        '[{"id":"a","index":null,"whatever":[1,{"x":2}],"custominfo":{"k":1},'
        '"devicevendor":"NVIDIA","migtemplate":[]}]'
    )
    (device,) = decode_node_devices(value)
    assert device.index == 0 and device.device_vendor == "NVIDIA"
    assert device.custom_info == {"k": 1.0}
    assert device.mode == ""  # the JSON form does not default the mode, as HAMi's


@pytest.mark.parametrize(
    "value",
    [
        '[{"health":"true"}]',
        '[{"index":-1}]',
        '[{"index":1.0}]',
        '[{"count":2147483648}]',
        '[{"count":1e3}]',
        '[{"id":5}]',
        '{"id":"a"}',
        "[null]",
        "[1]",
        '[{"migProfiles":{}}]',
        '[{"custominfo":[]}]',
        '[{"id":"a"}] x',
        "[NaN]",
        '[{"count":Infinity}]',
        "",
    ],
)
def test_type_mismatches_and_bad_json_are_protocol_errors(value: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_node_devices(value)
    assert "node device register" in str(caught.value)


def test_deep_nesting_is_a_protocol_error_not_a_recursion_error() -> None:
    with pytest.raises(ProtocolError):
        decode_pair_scores("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("depth", [300, 600, 990, 2000])
def test_deep_values_inside_a_field_never_escape_as_recursion_errors(depth: int) -> None:
    value = '[{"id":"a","custominfo":{"k":' + "[" * depth + "]" * depth + "}}]"
    try:
        (device,) = decode_node_devices(value)
    except ProtocolError as err:
        assert "nested too deeply" in str(err)
    else:
        assert device.custom_info is not None


def test_lone_surrogate_escape_becomes_replacement_character() -> None:
    (device,) = decode_node_devices('[{"id":"\\ud800x"}]')
    assert device.id == "\ufffdx"


def test_encoder_escapes_like_go() -> None:
    device = DeviceInfo("<&>\u2028\b\f\n\x01é", type='q"\\')
    assert encode_node_devices([device]) == (
        '[{"id":"\\u003c\\u0026\\u003e\\u2028\\b\\f\\n\\u0001é","type":"q\\"\\\\"}]'
    )


def test_encoder_writes_mig_profiles_without_omitting_zeros() -> None:
    device = DeviceInfo(
        "g",
        mode="mig",
        mig_profiles=(
            MigProfile("1g.10gb", 9984, 15, 1, (MigPlacement(0, 1),)),
            MigProfile("7g.80gb", 0, 0, 0, None),
        ),
    )
    assert encode_node_devices([device]) == (
        '[{"id":"g","mode":"mig","migProfiles":[{"name":"1g.10gb","memoryMB":9984,"core":15,'
        '"sliceCount":1,"placements":[{"start":0,"size":1}]},{"name":"7g.80gb","memoryMB":0,'
        '"core":0,"sliceCount":0,"placements":null}]}]'
    )


@pytest.mark.parametrize(
    "device",
    [DeviceInfo("a", count=2**31), DeviceInfo("a", index=-1), DeviceInfo("a", devmem=-(2**31) - 1)],
)
def test_encoder_refuses_numbers_the_go_type_cannot_hold(device: DeviceInfo) -> None:
    with pytest.raises(ProtocolError):
        encode_node_devices([device])


def test_pair_scores_null_entry_is_zero_value_and_null_score_empty() -> None:
    (first, second) = decode_pair_scores('[null,{"uuid":"a","score":null}]')
    assert first.uuid == "" and dict(first.scores) == {}
    assert second.uuid == "a" and dict(second.scores) == {}


@pytest.mark.parametrize(
    "value",
    ['[{"uuid":"a","score":{"b":"1"}}]', '[{"uuid":"a","score":{"b":1.5}}]', '{"uuid":"a"}'],
)
def test_pair_scores_type_errors(value: str) -> None:
    with pytest.raises(ProtocolError):
        decode_pair_scores(value)


def test_mig_allocations_null_means_none_and_runtime_zero_is_kept() -> None:
    assert decode_mig_allocations("null") == ()
    value = (
        '[{"gpuUUID":"g","profile":"p","placement":{"size":1},'
        '"migUUID":"m","gpuInstanceID":0,"computeInstanceID":0}]'
    )
    (allocation,) = decode_mig_allocations(value)
    assert allocation.gpu_instance_id == 0 and allocation.runtime_ready
