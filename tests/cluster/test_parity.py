"""Keep the double honest: the demo's example pods on Kubernetes' own control plane and on the
embedded API server double with the kube-scheduler harness give the same observable outcome:
each pod's phase, node, cards, pyhami's annotations and labels on it, its containers' resources,
scheduler and status conditions as read back, the event reasons written about it (by our
scheduler and by kube-scheduler), each unschedulable pod's per-node reasons, and each node's
pyhami annotations, capacity and allocatable."""

from typing import Any

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import EVENTS, NODES, JsonObject
from pyhami.protocol import KEY_BIND_TIME, KEY_NODE_HANDSHAKE, KEY_VGPU_TIME
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.pods import load_pods
from pyhami.sim.demo.run import submit_all
from pyhami.sim.demo.settings import DemoSettings

from .conftest import assert_none_refused

PYHAMI = "hami.io/"
# compared by presence: the clock differs
TIMES = {KEY_BIND_TIME, KEY_VGPU_TIME, KEY_NODE_HANDSHAKE}
# Written once per pod by either kube-scheduler or by our scheduler on its behalf; repeated
# attempts (FailedScheduling, FilteringFailed) may differ in count, not in kind.
REASONS = {"Scheduled", "FailedScheduling", "FilteringSucceed", "FilteringFailed",
           "BindingSucceed", "BindingFailed"}  # fmt: skip


async def outcome(cluster: DemoCluster, pods: list[JsonObject]) -> dict[str, Any]:
    results = await submit_all(cluster, pods)
    events = (await cluster.client.list(EVENTS, "default")).items
    seen: dict[str, Any] = {}
    for result in results:
        pod = await cluster.client.get_pod(result.namespace, result.name)
        metadata, spec = pod["metadata"], pod["spec"]
        seen[result.name] = {
            "phase": result.phase,
            "node": result.node,
            "cards": sorted((c.container, c.uuid, c.memory_mib, c.cores) for c in result.cards),
            "annotations": _ours(metadata.get("annotations")),
            "labels": _ours(metadata.get("labels")),
            "scheduler": spec.get("schedulerName"),
            "conditions": sorted(
                (c["type"], c["status"], c.get("reason", ""))
                for c in pod.get("status", {}).get("conditions") or ()
            ),
            "resources": [
                (c["name"], c.get("resources"), sorted(e["name"] for e in c.get("env") or ()))
                for c in (*spec.get("initContainers", ()), *spec["containers"])
            ],
            "reasons": sorted(
                {
                    e["reason"]
                    for e in events
                    if e["involvedObject"]["name"] == result.name and e["reason"] in REASONS
                }
            ),
            "why": sorted((w.node, w.reason, tuple(sorted(w.counts.items()))) for w in result.why),
        }
    for node in (await cluster.client.list(NODES)).items:
        status = node.get("status") or {}
        seen[f"node/{node['metadata']['name']}"] = {
            "annotations": _ours(node["metadata"].get("annotations")),
            "capacity": status.get("capacity"),
            "allocatable": status.get("allocatable"),
        }
    return seen


def _ours(values: dict[str, str] | None) -> dict[str, str]:
    return {
        key: "(set)" if key in TIMES else value
        for key, value in (values or {}).items()
        if key.startswith(PYHAMI)
    }


async def test_the_example_pods_end_the_same_on_the_real_control_plane_and_the_double(
    kubernetes: BuiltBinaries,
) -> None:
    pods = load_pods()
    async with DemoCluster(DemoSettings()) as embedded:
        expected = await outcome(embedded, pods)
    async with DemoCluster(DemoSettings(), kubernetes=kubernetes) as real:
        observed = await outcome(real, pods)
        assert_none_refused(real)
    assert sum(1 for pod in expected.values() if pod.get("phase") == "Running") == 13
    assert expected["slice-3g-30pct"]["reasons"] == [
        "BindingSucceed",
        "FilteringSucceed",
        "Scheduled",
    ]
    assert expected["too-big-200g"]["reasons"] == ["FailedScheduling", "FilteringFailed"]
    for name in expected:
        assert observed[name] == expected[name], name
