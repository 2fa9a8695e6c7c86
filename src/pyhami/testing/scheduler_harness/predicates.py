"""kube-scheduler's own checks, as far as the harness models them: node readiness,
cordons, NoSchedule/NoExecute taints, nodeSelector, extended resources against allocatable."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyhami.devices.quantity import parse_quantity
from pyhami.model import ContainerView, NodeView, PodView
from pyhami.model.views import TaintView, TolerationView

# The taint a cordoned node counts as having, for tolerations.
_CORDON = TaintView("node.kubernetes.io/unschedulable", effect="NoSchedule")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node as kube-scheduler's own filter plugins see it: its view and its extended
    resources' allocatable amounts, parsed once."""

    node: NodeView
    allocatable: Mapping[str, float]

    @classmethod
    def of(cls, node: NodeView) -> NodeFacts:
        extended = {k: quantity(v) for k, v in node.allocatable.items() if is_extended(k)}
        return cls(node, extended)

    def rejects(
        self,
        tolerations: Sequence[TolerationView],
        selector: Mapping[str, str],
        checked: Mapping[str, float],
    ) -> str:
        """The reason kube-scheduler's own plugins would reject the node, or ""."""
        node = self.node
        if not node.ready:
            return "node(s) were not ready"
        if node.unschedulable and not tolerated(_CORDON, tolerations):
            return "node(s) were unschedulable"
        for taint in node.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not tolerated(taint, tolerations):
                return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
        if any(node.labels.get(k) != v for k, v in selector.items()):
            return "node(s) didn't match Pod's node affinity/selector"
        for resource, amount in checked.items():
            if amount > self.allocatable.get(resource, 0.0):
                return f"Insufficient {resource}"
        return ""


def tolerated(taint: TaintView, tolerations: Sequence[TolerationView]) -> bool:
    for toleration in tolerations:
        if toleration.effect not in ("", taint.effect):
            continue
        if toleration.operator == "Exists":
            if not toleration.key or toleration.key == taint.key:
                return True
        elif toleration.key == taint.key and toleration.value == taint.value:
            return True
    return False


def quantity(text: object) -> float:
    """A resource quantity's value, in any form kube-apiserver stores (`500m`, `4k`, `1e3`)."""
    return float(parse_quantity(text))


def is_extended(resource: str) -> bool:
    return "/" in resource and not resource.startswith(("kubernetes.io/", "hugepages-"))


def requested(pod: PodView) -> dict[str, float]:
    """Effective request per resource: max(sum over containers, any init container)."""

    def amounts(container: ContainerView) -> dict[str, float]:
        merged = {**container.limits, **container.requests}
        return {k: quantity(v) for k, v in merged.items()}

    total: dict[str, float] = {}
    for container in pod.containers:
        for k, v in amounts(container).items():
            total[k] = total.get(k, 0.0) + v
    for container in pod.init_containers:
        for k, v in amounts(container).items():
            total[k] = max(total.get(k, 0.0), v)
    return total


def unschedulable_message(total: int, failed: Mapping[str, str]) -> str:
    """kube-scheduler's `0/N nodes are available: <count> <reason>, ...`."""
    parts = sorted(f"{n} {reason}" for reason, n in Counter(failed.values()).items())
    return (
        f"0/{total} nodes are available: {', '.join(parts)}."
        if parts
        else f"0/{total} nodes are available."
    )
