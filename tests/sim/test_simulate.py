"""`pyhami simulate` / `pyhami explain` on kubectl-style input, and on bad input."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyhami.cli import app

FIXTURES = Path(__file__).parent / "fixtures"
CLUSTER = str(FIXTURES / "cluster.yaml")
runner = CliRunner()


def simulate(*args: str) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, ["simulate", "-f", CLUSTER, "--now", "1764700000", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_simulate_json_contract() -> None:
    pods = simulate()["pods"]
    assert [(p["namespace"], p["name"]) for p in pods] == [
        ("kube-system", "coredns-7db6d8ff4d-abcde"),
        ("ml", "notebook"),
        ("default", "pair"),
        ("default", "too-big"),
    ], "every pod that is not an existing allocation is decided, in input order"
    coredns, notebook, pair, too_big = pods
    assert coredns == {"namespace": "kube-system", "name": "coredns-7db6d8ff4d-abcde",
                       "node": None, "score": None, "annotations": {}, "failedNodes": {}}
    assert notebook["node"] == "gpu-b"  # binpack: the busier node (score 4.24 vs 3.22)
    assert notebook["score"] == pytest.approx(4.236, abs=1e-3)
    assert notebook["annotations"] == {
        "hami.io/vgpu-node": "gpu-b",
        "hami.io/vgpu-time": "1764700000",
        "hami.io/vgpu-devices-to-allocate": "GPU-t4-1,NVIDIA,10000,20:;",
        "hami.io/vgpu-devices-allocated": "GPU-t4-1,NVIDIA,10000,20:;",
    }
    assert notebook["failedNodes"] == {}
    # the init container keeps its empty segment; the two free T4s, the cordoned one skipped
    assert pair["annotations"]["hami.io/vgpu-devices-allocated"] == (
        ";GPU-t4-1,NVIDIA,4000,0:GPU-t4-0,NVIDIA,4000,0:;")
    assert too_big == {
        "namespace": "default",
        "name": "too-big",
        "node": None,
        "score": None,
        "annotations": {},
        "failedNodes": {
            "gpu-a": "2/2 CardInsufficientMemory",
            "gpu-b": "1/3 CardCordoned, 2/3 CardInsufficientMemory",
            "cpu-1": "node unregistered",
        },
    }


def test_policies_from_the_command_line() -> None:
    pods = simulate("--node-policy", "spread", "--gpu-policy", "binpack")["pods"]
    assert pods[1]["node"] == "gpu-a"
    assert pods[1]["annotations"]["hami.io/vgpu-devices-allocated"] == (
        "GPU-a100-0,NVIDIA,10000,20:;")  # binpack: the card that already holds a task


def test_table_output_is_readable() -> None:
    result = runner.invoke(app, ["simulate", "-f", CLUSTER, "-o", "table"])
    assert result.exit_code == 0
    assert "ml/notebook  ->  gpu-b" in result.stdout
    assert "default/too-big  ->  no node fits" in result.stdout
    assert "1/3 CardCordoned, 2/3 CardInsufficientMemory" in result.stdout


def test_explain_names_every_node_and_card() -> None:
    result = runner.invoke(app, ["explain", "default/too-big", "-f", CLUSTER])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "no node fits" in out
    assert "card GPU-t4-2 (index 2, 0/4 tasks, 0/15360 MiB, 0/100 % cores): rejected: " \
        "CardCordoned" in out
    assert "card GPU-a100-0 (index 0, 1/10 tasks, 20000/81920 MiB, 30/100 % cores): " \
        "rejected: CardInsufficientMemory" in out
    assert "node cpu-1: not registered: no hami.io/node-nvidia-register annotation" in out
    chosen = runner.invoke(app, ["explain", "notebook", "-f", CLUSTER]).stdout
    assert "node gpu-b: CHOSEN" in chosen and "node gpu-a: fits" in chosen
    assert "container 0 gets GPU-t4-1: 10000 MiB, 20 % cores" in chosen
    assert "card GPU-t4-0 (index 0, 1/4 tasks, 8000/15360 MiB, 50/100 % cores): not needed" \
        in chosen


def test_lists_and_streams_and_json_are_all_read(tmp_path: Path) -> None:
    documents = [{"kind": "Node", "metadata": {"name": "n1", "annotations": {
        "hami.io/node-nvidia-register":
            '[{"id":"GPU-1","count":2,"devmem":1000,"devcore":100,"type":"NVIDIA-X","health":true}]'
    }}}, {"kind": "PodList", "items": [
        {"kind": "Pod", "metadata": {"name": "p1"}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
        {"kind": "Pod", "metadata": {"name": "p2"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}},
    ]}]
    (tmp_path / "nodes.json").write_text(json.dumps(documents[0]))
    (tmp_path / "pods.yaml").write_text("---\n" + json.dumps(documents[1]) + "\n---\n")
    result = runner.invoke(app, ["simulate", "-f", str(tmp_path / "nodes.json"),
                                 "-f", str(tmp_path / "pods.yaml"), "--now", "5"])
    assert result.exit_code == 0, result.output
    pods = json.loads(result.stdout)["pods"]
    # whole-card requests: the first takes all memory, the second finds none left
    assert pods[0]["node"] == "n1"
    assert pods[1]["failedNodes"] == {"n1": "1/1 CardInsufficientMemory"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: [unclosed\n", "not valid YAML"),
        ("- 1\n- 2\n", "expected Kubernetes objects"),
        ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: "
         "{limits: {nvidia.com/gpu: lots}}}]}\n", "resources.limits[nvidia.com/gpu]"),
        ("kind: Pod\nmetadata: {name: p, annotations: {hami.io/vgpu-node: n, "
         "hami.io/vgpu-devices-allocated: 'GPU-1,NVIDIA:;'}}\nspec: {containers: []}\n",
         "hami.io/vgpu-devices-allocated"),
        ("kind: NodeList\nitems: 3\n", "items must be a list"),
        ("metadata: {name: x}\n", "without a kind"),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_2(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = runner.invoke(app, ["simulate", "-f", str(path)])
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


def test_missing_file_and_bad_config_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "-f", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "cannot read" in result.stderr
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  memoryFactor: many\n")
    result = runner.invoke(app, ["simulate", "-f", CLUSTER, "--config", str(config)])
    assert result.exit_code == 2 and "memoryFactor" in result.stderr
    result = runner.invoke(app, ["explain", "ghost", "-f", CLUSTER])
    assert result.exit_code == 2 and "no pending pod 'ghost'" in result.stderr


def test_device_config_is_applied(tmp_path: Path) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  memoryFactor: 2\n  resourceCoreName: nvidia.com/gpucores\n")
    result = runner.invoke(app, ["simulate", "-f", CLUSTER, "--config", str(config),
                                 "--now", "1"])
    assert result.exit_code == 0, result.output
    notebook = json.loads(result.stdout)["pods"][1]
    # 10000 requested × factor 2 no longer fits a 15 GB T4; the idle A100 takes it (spread)
    assert notebook["annotations"]["hami.io/vgpu-devices-allocated"] == (
        "GPU-a100-1,NVIDIA,20000,20:;")


def test_a_node_whose_registration_cannot_be_read_is_left_out_and_named(tmp_path: Path) -> None:
    """The live scheduler skips such a node; the offline tools also say why, and warn, since
    the input (or the plugin that wrote it) is likely wrong. A node with no cards is no news."""
    register = "hami.io/node-nvidia-register"
    nodes = [
        {"kind": "Node", "metadata": {"name": "bad", "annotations": {register: "garbage"}}},
        {"kind": "Node", "metadata": {"name": "empty", "annotations": {register: "[]"}}},
    ]
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": [*nodes, pod]}))
    simulated = runner.invoke(app, ["simulate", "-f", str(path)])
    assert simulated.exit_code == 0, simulated.output
    assert simulated.stderr == (
        "warning: node bad left out: registration unreadable: node device register (colon "
        'form): node annotation missing device separator (value "garbage")\n'
    )
    failed = json.loads(simulated.stdout)["pods"][0]["failedNodes"]
    assert failed == {"bad": "node unregistered", "empty": "node unregistered"}, "HAMi's answer"
    explained = runner.invoke(app, ["explain", "p", "-f", str(path)])
    assert "node bad: not registered: registration unreadable: node device register" in (
        explained.stdout
    )
    assert "node empty: not registered: no gpu found on node" in explained.stdout
