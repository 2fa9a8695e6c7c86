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
        ("ml", "notebook"),
        ("default", "pair"),
        ("default", "too-big"),
    ], "the pending pods are decided in input order (running coredns and a finished job are not)"
    notebook, pair, too_big = pods
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
    assert pods[0]["node"] == "gpu-a"
    assert pods[0]["annotations"]["hami.io/vgpu-devices-allocated"] == (
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
    notebook = json.loads(result.stdout)["pods"][0]
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


REGISTER_ONE_CARD = (
    '[{"id":"GPU-only","count":4,"devmem":16000,"devcore":100,"type":"NVIDIA-T4","health":true}]'
)


def _pod(name: str, *, gpus: int = 0, node: str | None = None, phase: str = "Pending",
         namespace: str = "default") -> dict:  # type: ignore[type-arg]
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "100m"}
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": limits}}]}  # type: ignore[type-arg]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec,
            "status": {"phase": phase}}


def _node(name: str, register: str | None = None) -> dict:  # type: ignore[type-arg]
    annotations = {"hami.io/node-nvidia-register": register} if register else {}
    return {"metadata": {"name": name, "annotations": annotations}}


def _kinded(kind: str, objects: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    return [{"apiVersion": "v1", "kind": kind, **obj} for obj in objects]


def test_a_kubectl_dump_of_a_200_node_cluster(tmp_path: Path) -> None:
    """`kubectl get nodes,pods -A -o yaml`: one List of mixed kinds, mostly running pods that
    no scheduler decides again, and finished GPU jobs that hold nothing."""
    nodes = [_node("gpu-1", REGISTER_ONE_CARD)] + [_node(f"cpu-{i}") for i in range(199)]
    running = [_pod(f"web-{i}", node=f"cpu-{i % 199}", phase="Running", namespace="apps")
               for i in range(1300)]
    finished = [_pod(f"job-{i}", gpus=1, node="gpu-1", phase=phase)
                for i, phase in enumerate(("Succeeded", "Failed"))]
    # the whole card: it fits only if the finished jobs are not counted
    wanted = _pod("train")
    wanted["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}
    dump = {"apiVersion": "v1", "kind": "List", "items": [
        *_kinded("Node", nodes), *_kinded("Pod", [*running, *finished, wanted])]}
    path = tmp_path / "dump.yaml"
    path.write_text(json.dumps(dump))
    result = runner.invoke(app, ["simulate", "-f", str(path), "-o", "table"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("default/train  ->  gpu-1"), result.stdout
    assert len(result.stdout.splitlines()) < 10, "no line per running pod"
    assert "left out 2 finished pods (they hold nothing) and 1300 bound or running pods" in (
        result.stderr)
    pods = json.loads(runner.invoke(app, ["simulate", "-f", str(path)]).stdout)["pods"]
    assert [p["name"] for p in pods] == ["train"]


def test_the_api_s_own_lists_whose_items_have_no_kind(tmp_path: Path) -> None:
    """GET /api/v1/nodes and /api/v1/pods answer a NodeList and a PodList: items carry no kind."""
    (tmp_path / "nodes.json").write_text(json.dumps(
        {"kind": "NodeList", "apiVersion": "v1", "items": [_node("gpu-1", REGISTER_ONE_CARD)]}))
    (tmp_path / "pods.json").write_text(json.dumps(
        {"kind": "PodList", "apiVersion": "v1", "items": [_pod("p", gpus=1)]}))
    result = runner.invoke(app, ["simulate", "-f", str(tmp_path / "nodes.json"),
                                 "-f", str(tmp_path / "pods.json")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pods"][0]["node"] == "gpu-1"
    # in a plain List an item still needs its kind
    (tmp_path / "list.json").write_text(json.dumps({"kind": "List", "items": [_pod("p")]}))
    result = runner.invoke(app, ["simulate", "-f", str(tmp_path / "list.json")])
    assert result.exit_code == 2 and "without a kind" in result.stderr


def test_pending_pods_without_a_gpu_request_are_one_line(tmp_path: Path) -> None:
    pods = [_pod(f"plain-{i}") for i in range(8)]
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "List", "items": [
        *_kinded("Node", [_node("gpu-1", REGISTER_ONE_CARD)]), *_kinded("Pod", pods)]}))
    result = runner.invoke(app, ["simulate", "-f", str(path), "-o", "table"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "8 pending pods ask for no GPU: default/plain-0, default/plain-1, default/plain-2, "
        "default/plain-3, default/plain-4 and 3 more")


def _two_pending(tmp_path: Path) -> Path:
    whole = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}
    first, second = _pod("first", namespace="a"), _pod("second", namespace="a")
    for pod in (first, second):
        pod["spec"]["containers"][0]["resources"]["limits"] = whole
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "List", "items": [
        *_kinded("Node", [_node("gpu-1", REGISTER_ONE_CARD)]), *_kinded("Pod", [first, second]),
        *_kinded("Pod", [_pod("second", namespace="b", gpus=1)])]}))
    return path


def test_explain_places_earlier_pending_pods_only_when_asked(tmp_path: Path) -> None:
    path = str(_two_pending(tmp_path))
    alone = runner.invoke(app, ["explain", "a/second", "-f", path])
    assert alone.exit_code == 0, alone.output
    assert "chosen node: gpu-1" in alone.stdout
    assert "the 1 pending pod listed before it is not counted as placed" in alone.stdout
    after = runner.invoke(app, ["explain", "a/second", "-f", path, "--after-pending"])
    assert after.exit_code == 0, after.output
    assert "no node fits" in after.stdout
    assert "after placing the 1 pending pod listed before it" in after.stdout


def test_an_ambiguous_pod_name_is_refused_with_the_candidates(tmp_path: Path) -> None:
    result = runner.invoke(app, ["explain", "second", "-f", str(_two_pending(tmp_path))])
    assert result.exit_code == 2
    assert "'second' is ambiguous: a/second, b/second (use NAMESPACE/NAME)" in result.stderr


def test_a_full_card_is_not_called_not_needed(tmp_path: Path) -> None:
    """The card the pod did not need to look at is labelled by what it is: a full card is full."""
    register = (
        '[{"id":"GPU-full","count":4,"devmem":16000,"devcore":100,"type":"NVIDIA-T4",'
        '"health":true},{"id":"GPU-free","index":1,"count":4,"devmem":16000,"devcore":100,'
        '"type":"NVIDIA-T4","health":true}]'
    )
    holder = _pod("holder", node="gpu-1", phase="Running")
    holder["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "gpu-1",
        "hami.io/vgpu-devices-allocated": "GPU-full,NVIDIA,16000,100:;",
    }
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": [
        *_kinded("Node", [_node("gpu-1", register)]),
        *_kinded("Pod", [holder, _pod("small", gpus=1)])]}))
    result = runner.invoke(app, ["explain", "small", "-f", str(path)])
    assert result.exit_code == 0, result.output
    full = next(line for line in result.stdout.splitlines() if "card GPU-full" in line)
    assert full.endswith("): not usable: full (no free memory)"), full


def _t4_dump(path: Path, cards: int) -> str:
    register = [{"id": f"GPU-t4-{n}", "index": n, "count": 4, "devmem": 16384, "devcore": 100,
                 "type": "NVIDIA-Tesla T4", "mode": "hami-core", "health": True}
                for n in range(cards)]
    gpu = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}
    items = [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "t4", "annotations": {
             "hami.io/node-nvidia-register": json.dumps(register)}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "with-sidecar", "namespace": "default", "uid": "u1"},
         "spec": {"schedulerName": "hami-scheduler",
                  "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                                      "resources": {"limits": gpu}}],
                  "containers": [{"name": "app", "resources": {"limits": gpu}}]},
         "status": {"phase": "Pending"}},
    ]
    dump = path / f"t4-{cards}.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(dump)


def test_simulate_counts_a_native_sidecar_beside_the_app_container(tmp_path: Path) -> None:
    """The issue's example: sidecar 10000 MiB + app 10000 MiB never land on one 16384 MiB T4."""
    for cards, expected in ((1, None), (2, "t4")):
        result = runner.invoke(app, ["simulate", "-f", _t4_dump(tmp_path, cards)])
        assert result.exit_code == 0, result.output
        (decided,) = json.loads(result.stdout)["pods"]
        assert decided["node"] == expected
        if expected is None:
            assert decided["failedNodes"] == {"t4": "1/1 CardInsufficientMemory"}
        else:
            sidecar, app_container, _ = decided["annotations"][
                "hami.io/vgpu-devices-allocated"].split(";")
            assert sidecar.split(",")[0] != app_container.split(",")[0]


def _preemption_dump(path: Path) -> str:
    """Two T4s: card 0 holds low-a 8000 + low-b 7000, card 1 low-c 3000 + top-e 3000; the
    pending high pod (priority 1000) asks 14000 MiB."""
    register = [{"id": f"GPU-t4-{n}", "index": n, "count": 4, "devmem": 15360, "devcore": 100,
                 "type": "NVIDIA-Tesla T4", "mode": "hami-core", "health": True}
                for n in range(2)]
    items: list[dict] = [{"apiVersion": "v1", "kind": "Node", "metadata": {  # type: ignore[type-arg]
        "name": "t4", "annotations": {"hami.io/node-nvidia-register": json.dumps(register)}}}]
    for name, card, memory, priority in (("low-a", 0, 8000, 100), ("low-b", 0, 7000, 100),
                                         ("low-c", 1, 3000, 100), ("top-e", 1, 3000, 10000)):
        items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": {
                "hami.io/vgpu-node": "t4",
                "hami.io/vgpu-devices-allocated": f"GPU-t4-{card},NVIDIA,{memory},0:;"}},
            "spec": {"nodeName": "t4", "priority": priority, "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}})
    gpu = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "14000"}
    items.append({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "high", "namespace": "default", "uid": "uid-high"},
                  "spec": {"priority": 1000,
                           "containers": [{"name": "main", "resources": {"limits": gpu}}]},
                  "status": {"phase": "Pending"}})
    dump = path / "preemption.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(dump)


def test_simulate_preemption_evicts_the_two_pods_on_the_card_the_pod_needs(
    tmp_path: Path,
) -> None:
    dump = _preemption_dump(tmp_path)
    plain = runner.invoke(app, ["simulate", "-f", dump])
    (pending,) = json.loads(plain.stdout)["pods"]
    assert pending["node"] is None and "preemption" not in pending
    result = runner.invoke(app, ["simulate", "-f", dump, "--preemption"])
    assert result.exit_code == 0, result.output
    (placed,) = json.loads(result.stdout)["pods"]
    assert placed["node"] == "t4"
    assert placed["annotations"]["hami.io/vgpu-devices-allocated"] == "GPU-t4-0,NVIDIA,14000,0:;"
    assert placed["preemption"]["node"] == "t4"
    assert placed["preemption"]["victims"] == ["default/low-a", "default/low-b"]
    table = runner.invoke(app, ["simulate", "-f", dump, "--preemption", "-o", "table"]).stdout
    assert "default/high preemption: evict default/low-a, default/low-b on t4, then it runs " \
        "there" in table


def test_explain_names_the_victims_preemption_would_choose_and_why(tmp_path: Path) -> None:
    result = runner.invoke(app, ["explain", "high", "-f", _preemption_dump(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "no node fits" in result.stdout
    assert "preemption: evict default/low-a, default/low-b on t4" in result.stdout
    assert "evict default/low-a (priority 100), default/low-b (priority 100): the fewest 2 " \
        "victims whose removal lets the pod fit (it gets GPU-t4-0)" in result.stdout
    data = json.loads(runner.invoke(
        app, ["explain", "high", "-f", _preemption_dump(tmp_path), "-o", "json"]).stdout)
    assert data["preemption"]["victims"] == ["default/low-a", "default/low-b"]
