"""`/filter` over HTTPS answers exactly what `pyhami simulate` says for the same cluster state."""

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE, KEY_VGPU_TIME

from .builders import card as gpu
from .cluster import DevicePluginDouble, node_object, pod_object, running_cluster, wait_for


def _existing(name: str, node: str, devices: str) -> dict[str, Any]:
    pod = pod_object(name, mem=None, cores=None)
    pod["metadata"]["annotations"] = {KEY_VGPU_NODE: node, KEY_NVIDIA_ALLOCATED: devices}
    pod["spec"]["nodeName"] = node
    return pod


def _cluster_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [
        node_object("n1", [gpu("GPU-1a", 0), gpu("GPU-1b", 1)]),
        node_object("n2", [gpu("GPU-2a", 0), gpu("GPU-2b", 1, mem=16000)]),
        node_object("n3", [gpu("GPU-3a", 0, mem=4000)]),
    ]
    existing = [
        _existing("old-1", "n1", "GPU-1a,NVIDIA,2000,25:;"),
        _existing("old-2", "n2", "GPU-2b,NVIDIA,6000,75:;"),
    ]
    pending = [
        pod_object("small", mem=1000, cores=20),
        pod_object("pick-uuid", mem=1000, cores=10, **{"nvidia.com/use-gpuuuid": "GPU-3a"}),
        pod_object("two-cards", gpus=2, mem=3000, cores=30),
        pod_object("too-big", mem=20000, cores=10),
        pod_object("whole", mem=None, cores=None),
        pod_object("spread-me", mem=500, cores=5, **{"hami.io/node-scheduler-policy": "spread"}),
    ]
    return nodes, existing, pending


async def test_filter_matches_simulate_pod_after_pod(tmp_path: Path) -> None:
    nodes, existing, pending = _cluster_objects()
    state = tmp_path / "cluster.yaml"
    state.write_text(yaml.safe_dump_all([*nodes, *existing, *pending]))
    async with running_cluster(tmp_path) as cluster:
        result = CliRunner().invoke(
            app, ["simulate", "-f", str(state), "--config", str(tmp_path / "device-config.yaml")]
        )
        assert result.exit_code == 0, result.output
        simulated = {p["name"]: p for p in json.loads(result.stdout)["pods"]}
        for obj in [*nodes, *existing]:
            kind = "nodes" if obj["kind"] == "Node" else "pods"
            cluster.api.store.create(kind, obj["metadata"].get("namespace"), obj)
        process = await cluster.scheduler()
        await wait_for(lambda: len(process.state.ledger.pod_keys()) == 2, what="existing pods")
        names = [n["metadata"]["name"] for n in nodes]
        plugin = DevicePluginDouble(cluster)  # releases each node lock, as Allocate would
        plugin.start()
        for pod in pending:
            created = cluster.api.store.create("pods", "default", pod)
            answer = await cluster.post(
                process, "/filter", {"Pod": created.body, "NodeNames": names}
            )
            want = simulated[pod["metadata"]["name"]]
            assert answer["Error"] == "", answer
            if want["node"] is None:
                assert answer["NodeNames"] is None
                assert answer["FailedNodes"] == want["failedNodes"]
                continue
            assert answer["NodeNames"] == [want["node"]], pod["metadata"]["name"]
            assert (answer["FailedNodes"] or {}) == want["failedNodes"]
            uid = created.meta.uid
            bind = {"PodName": pod["metadata"]["name"], "PodNamespace": "default", "PodUID": uid}
            bound = await cluster.post(process, "/bind", {**bind, "Node": want["node"]})
            assert bound["Error"] == "", bound  # the bind writes the decision
            written = cluster.api.store.get("pods", "default", pod["metadata"]["name"]).body
            notes = {
                k: v for k, v in written["metadata"]["annotations"].items() if k != KEY_VGPU_TIME
            }
            expected = {k: v for k, v in want["annotations"].items() if k != KEY_VGPU_TIME}
            assert {k: notes.get(k) for k in expected} == expected
        await plugin.stop()
        assert simulated["too-big"]["node"] is None  # the comparison covered a failure too
        assert simulated["pick-uuid"]["node"] == "n3"
