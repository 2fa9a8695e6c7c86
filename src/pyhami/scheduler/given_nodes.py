"""`/filter` with Nodes instead of NodeNames: the given nodes with zero usage, nothing kept.

kube-scheduler sends whole Node objects only when the extender is not cache-backed
(`nodeCacheCapable: false`); the pod is decided on those nodes alone, against live quotas.
"""

from __future__ import annotations

from pyhami.engine import Ledger, Outcome, PodSpecError, decide
from pyhami.kube import JsonObject
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeName
from pyhami.scheduler.extender import ExtenderArgs, ExtenderFilterResult
from pyhami.scheduler.state import ClusterState


def filter_given_nodes(args: ExtenderArgs, state: ClusterState) -> ExtenderFilterResult:
    """The Nodes path: the given nodes with zero usage, live quotas, nothing written."""
    ledger = Ledger()
    by_name: dict[str, JsonObject] = {}
    unregistered: dict[str, str] = {}
    for node in args.node_items:
        name = str((node.get("metadata") or {}).get("name") or "")
        by_name[name] = node
        try:
            inventory = state.inventory_of(read_node(node))
        except ValueError:  # NodeSpecError included
            inventory = None
        if inventory is None or not inventory.devices:
            unregistered[name] = "node unregistered"
        else:
            ledger.upsert_node(NodeName(name), inventory)
    try:
        pod = read_pod(args.pod or {})
    except PodSpecError as err:
        return ExtenderFilterResult.failure(str(err))
    decision = decide(
        pod,
        [NodeName(n) for n in by_name],
        ledger,
        config=state.config,
        quotas=state.quotas,
        explain=True,
    )
    if decision.outcome is Outcome.NO_DEVICE_REQUEST:
        return ExtenderFilterResult(nodes=args.nodes)
    if decision.outcome is Outcome.ERROR:
        return ExtenderFilterResult.failure(decision.error or "filter failed")
    failed = {**{str(n): reason for n, reason in decision.failed_nodes.items()}, **unregistered}
    if decision.node is None:
        return ExtenderFilterResult(failed_nodes=failed)
    chosen = by_name[str(decision.node)]
    return ExtenderFilterResult(
        nodes={"apiVersion": "v1", "kind": "NodeList", "items": [chosen]},
        failed_nodes=failed,
    )
