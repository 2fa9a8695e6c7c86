"""`pyhami explain POD` (and `kubectl pyhami explain POD`) on a live cluster through a kubeconfig:
the fake API server stands in for the cluster."""

import asyncio
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.kube import KubeClient
from pyhami.kube.resources import NODES
from pyhami.testing import FakeKubeAPIServer

REGISTER = (
    '[{"id":"GPU-0","count":4,"devmem":16000,"devcore":100,"type":"NVIDIA-T4","health":true},'
    '{"id":"GPU-1","index":1,"count":4,"devmem":16000,"devcore":100,"type":"NVIDIA-T4",'
    '"health":true}]'
)


def _pod(name: str, namespace: str, memory: str) -> dict:  # type: ignore[type-arg]
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}}


async def _cluster(api: FakeKubeAPIServer) -> None:
    async with KubeClient(api.configuration()) as client:
        await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "gpu-1", "annotations": {"hami.io/node-nvidia-register": REGISTER}}})
        await client.create_pod("default", _pod("train", "default", "8000"))
        await client.create_pod("default", _pod("huge", "default", "20000"))
        await client.create_pod("kube-system", _pod("huge", "kube-system", "1000"))


async def test_explain_reads_the_cluster_through_the_kubeconfig(tmp_path: Path) -> None:
    async with FakeKubeAPIServer() as api:
        await _cluster(api)
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        invoke = CliRunner().invoke
        fits = await asyncio.to_thread(invoke, app, ["explain", "train", "--kubeconfig",
                                                    kubeconfig])
        assert fits.exit_code == 0, fits.output
        assert fits.stdout.startswith("pod default/train\n")
        assert "\nchosen node: gpu-1\n" in fits.stdout
        assert "card GPU-1 (index 1, 0/4 tasks, 0/16000 MiB, 0/100 % cores): " in fits.stdout
        too_big = await asyncio.to_thread(invoke, app, ["explain", "huge", "-n", "default",
                                                       "--kubeconfig", kubeconfig])
        assert "rejected: CardInsufficientMemory" in too_big.stdout
        ambiguous = await asyncio.to_thread(invoke, app, ["explain", "huge", "--kubeconfig",
                                                         kubeconfig])
        assert ambiguous.exit_code == 2
        assert "ambiguous: default/huge, kube-system/huge" in ambiguous.stderr


async def test_kubectl_plugin_runs_explain(tmp_path: Path) -> None:
    async with FakeKubeAPIServer() as api:
        await _cluster(api)
        env = {**os.environ, "KUBECONFIG": str(api.write_kubeconfig(tmp_path / "kubeconfig"))}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from pyhami.cli import kubectl_plugin; kubectl_plugin()",
            "explain", "kube-system/huge", "-o", "json", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        assert '"pod": "kube-system/huge"' in out.decode()
        assert '"node": "gpu-1"' in out.decode()


def test_kubectl_plugin_names_itself() -> None:
    result = CliRunner().invoke(app, ["explain", "-h"], prog_name="kubectl pyhami")
    assert result.stdout.startswith("Usage: kubectl pyhami explain [OPTIONS]")


def test_no_cluster_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["explain", "train"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no cluster to talk to (")
    assert result.stderr.count("\n") == 1
    result = CliRunner().invoke(app, ["explain", "train", "--kubeconfig", "/nope"])
    assert result.exit_code == 2 and result.stderr == (
        "error: kubeconfig /nope: cannot read: No such file or directory: check --kubeconfig or "
        "KUBECONFIG\n")
