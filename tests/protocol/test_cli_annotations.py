"""`pyhami annotations decode|encode` through the real `pyhami` typer app."""

import json

import pytest
from typer.testing import CliRunner

from pyhami.cli import app

REGISTER = (
    '[{"id":"GPU-0","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB",'
    '"mode":"hami-core","health":true},{"id":"GPU-1","index":1,"count":10,"devmem":32768,'
    '"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"mig","migProfiles":'
    '[{"name":"1g.10gb","memoryMB":9984,"core":15,"sliceCount":1,"placements":null}]}]'
)
# Values whose decode → encode through the CLI gives back the same bytes.
STABLE = [
    ("hami.io/node-nvidia-register", REGISTER),
    ("hami.io/node-dcu-register", "DCU-0,10,7680,100,Z100,0,true,1,hami-core:"),
    (
        "hami.io/node-nvidia-score",
        '[{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{}}]',
    ),
    (
        "hami.io/vgpu-mig-allocations",
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb",'
        '"placement":{"start":0,"size":2},"migUUID":"MIG-a","gpuInstanceID":4,"computeInstanceID":0}]',
    ),
    ("hami.io/mutex.lock", "2026-08-21T20:00:00+08:00,default,gpu-pod"),
    ("hami.io/mutex.lock", "2026-08-21T12:00:00Z"),
    ("hami.io/node-handshake", "Requesting_2026-08-21 12:00:00"),
    ("hami.io/bind-phase", "allocating"),
    ("hami.io/bind-time", "1755763260"),
    ("hami.io/device-scoring-weights", "slot=1,core=2,memory=3"),
    ("hami.io/gpu-scheduler-policy", "binpack,numa"),
    ("hami.io/vgpu-node", "node67-4v100"),
    ("reasons", "1/10 CardInsufficientCore, 3/10 CardUuidMismatch"),
]


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["annotations", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("key, value", STABLE, ids=[f"{k}={v[:20]}" for k, v in STABLE])
def test_decode_then_encode_gives_the_value_back(key: str, value: str) -> None:
    code, decoded, err = run("decode", key, value)
    assert code == 0, err
    code, encoded, err = run("encode", key, "-", stdin=decoded)
    assert code == 0, err
    assert encoded.rstrip("\n") == value


def test_pod_devices_decode_shows_hamis_trailing_container_and_table() -> None:
    value = "GPU-a,NVIDIA,3000,30:;"
    code, out, _ = run("decode", "hami.io/vgpu-devices-to-allocate", value)
    assert code == 0
    assert json.loads(out) == [
        [
            {
                "uuid": "GPU-a",
                "type": "NVIDIA",
                "usedmem": 3000,
                "usedcores": 30,
                "idx": 0,
                "slots": 0,
            }
        ],
        [],
    ]
    code, table, _ = run("decode", "hami.io/vgpu-devices-to-allocate", value, "--table")
    assert code == 0
    header, first, second = table.splitlines()
    assert header.split() == ["CONTAINER", "UUID", "TYPE", "USEDMEM", "USEDCORES", "IDX", "SLOTS"]
    assert first.split() == ["0", "GPU-a", "NVIDIA", "3000", "30", "0", "0"]
    assert second.split() == ["1"]


def test_encode_pod_devices_from_json() -> None:
    data = json.dumps([[], [{"uuid": "GPU-a", "type": "NVIDIA", "usedmem": 5120, "usedcores": 14}]])
    code, out, err = run("encode", "hami.io/vgpu-devices-allocated", data)
    assert code == 0, err
    assert out == ";GPU-a,NVIDIA,5120,14:;\n"


def test_value_from_stdin() -> None:
    code, out, _ = run("decode", "hami.io/node-nvidia-register", "-", stdin=REGISTER + "\n")
    assert code == 0
    assert [d["id"] for d in json.loads(out)] == ["GPU-0", "GPU-1"]


def test_bad_value_exits_1_naming_key_and_problem() -> None:
    code, _, err = run("decode", "hami.io/node-dcu-register", "x,notanint,1,1,t,0,true:")
    assert code == 1
    assert "hami.io/node-dcu-register" in err
    assert 'invalid count field: strconv.ParseInt: parsing "notanint": invalid syntax' in err


def test_unknown_key_exits_2_and_lists_known_keys() -> None:
    code, _, err = run("decode", "hami.io/nope", "x")
    assert code == 2
    assert "unknown annotation key 'hami.io/nope'" in err
    assert "hami.io/node-nvidia-register" in err


@pytest.mark.parametrize(
    "data, fragment",
    [
        ("not json", "not JSON"),
        ('[{"uuid":"a"}]', "cannot build ContainerDevice"),
        ('[{"id":"a","colour":"red"}]', "unknown field(s) ['colour']"),
        ('[{"id":"a","count":"ten"}]', "expected an integer"),
        ('[{"id":"a","count":4294967296}]', "outside"),
    ],
)
def test_bad_encode_input_is_refused_clearly(data: str, fragment: str) -> None:
    key = "hami.io/vgpu-devices-allocated" if "uuid" in data else "hami.io/node-nvidia-register"
    if key.endswith("allocated"):
        data = f"[{data}]"
    code, _, err = run("encode", key, data)
    assert code in (1, 2)
    assert fragment in err
