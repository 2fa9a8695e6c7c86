"""`pyhami demo`: the example pods on the demo cluster end as each was written to show, the
command prints a readable outcome, and bad input is refused with a message naming it."""

import json
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.kube import KubeClient
from pyhami.kube.errors import Forbidden
from pyhami.kube.manifests import PodManifest
from pyhami.kube.resources import NAMESPACES
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, KEY_NVIDIA_TO_ALLOCATE
from pyhami.sim.demo import run as run_module
from pyhami.sim.demo import usage as usage_module
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.pods import PodFileError, load_pods, parse_pods
from pyhami.sim.demo.results import PodResult
from pyhami.sim.demo.run import submit_all
from pyhami.sim.demo.settings import DemoSettings, card_uuid
from pyhami.sim.demo.usage import NATIVE_BUILD
from pyhami.testing.namespace_runtime import NamespaceRuntime

from .conftest import Native

CARD_MIB = {"A100": 81920, "V100": 32768, "T4": 15360}


def by_name(results: Sequence[PodResult]) -> dict[str, PodResult]:
    return {result.name: result for result in results}


def cards(result: PodResult) -> list[str]:
    return [share.uuid for share in result.cards]


def model_mib(model: str) -> int:
    return next(mib for key, mib in CARD_MIB.items() if key in model)


async def test_example_pods_end_as_their_stories_say() -> None:
    async with DemoCluster(DemoSettings()) as cluster:
        results = by_name(await submit_all(cluster, load_pods()))

    unfit = {"too-big-200g", "wants-an-h100"}
    assert {n for n, r in results.items() if not r.ok} == unfit, results
    assert all(r.phase == "Running" for n, r in results.items() if n not in unfit)

    slice_ = results["slice-3g-30pct"].cards
    assert [(s.memory_mib, s.cores) for s in slice_] == [(3000, 30)]
    half = results["half-of-two-cards"].cards
    assert len(set(cards(results["half-of-two-cards"]))) == 2
    assert all(s.memory_mib == model_mib(s.model) // 2 and s.cores == 30 for s in half)
    assert [s.cores for s in results["cores-60pct"].cards] == [60]

    whole = results["two-whole-cards"]
    assert len(set(cards(whole))) == 2
    assert all(s.memory_mib == model_mib(s.model) and s.cores == 100 for s in whole.cards)
    others = {u for n, r in results.items() if n != "two-whole-cards" for u in cards(r)}
    assert not others & set(cards(whole)), "exclusive cards are shared with nobody"

    four = results["four-cards-8g"]
    assert len(set(cards(four))) == 4 and len({s.node for s in four.cards}) == 1
    assert {s.memory_mib for s in four.cards} == {8000}

    assert all("V100" in s.model or "T4" in s.model for s in results["only-v100-or-t4"].cards)
    assert all("A100" not in s.model for s in results["not-an-a100"].cards)
    assert cards(results["pinned-to-one-card"]) == [card_uuid(1, 0)]
    assert cards(results["binpack-a"]) == cards(results["binpack-b"]), "GPU binpack: one card"
    assert cards(results["spread-a"]) != cards(results["spread-b"]), "GPU spread: two cards"
    # Node spread: both go to the node nobody uses yet (binpack would take a used one).
    spread = {s.node for name in ("spread-a", "spread-b") for s in results[name].cards}
    earlier = {s.node for n, r in results.items() if not n.startswith("spread") for s in r.cards}
    assert spread == {"gpu-node-3"} and "gpu-node-3" not in earlier

    for name, reason in (
        ("too-big-200g", "CardInsufficientMemory"),
        ("wants-an-h100", "CardTypeMismatch"),
    ):
        why = results[name].why
        assert {w.node for w in why} == {"gpu-node-1", "gpu-node-2", "gpu-node-3"}
        assert all(w.counts == {reason: w.cards} for w in why), why


async def test_many_nodes_cpu_pods_namespaces_and_refusals() -> None:
    """More nodes than the default thread pool has workers (each plugin's XID wait holds one),
    a pod without GPUs (the default-scheduler profile places it), pods in namespaces the cluster
    did not have (declared by a Namespace document, or not), and one the API refuses."""
    pods = parse_pods(
        "kind: Pod\nmetadata: {name: gpu}\nspec: {containers: [{name: c, image: cuda, "
        "resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]}\n---\n"
        "kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: nginx}]}\n---\n"
        "kind: Namespace\nmetadata: {name: team-a, labels: {team: a}}\n---\n"
        "kind: Pod\nmetadata: {name: x, namespace: team-a}\n"
        "spec: {containers: [{name: c, image: i, "
        "resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]}\n---\n"
        "kind: Pod\nmetadata: {name: y, namespace: nowhere}\n"
        "spec: {containers: [{name: c, image: i}]}\n---\n"
        "kind: Pod\nmetadata: {name: no-image}\nspec: {containers: [{name: c}]}\n",
        "pods.yaml",
    )
    async with DemoCluster(DemoSettings(nodes=8, gpus=1)) as cluster:
        gpu, web, declared, undeclared, refused = await submit_all(cluster, pods)
        assert cluster.harness.outcomes_for("default", "web") == [], "not our scheduler's pod"
        team = await cluster.client.get(NAMESPACES, "team-a")
    assert gpu.phase == "Running" and len(gpu.cards) == 1
    assert web.phase == "Running" and web.node.startswith("gpu-node-") and web.cards == ()
    assert declared.phase == "Running" and len(declared.cards) == 1
    assert team["metadata"]["labels"]["team"] == "a"
    assert undeclared.phase == "Running"
    assert refused.phase == "Refused" and "image: Required value" in refused.message


def one_pod(name: str, limits: str) -> str:
    """A one-container pod file with these resource limits (YAML flow mapping)."""
    return (
        f"kind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: [{{name: c, image: cuda, "
        f"resources: {{limits: {limits}}}}}]}}\n"
    )


async def test_only_our_components_may_change_a_pods_allocation_record() -> None:
    """The chart's two webhooks on the demo stack: the scheduler and the device plugin move
    the pod through its states (their updates skip the ownership webhook: its matchConditions),
    a user may not, and a user cannot slip a forged record past the webhook by labelling the
    pod `hami.io/webhook: ignore`."""
    async with DemoCluster(DemoSettings(nodes=1, gpus=1)) as cluster:
        gpu_pod = one_pod("p", "{nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}")
        (placed,) = await submit_all(cluster, parse_pods(gpu_pod, "pods.yaml"))
        assert placed.phase == "Running"
        updates = [
            call
            for call in cluster.api.admission.calls
            if call.webhook == "ownership.pyhami.io" and call.operation == "UPDATE"
        ]
        assert updates == []

        alice = KubeClient(cluster.api.configuration("alice"))
        async with alice:
            before = await alice.get_pod("default", "p")
            with pytest.raises(Forbidden) as refused:
                await alice.patch_pod(
                    "default", "p", {"metadata": {"annotations": {KEY_NVIDIA_ALLOCATED: None}}}
                )
            assert refused.value.message == (
                'admission webhook "ownership.pyhami.io" denied the request: annotation '
                f"{KEY_NVIDIA_ALLOCATED} may be changed by the scheduler and the device plugin "
                "only; alice is not a trusted annotation writer "
                "(scheduler flag --trusted-annotation-writer)"
            )
            after = await alice.get_pod("default", "p")
            assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
            labelled = await alice.patch_pod("default", "p", {"metadata": {"labels": {"a": "b"}}})
            assert labelled["metadata"]["labels"]["a"] == "b", "other changes are the user's"

            forged = {
                "metadata": {
                    "name": "forged",
                    "labels": {"hami.io/webhook": "ignore"},
                    "annotations": {KEY_NVIDIA_TO_ALLOCATE: "GPU-x,NVIDIA,80000,100:;"},
                },
                "spec": {"containers": [{"name": "c", "image": "cuda"}]},
            }
            created = await alice.create_pod("default", forged)
            assert KEY_NVIDIA_TO_ALLOCATE not in created["metadata"].get("annotations", {})
            assert created["spec"]["schedulerName"] == "default-scheduler", (
                "the ignored pod is not taken by our scheduler"
            )


async def test_a_pod_asking_only_for_a_card_gets_it_whole() -> None:
    """HAMi's short form: `nvidia.com/gpu` alone means all its memory and cores."""
    async with DemoCluster(DemoSettings(nodes=1, gpus=1)) as cluster:
        whole = one_pod("whole", "{nvidia.com/gpu: 1}")
        (placed,) = await submit_all(cluster, parse_pods(whole, "pods.yaml"))
    assert placed.phase == "Running"
    (card,) = placed.cards
    assert (card.memory_mib, card.cores) == (model_mib(card.model), 100)


def test_demo_command_prints_the_outcome(tmp_path: Path) -> None:
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        """\
apiVersion: v1
kind: Pod
metadata: {name: small}
spec:
  containers:
    - name: app
      image: cuda
      resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}
---
apiVersion: v1
kind: Pod
metadata: {name: huge}
spec:
  containers:
    - name: app
      image: cuda
      resources: {limits: {nvidia.com/gpu: 2}}
"""
    )
    command = [sys.executable, "-c", "from pyhami.cli import main; main()", "demo"]
    options = ["--nodes", "1", "--gpus", "1", "--pods", str(pods), "--keep-running"]
    demo = subprocess.Popen(
        [*command, *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert demo.stdout is not None
        lines = []
        for line in demo.stdout:  # up to the last URL line: the cluster is up and waiting
            lines.append(line)
            if line.lstrip().startswith("monitor gpu-node-1"):
                break
        urls = dict(
            (line.split()[0], shlex.split(line.split("curl ", 1)[1]))
            for line in lines
            if "curl" in line
        )
        explain = subprocess.run(
            ["curl", "-sf", *urls["explain"]], capture_output=True, text=True, check=False
        )
        assert json.loads(explain.stdout)["outcome"] == "unschedulable", explain
        metrics = subprocess.run(
            ["curl", "-sf", *urls["monitor"]], capture_output=True, text=True, check=False
        )
        assert 'hami_vgpu_memory_limit_bytes{container="app"' in metrics.stdout
        demo.send_signal(signal.SIGINT)
        rest, errors = demo.communicate(timeout=30)
    finally:
        demo.kill()
    out = "".join(lines) + rest
    assert demo.returncode == 0, errors
    assert "node gpu-node-1   1 x NVIDIA A100-SXM4-80GB" in out
    assert "small" in out and "A100-SXM4-80GB   #0    1000 MiB" in out
    assert "huge" in out and "not scheduled" in out
    assert "gpu-node-1   fewer cards than the pod asks for (NodeInsufficientDevice)" in out
    assert "2 pods: 1 running, 1 not schedulable" in out
    assert errors == "", "the services' logs stay quiet unless --verbose"
    workdir = next(w for w in out.split() if w.startswith("/tmp/pyhami-demo-"))
    assert not Path(workdir.split("/ca.crt")[0]).exists(), "Ctrl-C stops it and cleans up"


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(["--nodes", "0"], "--nodes must be 1..64", id="no-nodes"),
        pytest.param(["--gpus", "17"], "--gpus must be 1..16", id="too-many-gpus"),
        pytest.param(["--pods", "/nonexistent.yaml"], "/nonexistent.yaml: cannot read", id="file"),
    ],
)
def test_demo_command_refuses_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["demo", *args])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("a: [", "not valid YAML", id="yaml"),
        pytest.param("", "no pods in the file", id="empty"),
        pytest.param(
            "kind: Service\nmetadata: {name: s}", "kind 'Service' is neither a Pod nor a", id="kind"
        ),
        pytest.param("kind: Pod\nspec: {containers: []}", "metadata.name is missing", id="name"),
        pytest.param("kind: Pod\nmetadata: {name: p}", "has no spec.containers", id="spec"),
        pytest.param(
            "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: "
            "{limits: {nvidia.com/gpu: [1]}}}]}",
            "resources.limits must map names to quantities",
            id="quantity",
        ),
        pytest.param(
            "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n---\n"
            "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}",
            "pod names repeat: default/p",
            id="duplicate",
        ),
        pytest.param("kind: List\nitems: 3", "a List needs items", id="list"),
    ],
)
def test_pod_file_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(PodFileError, match=message.replace("[", r"\[")) as caught:
        parse_pods(text, "my-pods.yaml")
    assert str(caught.value).startswith("my-pods.yaml")


def test_pod_file_takes_a_list_and_stores_quantities_as_strings() -> None:
    pods = parse_pods(
        "kind: List\nitems:\n- metadata: {name: p, namespace: team-a}\n"
        "  spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 2}}}]}\n",
        "list.yaml",
    )
    (pod,) = pods
    assert isinstance(pod, PodManifest) and (pod.namespace, pod.name) == ("team-a", "p")
    assert pod.document["metadata"] == {"name": "p", "namespace": "team-a"}
    assert pod.document["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}


def test_demo_reads_stdin_into_a_new_namespace_and_says_when_it_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_module, "SLOW_S", 0.0)  # every pod is "slow": the line shows
    pod = one_pod("p", "{nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}")
    result = CliRunner().invoke(
        app, ["demo", "--nodes", "1", "--gpus", "1", "--pods", "-", "-n", "team-b"], input=pod
    )
    assert result.exit_code == 0, result.output
    assert "  ..   p                      still waiting for kube-scheduler and kubelet" in (
        result.stdout
    )
    assert "  ok   team-b/p " in result.stdout
    assert "1 pods: 1 running" in result.stdout


def test_demo_pods_run_under_libvgpu_and_the_table_shows_their_use(
    native: Native, tmp_path: Path
) -> None:
    """With libvgpu built and private mount namespaces available (root and unshare, as in CI),
    each pod runs a small CUDA program under libvgpu on the stub driver; the monitors measure
    it, the table shows it. Where namespaces are not available the demo says so instead."""
    assert native.library.parent == NATIVE_BUILD, "the demo finds the build the tests made"
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        one_pod("small", "{nvidia.com/gpu: 1, nvidia.com/gpumem: 3000}")
        + "---\n"
        + one_pod("pair", "{nvidia.com/gpu: 2, nvidia.com/gpumem: 1000}")
    )
    result = CliRunner().invoke(app, ["demo", "--nodes", "1", "--gpus", "2", "--pods", str(pods)])
    assert result.exit_code == 0, result.output
    if (why := NamespaceRuntime.available()) is not None:
        assert f"Use is not shown (the pods run no programs): {why}." in result.stdout
        return
    table = result.stdout.split("\nPOD ", 1)[1]
    assert table.startswith(" ") and "STATUS   USED/LIMIT" in table.splitlines()[0]
    rows = {line.split()[0]: line for line in table.splitlines()[1:] if line[:1].isalpha()}
    assert rows["small"].endswith("Running  1500/3000 MiB")
    assert rows["pair"].endswith("Running  1000/2000 MiB"), "half of 1000 MiB on each card"


def test_demo_without_libvgpu_says_use_is_not_shown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(usage_module, "NATIVE_BUILD", tmp_path)
    pods = tmp_path / "pods.yaml"
    pods.write_text(one_pod("small", "{nvidia.com/gpu: 1, nvidia.com/gpumem: 3000}"))
    result = CliRunner().invoke(app, ["demo", "--nodes", "1", "--gpus", "1", "--pods", str(pods)])
    assert result.exit_code == 0, result.output
    assert "USED/LIMIT" not in result.stdout
    assert "Use is not shown (the pods run no programs): " in result.stdout
