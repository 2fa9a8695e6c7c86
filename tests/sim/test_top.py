"""`pyhami top nodes|pods|cards` against the embedded demo cluster's scheduler and monitors."""

import asyncio
import json
from collections.abc import Sequence

import aiohttp
import pytest
import yaml
from typer.testing import CliRunner, Result

from pyhami.cli import app
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.pods import parse_pods
from pyhami.sim.demo.run import submit_all
from pyhami.sim.demo.settings import DemoSettings
from pyhami.sim.top import parse_metrics, pod_rows

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: small, namespace: default}
spec:
  containers:
  - name: app
    image: cuda-app
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 3000, nvidia.com/gpucores: 30}}
---
apiVersion: v1
kind: Pod
metadata: {name: pair, namespace: default}
spec:
  containers:
  - name: app
    image: cuda-app
    resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 1000}}
"""


async def _monitor_reports(url: str, pod: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            async with http.get(url) as response:
                if f'pod="{pod}"' in await response.text():
                    return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never reported {pod}")


async def _top(*args: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, app, ["top", *args])


async def test_top_on_the_demo_cluster() -> None:
    async with DemoCluster(DemoSettings(nodes=1, gpus=2)) as cluster:
        await submit_all(cluster, parse_pods(PODS, "pods"))
        monitor = cluster.nodes[0].metrics_url
        await _monitor_reports(monitor, "pair")
        urls = ("--scheduler", cluster.scheduler_metrics_url, "--monitor", monitor)
        cards = await _top("cards", *urls, "-o", "json")
        pods = await _top("pods", *urls, "-o", "yaml")
        nodes = await _top("nodes", *urls)
        wide = await _top("pods", *urls, "-o", "wide", "-n", "default")
        watched = await _top("nodes", *urls, "--watch", "--interval", "0.1", "--times", "2")
        without_monitor = await _top("pods", "--scheduler", cluster.scheduler_metrics_url)
    for result in (cards, pods, nodes, wide, watched, without_monitor):
        assert result.exit_code == 0, result.output
    card_list = json.loads(cards.stdout)["cards"]
    assert [(c["node"], c["index"], c["memory_total_mib"]) for c in card_list] == [
        ("gpu-node-1", "0", 81920), ("gpu-node-1", "1", 81920)]
    assert sorted(c["memory_allocated_mib"] for c in card_list) == [1000, 4000]
    assert sorted(c["tasks"] for c in card_list) == [1, 2]
    assert all(c["memory_used_mib"] == 0 for c in card_list), "the monitor reports every card"
    pod_list = yaml.safe_load(pods.stdout)["pods"]
    assert sorted((p["pod"], p["memory_allocated_mib"], p["cores_allocated"]) for p in pod_list) \
        == [("pair", 1000, 0), ("pair", 1000, 0), ("small", 3000, 30)]
    assert {p["memory_used_mib"] for p in pod_list} == {0}, "the monitor reports every pod"
    assert nodes.stdout.splitlines()[0].split() == [
        "NODE", "CARDS", "MEM-ALLOC(MiB)", "MEM-USED(MiB)", "MEM-TOTAL(MiB)", "CORES-ALLOC%",
        "CORES-USED%"]
    assert nodes.stdout.splitlines()[1].split() == ["gpu-node-1", "2", "5000", "0", "163840",
                                                    "30", "0"]
    assert "UUID" in wide.stdout and "gpu-node-1#" in wide.stdout
    assert watched.stdout.count("NODE ") == 2
    no_use = without_monitor.stdout.splitlines()[1].split()
    assert no_use[3:5] == ["1000", "-"], "no monitor: use unknown, not zero"


def test_an_unreachable_endpoint_is_one_line() -> None:
    result = CliRunner().invoke(app, ["top", "cards", "--scheduler", "http://127.0.0.1:9/metrics"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: http://127.0.0.1:9/metrics: cannot read: ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("text", ["# TYPE x gauge\nx{a=\"1\" 2\n"])
def test_bad_metrics_are_named(text: str) -> None:
    with pytest.raises(RuntimeError, match="http://x: not Prometheus text"):
        parse_metrics(text, "http://x")


def test_pods_filtered_by_namespace() -> None:
    samples: Sequence = [  # type: ignore[type-arg]
        ("hami_vgpu_memory_allocated_bytes",
         {"namespace": ns, "pod": "p", "device_uuid": "GPU-1", "node": "n"}, 1048576.0)
        for ns in ("a", "b")
    ]
    assert [r.namespace for r in pod_rows(samples, "b")] == ["b"]
