"""`/filter` with Nodes instead of NodeNames: the given nodes with zero usage, nothing kept.

kube-scheduler sends whole Node objects only when the extender is not cache-backed
(`nodeCacheCapable: false`); the pod is decided on those nodes alone, against live quotas.
"""

from __future__ import annotations

from pyhami.engine import Ledger, Outcome, PodSpecError, decide, plan_pod
from pyhami.kube.extender_wire import ExtenderFilterResult, GivenNodes
from pyhami.model import NodeName
from pyhami.scheduler.state import ClusterState


def filter_given_nodes(given: GivenNodes, state: ClusterState) -> ExtenderFilterResult:
    """The Nodes path: the given nodes with zero usage, live quotas, nothing written."""
    ledger = Ledger()
    by_name = {node.name: node for node in given.nodes}
    unregistered: dict[str, str] = {}
    for node in given.nodes:
        try:
            inventory = None if node.view is None else state.inventory_of(node.view)
        except ValueError:  # a registration that cannot be read
            inventory = None
        if inventory is None or not inventory.devices:
            unregistered[node.name] = "node unregistered"
        else:
            ledger.upsert_node(NodeName(node.name), inventory)
    try:
        plan = plan_pod(given.pod, state.config)
    except PodSpecError as err:
        return ExtenderFilterResult(error=str(err))
    decision = decide(
        plan,
        [NodeName(n) for n in by_name],
        ledger,
        config=state.config,
        quotas=state.quotas,
        explain=True,
    )
    if decision.outcome is Outcome.NO_DEVICE_REQUEST:
        return ExtenderFilterResult(nodes=given)
    if decision.outcome is Outcome.ERROR:
        return ExtenderFilterResult(error=decision.error or "filter failed")
    failed = {**{str(n): reason for n, reason in decision.failed_nodes.items()}, **unregistered}
    if decision.node is None:
        return ExtenderFilterResult(failed_nodes=failed)
    return ExtenderFilterResult(nodes=given.only(by_name[str(decision.node)]), failed_nodes=failed)
