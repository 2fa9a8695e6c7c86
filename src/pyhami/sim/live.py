"""The cluster as `explain` and `top` read it through a kubeconfig, instead of from a dump."""

from pyhami.kube import POD_DISRUPTION_BUDGETS, Forbidden, KubeClient, NotFound
from pyhami.kube.manifests import ObjectView, read_object
from pyhami.kube.resources import NODES, PODS, RESOURCE_QUOTAS, Resource
from pyhami.sim.inputs import InputError

LIVE_SOURCE = "the cluster"
_READ: tuple[Resource, ...] = (NODES, PODS, RESOURCE_QUOTAS, POD_DISRUPTION_BUDGETS)
# Read where served and allowed: without them, the preemption what-if knows no budget.
_OPTIONAL = frozenset({POD_DISRUPTION_BUDGETS})


async def read_cluster_objects(
    kubeconfig: str | None, *, timeout_s: float = 30.0
) -> list[tuple[str, ObjectView]]:
    """Every Node, Pod, ResourceQuota and PodDisruptionBudget, as (source, object) pairs, each
    read by the kind of its list (the API's lists leave it out of their items)."""
    async with await KubeClient.from_kubeconfig(kubeconfig, timeout_s=timeout_s) as client:
        objects: list[tuple[str, ObjectView]] = []
        for resource in _READ:
            try:
                listed = await client.list(resource)
            except (Forbidden, NotFound):
                if resource not in _OPTIONAL:
                    raise
                continue
            try:
                objects.extend((LIVE_SOURCE, read_object(i, resource.kind)) for i in listed.items)
            except ValueError as err:  # PodSpecError, NodeSpecError, ManifestError
                raise InputError(f"{LIVE_SOURCE}: {err}") from err
    return objects
