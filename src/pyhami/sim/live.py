"""The cluster as `explain` and `top` read it through a kubeconfig, instead of from a dump."""

from collections.abc import Mapping
from typing import Any

from pyhami.kube import POD_DISRUPTION_BUDGETS, Forbidden, KubeClient, NotFound
from pyhami.kube.resources import NODES, PODS, RESOURCE_QUOTAS, Resource

LIVE_SOURCE = "the cluster"
_READ: tuple[Resource, ...] = (NODES, PODS, RESOURCE_QUOTAS, POD_DISRUPTION_BUDGETS)
# Read where served and allowed: without them, the preemption what-if knows no budget.
_OPTIONAL = frozenset({POD_DISRUPTION_BUDGETS})


async def read_cluster_objects(
    kubeconfig: str | None, *, timeout_s: float = 30.0
) -> list[tuple[str, Mapping[str, Any]]]:
    """Every Node, Pod, ResourceQuota and PodDisruptionBudget, as (source, object) pairs
    with their kind set (the API's lists leave it out of their items)."""
    async with await KubeClient.from_kubeconfig(kubeconfig, timeout_s=timeout_s) as client:
        objects: list[tuple[str, Mapping[str, Any]]] = []
        for resource in _READ:
            try:
                listed = await client.list(resource)
            except (Forbidden, NotFound):
                if resource not in _OPTIONAL:
                    raise
                continue
            objects.extend((LIVE_SOURCE, {**item, "kind": resource.kind}) for item in listed.items)
    return objects
