"""The cluster as `explain` and `top` read it through a kubeconfig, instead of from a dump."""

from collections.abc import Mapping
from typing import Any

from pyhami.kube import KubeClient
from pyhami.kube.resources import NODES, PODS, RESOURCE_QUOTAS, Resource

LIVE_SOURCE = "the cluster"
_READ: tuple[Resource, ...] = (NODES, PODS, RESOURCE_QUOTAS)


async def read_cluster_objects(
    kubeconfig: str | None, *, timeout_s: float = 30.0
) -> list[tuple[str, Mapping[str, Any]]]:
    """Every Node, Pod and ResourceQuota, as (source, object) pairs with their kind set
    (the API's lists leave it out of their items)."""
    async with await KubeClient.from_kubeconfig(kubeconfig, timeout_s=timeout_s) as client:
        objects: list[tuple[str, Mapping[str, Any]]] = []
        for resource in _READ:
            listed = await client.list(resource)
            objects.extend((LIVE_SOURCE, {**item, "kind": resource.kind}) for item in listed.items)
    return objects
