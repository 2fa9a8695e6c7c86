"""kube-scheduler's own checks, as far as the harness models them: node readiness,
cordons, NoSchedule/NoExecute taints, nodeSelector, extended resources against allocatable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyhami.devices.quantity import parse_quantity
from pyhami.kube import JsonObject


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node as kube-scheduler's own filter plugins see it."""

    name: str
    node: JsonObject
    ready: bool
    unschedulable: bool
    taints: tuple[Mapping[str, Any], ...]  # NoSchedule and NoExecute only
    labels: Mapping[str, str]
    allocatable: Mapping[str, float]  # extended resources only

    @classmethod
    def of(cls, node: JsonObject) -> NodeFacts:
        spec, status = node.get("spec") or {}, node.get("status") or {}
        ready = all(
            c.get("status") == "True"
            for c in status.get("conditions") or []
            if c.get("type") == "Ready"
        )
        return cls(
            name=str(node["metadata"]["name"]),
            node=node,
            ready=ready,
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(
                t
                for t in spec.get("taints") or []
                if t.get("effect") in ("NoSchedule", "NoExecute")
            ),
            labels=node["metadata"].get("labels") or {},
            allocatable={
                k: quantity(v)
                for k, v in (status.get("allocatable") or {}).items()
                if is_extended(k)
            },
        )

    def rejects(
        self,
        tolerations: Sequence[Mapping[str, Any]],
        selector: Mapping[str, str],
        checked: Mapping[str, float],
    ) -> str:
        """The reason kube-scheduler's own plugins would reject the node, or ""."""
        if not self.ready:
            return "node(s) were not ready"
        if self.unschedulable and not tolerated(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}, tolerations
        ):
            return "node(s) were unschedulable"
        for taint in self.taints:
            if not tolerated(taint, tolerations):
                return (
                    f"node(s) had untolerated taint {{{taint.get('key')}: "
                    f"{taint.get('value', '')}}}"
                )
        if any(self.labels.get(k) != v for k, v in selector.items()):
            return "node(s) didn't match Pod's node affinity/selector"
        for resource, amount in checked.items():
            if amount > self.allocatable.get(resource, 0.0):
                return f"Insufficient {resource}"
        return ""


def tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration.get("key") == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def quantity(text: Any) -> float:
    """A resource quantity's value, in any form kube-apiserver stores (`500m`, `4k`, `1e3`)."""
    return float(parse_quantity(text))


def is_extended(resource: str) -> bool:
    return "/" in resource and not resource.startswith(("kubernetes.io/", "hugepages-"))


def requested(pod: JsonObject) -> dict[str, float]:
    """Effective request per resource: max(sum over containers, any init container)."""
    spec = pod.get("spec") or {}

    def amounts(container: Mapping[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {k: quantity(v) for k, v in merged.items()}

    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for k, v in amounts(container).items():
            total[k] = total.get(k, 0.0) + v
    for container in spec.get("initContainers") or []:
        for k, v in amounts(container).items():
            total[k] = max(total.get(k, 0.0), v)
    return total


def unschedulable_message(total: int, failed: Mapping[str, str]) -> str:
    """kube-scheduler's `0/N nodes are available: <count> <reason>, ...`."""
    counts: dict[str, int] = {}
    for reason in failed.values():
        counts[reason] = counts.get(reason, 0) + 1
    parts = sorted(f"{n} {reason}" for reason, n in counts.items())
    return (
        f"0/{total} nodes are available: {', '.join(parts)}."
        if parts
        else f"0/{total} nodes are available."
    )
