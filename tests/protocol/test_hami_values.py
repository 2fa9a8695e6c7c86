"""HAMi's literal annotation values, as table tests (byte-exact where HAMi's bytes are known)."""

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from pyhami.kube.patches import node_lock_patch, pod_annotations_patch
from pyhami.model import ContainerDevice, DeviceInfo, DevicePairScore, MigAllocation, MigPlacement
from pyhami.protocol import (
    KEY_NVIDIA_ALLOCATED,
    KEY_NVIDIA_TO_ALLOCATE,
    KEY_VGPU_NODE,
    KEY_VGPU_TIME,
    NVIDIA_VENDOR,
    BindPhase,
    NodeLock,
    ProtocolError,
    decode_container_devices,
    decode_mig_allocations,
    decode_node_devices,
    decode_pair_scores,
    decode_pod_single_device,
    encode_mig_allocations,
    encode_node_devices,
    encode_node_devices_legacy,
    encode_pair_scores,
    encode_pod_single_device,
    format_handshake_request,
    format_node_lock,
    format_unix_seconds,
    parse_bind_phase,
    parse_node_lock,
)

V100_A = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
V100_B = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
V100 = "NVIDIA-Tesla V100-PCIE-32GB"
REGISTER_EXAMPLE = (
    f'[{{"id":"{V100_A}","count":10,"devmem":32768,"devcore":100,"type":"{V100}",'
    f'"mode":"hami-core","health":true}},{{"id":"{V100_B}","index":1,"count":10,'
    f'"devmem":32768,"devcore":100,"type":"{V100}","numa":1,"mode":"hami-core"}}]'
)
REGISTER_DEVICES = (
    DeviceInfo(
        V100_A, count=10, devmem=32768, devcore=100, type=V100, mode="hami-core", health=True
    ),
    DeviceInfo(
        V100_B, index=1, count=10, devmem=32768, devcore=100, type=V100, numa=1, mode="hami-core"
    ),
)
P4 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4"


def test_register_json_example_decodes_and_reencodes_byte_exact() -> None:
    assert decode_node_devices(REGISTER_EXAMPLE) == REGISTER_DEVICES
    assert encode_node_devices(REGISTER_DEVICES) == REGISTER_EXAMPLE


def test_register_json_single_device_example_from_key_table() -> None:
    value = (
        f'[{{"id":"{V100_A}","count":10,"devmem":32768,"devcore":100,'
        f'"type":"{V100}","mode":"hami-core","health":true}}]'
    )
    assert encode_node_devices(decode_node_devices(value)) == value


def test_register_json_empty_list_encodes_as_brackets() -> None:
    assert encode_node_devices(()) == "[]"
    assert decode_node_devices("null") == ()


P4_DEVICE = DeviceInfo(
    P4,
    index=1,
    count=10,
    devmem=7680,
    devcore=100,
    type="NVIDIA-Tesla P4",
    mode="hami-core",
    health=True,
)
P4_NINE_FIELDS = f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:"


def test_register_colon_examples() -> None:
    assert decode_node_devices(P4_NINE_FIELDS) == (P4_DEVICE,)
    # The 7-field form has no index and means mode hami-core.
    seven = f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true:"
    assert decode_node_devices(seven) == (replace(P4_DEVICE, index=0),)


def test_register_colon_encoder_writes_9_field_example_byte_exact() -> None:
    assert encode_node_devices_legacy([P4_DEVICE]) == P4_NINE_FIELDS


@pytest.mark.parametrize("value", [":", "::", ":::"])
def test_register_colon_empty_segments_decode_to_nothing(value: str) -> None:
    assert decode_node_devices(value) == ()


def test_register_colon_tolerates_missing_final_and_double_separators() -> None:
    value = "::a,1,2,3,t,-1,false::b,1,2,3,t,0,1"
    assert [d.id for d in decode_node_devices(value)] == ["a", "b"]
    assert decode_node_devices(value)[0].numa == -1


def test_pair_score_example() -> None:
    value = '[{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{"GPU-0":100}}]'
    scores = (DevicePairScore("GPU-0", {"GPU-1": 100}), DevicePairScore("GPU-1", {"GPU-0": 100}))
    assert decode_pair_scores(value) == scores
    assert encode_pair_scores(scores) == value


def test_pair_scores_single_gpu_writes_empty_object_and_sorts_keys() -> None:
    assert encode_pair_scores([DevicePairScore("GPU-0")]) == '[{"uuid":"GPU-0","score":{}}]'
    unsorted = DevicePairScore("a", {"c": 1, "b": 2})
    assert encode_pair_scores([unsorted]) == '[{"uuid":"a","score":{"b":2,"c":1}}]'


def dev(uuid: str, mem: int, cores: int, vendor: str = NVIDIA_VENDOR) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, type=vendor, usedmem=mem, usedcores=cores)


A = dev("A", 1, 2)
B = dev("B", 3, 4)


@pytest.mark.parametrize(
    "containers, encoded",
    [
        pytest.param((), "", id="no-containers"),
        pytest.param(((),), ";", id="one-empty-container"),
        pytest.param(((A,), (B,)), "A,NVIDIA,1,2:;B,NVIDIA,3,4:;", id="two-containers"),
        pytest.param(((), (A,)), ";A,NVIDIA,1,2:;", id="placeholder-first"),
        pytest.param(((A, B),), "A,NVIDIA,1,2:B,NVIDIA,3,4:;", id="two-devices-one-container"),
        pytest.param(
            ((dev(V100_B, 3000, 30),),), f"{V100_B},NVIDIA,3000,30:;", id="to-allocate-example"
        ),
        pytest.param(
            ((dev("nvidia-device-0", 2000, 1),),), "nvidia-device-0,NVIDIA,2000,1:;", id="fit-doc"
        ),
        pytest.param(
            ((), (dev("GPU-a", 5120, 14),)), ";GPU-a,NVIDIA,5120,14:;", id="fit-doc-placeholder"
        ),
    ],
)
def test_pod_single_device_encoding(
    containers: tuple[tuple[ContainerDevice, ...], ...], encoded: str
) -> None:
    assert encode_pod_single_device(containers) == encoded


@pytest.mark.parametrize(
    "value, want",
    [
        pytest.param("", ((),), id="empty-is-one-empty-container"),
        pytest.param("A,NVIDIA,1,2:;", ((A,), ()), id="trailing-separator-adds-empty-container"),
        pytest.param(";;", ((), (), ()), id="served-1-container-pod"),
        pytest.param(";;;", ((), (), (), ()), id="served-2-container-pod"),
    ],
)
def test_pod_devices_decoding_keeps_every_segment(value: str, want: object) -> None:
    assert decode_pod_single_device(value) == want


def test_pod_devices_round_trip_grows_by_one_container_like_hami() -> None:
    """Kept from HAMi: decode→encode of `A:;` is `A:;;`."""
    decoded = decode_pod_single_device("A,NVIDIA,1,2:;")
    assert encode_pod_single_device(decoded) == "A,NVIDIA,1,2:;;"


def test_device_plugin_erase_example() -> None:
    """The device plugin empties each segment it served: after both containers, `;;;`."""
    value = "GPU-aaa,NVIDIA,3000,50:;GPU-bbb,NVIDIA,4000,60:;"
    decoded = decode_pod_single_device(value)
    served = tuple(() for _ in decoded)
    assert encode_pod_single_device(served) == ";;;"


def test_placeholders_ours_per_container_and_hamis_dense_both_decode() -> None:
    """A GPU-less init container, then a GPU app container (one segment per container)."""
    gpu = dev("GPU-a", 3000, 30)
    ours = encode_pod_single_device(((), (gpu,)))
    assert ours == ";GPU-a,NVIDIA,3000,30:;"  # one segment per container, init first
    hami_head = "GPU-a,NVIDIA,3000,30:;"  # HAMi HEAD lists only containers that got GPUs
    assert decode_pod_single_device(ours) == ((), (gpu,), ())
    assert decode_pod_single_device(hami_head) == ((gpu,), ())


def test_pod_devices_error_names_the_annotation_key_and_value() -> None:
    value = "A,NVIDIA,1,2:;B,NVIDIA,x,2:;"
    with pytest.raises(ProtocolError) as caught:
        decode_pod_single_device(value, KEY_NVIDIA_TO_ALLOCATE)
    assert caught.value.field == KEY_NVIDIA_TO_ALLOCATE and caught.value.value == value
    assert (
        caught.value.reason == 'invalid memory field: strconv.ParseInt: parsing "x": invalid syntax'
    )


@pytest.mark.parametrize(
    "value, want",
    [
        ("", ()),
        ("garbage:", ()),
        ("A,NVIDIA,1,2", (A,)),  # missing final ':'
        ("A,NVIDIA,1,2,extra,fields:", (A,)),
        (",,+5,-6:", (ContainerDevice("", "", 5, -6),)),
    ],
)
def test_container_devices_tolerance(value: str, want: object) -> None:
    assert decode_container_devices(value) == want


MIG_AFTER_DP = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb",'
    '"placement":{"start":0,"size":2},"migUUID":"MIG-a","gpuInstanceID":4,"computeInstanceID":0}]'
)
MIG_SCHEDULER = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
    '"placement":{"start":6,"size":1}}]'
)


def test_mig_allocation_examples_byte_exact() -> None:
    after = MigAllocation(0, 0, "GPU-a", "2g.10gb", MigPlacement(0, 2), "MIG-a", 4, 0)
    assert decode_mig_allocations(MIG_AFTER_DP) == (after,)
    assert encode_mig_allocations([after]) == MIG_AFTER_DP
    planned = MigAllocation(0, 0, "GPU-a", "1g.5gb", MigPlacement(6, 1))
    assert decode_mig_allocations(MIG_SCHEDULER) == (planned,)
    assert encode_mig_allocations([planned]) == MIG_SCHEDULER
    assert decode_mig_allocations("") == ()


@pytest.mark.parametrize(
    "value, want",
    [
        (
            "2026-08-21T12:00:00Z,default,gpu-pod",
            NodeLock(datetime(2026, 8, 21, 12, tzinfo=UTC), "default", "gpu-pod"),
        ),
        (
            "2026-08-21T20:00:00+08:00,default,gpu-pod",
            NodeLock(datetime(2026, 8, 21, 12, tzinfo=UTC), "default", "gpu-pod"),
        ),
        ("2026-08-21T12:00:00Z", NodeLock(datetime(2026, 8, 21, 12, tzinfo=UTC))),
        (
            "2026-08-21T12:00:00.123456789Z",
            NodeLock(datetime(2026, 8, 21, 12, 0, 0, 123456, tzinfo=UTC)),
        ),
    ],
)
def test_node_lock_examples(value: str, want: NodeLock) -> None:
    assert parse_node_lock(value) == want


def test_node_lock_format_examples_byte_exact() -> None:
    utc = datetime(2026, 8, 21, 12, tzinfo=UTC)
    plus8 = datetime(2026, 8, 21, 20, tzinfo=timezone(timedelta(hours=8)))
    assert format_node_lock(utc, "default", "gpu-pod") == "2026-08-21T12:00:00Z,default,gpu-pod"
    assert (
        format_node_lock(plus8, "default", "gpu-pod") == "2026-08-21T20:00:00+08:00,default,gpu-pod"
    )
    assert format_node_lock(utc) == "2026-08-21T12:00:00Z"


@pytest.mark.parametrize(
    "value", ["lock-values,default,pod-gpu", "not-a-time", "2026-08-21 12:00:00Z"]
)
def test_node_lock_bad_time_is_an_error(value: str) -> None:
    """HAMi also returns the owner; we only report the error."""
    with pytest.raises(ProtocolError):
        parse_node_lock(value)


def test_node_lock_patch_bodies_are_hamis() -> None:
    value = "2026-08-21T12:00:00Z,default,gpu-pod"
    assert node_lock_patch(value, "42") == json.loads(
        '{"metadata":{"annotations":{"hami.io/mutex.lock":"2026-08-21T12:00:00Z,default,gpu-pod"},'
        '"resourceVersion":"42"}}'
    )
    assert node_lock_patch(None, "42") == json.loads(
        '{"metadata":{"annotations":{"hami.io/mutex.lock":null},"resourceVersion":"42"}}'
    )


def test_handshake_example() -> None:
    assert format_handshake_request(datetime(2026, 8, 21, 12)) == "Requesting_2026-08-21 12:00:00"


def test_unix_seconds_examples() -> None:
    assert format_unix_seconds(datetime(2025, 8, 21, 8, tzinfo=UTC)) == "1755763200"
    assert format_unix_seconds(datetime(2025, 8, 21, 8, 1, tzinfo=UTC)) == "1755763260"


@pytest.mark.parametrize("phase", ["allocating", "success", "failed"])
def test_bind_phase_values(phase: str) -> None:
    assert parse_bind_phase(phase) == BindPhase(phase) == phase


def test_filter_patch_example_is_hamis() -> None:
    value = f"{V100_B},NVIDIA,3000,30:;"
    body = pod_annotations_patch(
        {
            KEY_VGPU_NODE: "node67-4v100",
            KEY_VGPU_TIME: "1755763200",
            KEY_NVIDIA_TO_ALLOCATE: value,
            KEY_NVIDIA_ALLOCATED: value,
        }
    )
    assert body == json.loads(
        '{"metadata":{"annotations":{"hami.io/vgpu-devices-allocated":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,30:;",'
        '"hami.io/vgpu-devices-to-allocate":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,30:;",'
        '"hami.io/vgpu-node":"node67-4v100","hami.io/vgpu-time":"1755763200"},'
        '"labels":{"hami.io/vgpu-node":"node67-4v100"}}}'
    )


# Every error text HAMi gives, per decoder: `reason` is HAMi's text exactly.
ERRORS = [
    *[
        (decode_node_devices, v, r)
        for v, r in [
            ("", "node annotation missing device separator"),
            (",", "node annotation missing device separator"),
            ("a", "node annotation missing device separator"),
            ("a:", 'malformed node annotation segment: "a"'),
            ("a,1,2:", "unexpected field count 3 in node annotation"),
            (
                "id,notanint,1,1,t,0,true:",
                'invalid count field: strconv.ParseInt: parsing "notanint": invalid syntax',
            ),
            (
                "id,1,2147483648,1,t,0,true:",
                'invalid memory field: strconv.ParseInt: parsing "2147483648": value out of range',
            ),
            (
                "id,1,1,x,t,0,true:",
                'invalid core field: strconv.ParseInt: parsing "x": invalid syntax',
            ),
            # health is parsed before numa
            (
                "id,1,1,1,t,x,yes:",
                'invalid health field: strconv.ParseBool: parsing "yes": invalid syntax',
            ),
            ("id,1,1,1,t,x,true:", 'invalid numa field: strconv.Atoi: parsing "x": invalid syntax'),
            (
                "id,1,1,1,t,0,true,x,mig:",
                'invalid index field: strconv.Atoi: parsing "x": invalid syntax',
            ),
            ("id,1,1,1,t,0,true,-1,mig:", "index field must not be negative: -1"),
        ]
    ],
    *[
        (decode_container_devices, v, r)
        for v, r in [
            (
                "A,NVIDIA,1:",
                "pod annotation format error, missing fields, do not use nodeName in task spec",
            ),
            (
                "A,NVIDIA,x,1:",
                'invalid memory field: strconv.ParseInt: parsing "x": invalid syntax',
            ),
            (
                "A,NVIDIA,1, 1:",
                'invalid core field: strconv.ParseInt: parsing " 1": invalid syntax',
            ),
        ]
    ],
    *[
        (decode_mig_allocations, v, r)
        for v, r in [
            (
                '[{"containerIndex":-1,"gpuUUID":"g","profile":"p","placement":{"size":1}}]',
                "MIG allocation 0 is incomplete",
            ),
            (
                '[{"gpuUUID":"","profile":"p","placement":{"size":1}}]',
                "MIG allocation 0 is incomplete",
            ),
            (
                '[{"gpuUUID":"g","profile":"p","placement":{"size":0}}]',
                "MIG allocation 0 is incomplete",
            ),
            (
                '[{"gpuUUID":"g","profile":"p","placement":{"size":1},"migUUID":"m"}]',
                "MIG allocation 0 has partial runtime identity",
            ),
            (
                '[{"gpuUUID":"g","profile":"p","placement":{"size":1}},{"gpuUUID":"h","profile":"p","placement":{"size":1}}]',
                "duplicate MIG allocation for container 0 device 0",
            ),
        ]
    ],
    *[
        (parse_node_lock, v, r)
        for v, r in [
            ("a,b", "malformed lock annotation: expected 3 parts, got 2 from a,b"),
            ("a,b,c,d", "malformed lock annotation: expected 3 parts, got 4 from a,b,c,d"),
        ]
    ],
]


@pytest.mark.parametrize(
    "decode, value, reason", ERRORS, ids=[f"{d.__name__}:{v[:30]}" for d, v, _ in ERRORS]
)
def test_decoder_errors_are_hamis(decode: Callable[[str], object], value: str, reason: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode(value)
    assert caught.value.reason == reason
    assert caught.value.value == value
