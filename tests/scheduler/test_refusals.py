"""What a pod author may not ask for, refused with the reason through the API server double.

* GPU resource values nobody can honour: refused by the webhook at admission, and by `/filter`
  for a pod the webhook never saw (kube-scheduler's FailedScheduling then carries the reason).
* Env that controls libvgpu in a GPU container: refused unless the namespace is allowed.
"""

from pathlib import Path
from typing import Any

import pytest

from pyhami.kube import KubeError
from pyhami.testing.scheduler_harness import Result

from .builders import card as gpu
from .cluster import SCHEDULER_NAME, node_object, pod_object, running_cluster, wait_for

WRAPPED_CORES = (
    "container 'main': resources.limits[nvidia.com/gpucores] '4294967246' is out of range: it "
    "must be an integer from 0 to 100 (percent of each GPU's cores)"
)


def with_cores(pod: dict[str, Any], cores: str) -> dict[str, Any]:
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = cores
    return pod


async def test_a_value_nobody_can_honour_is_refused_at_admission_and_at_filter(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path) as cluster:
        await cluster.add_nodes(node_object("n1", [gpu("GPU-a", 0)]))
        process = await cluster.scheduler()
        await wait_for(process.synced.is_set, what="caches synced")
        cluster.register_webhook(process)
        with pytest.raises(KubeError) as refused:
            await cluster.create_pod(with_cores(pod_object("p"), "4294967246"))
        assert refused.value.code == 403
        assert WRAPPED_CORES in str(refused.value)
        # Created behind the webhook's back (e.g. while it was down with failurePolicy Ignore).
        hidden = with_cores(pod_object("q"), "4294967246")
        hidden["spec"]["schedulerName"] = SCHEDULER_NAME
        cluster.api.store.create("pods", "default", hidden)
        async with cluster.harness(process.main_port) as harness:
            outcome = await harness.wait_for("default", "q", result=Result.FILTER_ERROR)
        assert WRAPPED_CORES in outcome.error
        assert "nodeName" not in cluster.api.store.get("pods", "default", "q").body["spec"]


def with_env(pod: dict[str, Any], *env: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["containers"][0]["env"] = list(env)
    return pod


async def test_env_that_controls_libvgpu_is_refused_unless_the_namespace_is_allowed(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path) as cluster:
        process = await cluster.scheduler(limit_control_namespaces=("gpu-lab",))
        cluster.register_webhook(process)
        attempts = [
            {"name": "CUDA_DISABLE_CONTROL", "value": "true"},
            {"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "80g"},
            {"name": "CUDA_DEVICE_SM_LIMIT", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
        ]
        for entry in attempts:
            with pytest.raises(KubeError) as refused:
                await cluster.create_pod(with_env(pod_object("p"), entry))
            assert refused.value.code == 403
            assert (
                f"container 'main': env {entry['name']} controls libvgpu (the GPU memory and "
                "core limits) and may not be set by a pod; the operator may allow it for "
                "namespace 'default'"
            ) in str(refused.value)
        # A container without GPUs, and the allowed namespace, are left alone.
        plain = with_env(pod_object("cpu"), attempts[0])
        del plain["spec"]["containers"][0]["resources"]
        assert (await cluster.create_pod(plain))["metadata"]["name"] == "cpu"
        await cluster.client.request(
            "POST", "/api/v1/namespaces", body={"metadata": {"name": "gpu-lab"}}
        )
        lab = with_env(pod_object("lab", namespace="gpu-lab"), attempts[0])
        assert (await cluster.create_pod(lab))["spec"]["schedulerName"] == SCHEDULER_NAME
