"""Offline cluster state from `kubectl get nodes,pods -o yaml` style files.

A file holds one object, a multi-document YAML stream, or a `List`/`NodeList`/`PodList` (as
`kubectl get nodes,pods -A -o yaml` writes, or the API's own lists, whose items carry no `kind`:
they are read by the list's kind); JSON is YAML too. Pods bound to a node (`spec.nodeName` or
`hami.io/vgpu-node`) that carry a devices annotation are existing allocations; finished pods
(Succeeded, Failed) hold nothing; pods bound or running without such a record are left out (no
scheduler will decide them again); every other pod is pending, in input order. ResourceQuotas
and PodDisruptionBudgets are read too.
"""

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from pyhami.cli_habits import yaml_problem
from pyhami.devices.inventory import NodeInventory
from pyhami.devices.nvidia.inventory import (
    InventoryError,
    NoGpusRegisteredError,
    node_inventory,
)
from pyhami.engine import PodAllocation, PodSpecError, allocation_of
from pyhami.kube.views import read_pod
from pyhami.model import NodeName, PodView
from pyhami.protocol import KEY_NODE_NVIDIA_REGISTER, KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE
from pyhami.scheduler.budgets import Budget, BudgetError

# A typed list's items may omit `kind` (the API server leaves it out): they are of this kind.
_LIST_KINDS: dict[str, str | None] = {"List": None, "NodeList": "Node", "PodList": "Pod"}
_FINISHED_PHASES = ("Succeeded", "Failed")
FINISHED = "it has finished"
NO_RECORD = "without a GPU allocation record"


class InputError(ValueError):
    """Input that cannot be read; the message names the file and the object."""


@dataclass(frozen=True, slots=True)
class ClusterInput:
    nodes: dict[NodeName, NodeInventory]
    unregistered: dict[NodeName, str]  # GPU-less or unreadable nodes: why they are left out
    unreadable: frozenset[NodeName]  # those of them whose registration is there but bad
    existing: list[PodAllocation]
    pending: list[Mapping[str, Any]]
    quotas: list[tuple[str, str, Mapping[str, object]]]  # (key, namespace, spec.hard)
    # Every pod that is not pending, by NAMESPACE/NAME: why (finished, placed, running).
    not_pending: Mapping[str, str] = field(default_factory=dict)
    # The existing pods' spec.priority by ledger key (for the preemption what-if).
    priorities: Mapping[str, int] = field(default_factory=dict)
    # The existing pods themselves by ledger key, and the PodDisruptionBudgets that may cover
    # them (preemption evicts a pod a budget protects only where nothing else makes room).
    existing_pods: Mapping[str, PodView] = field(default_factory=dict)
    budgets: tuple[Budget, ...] = ()

    @property
    def finished(self) -> int:  # Succeeded or Failed: they hold nothing, are never decided
        return sum(why.startswith(FINISHED) for why in self.not_pending.values())

    @property
    def placed_without_record(self) -> int:  # bound or running without a devices annotation
        return sum(why.endswith(NO_RECORD) for why in self.not_pending.values())


def _objects(document: object, source: str) -> Iterable[Mapping[str, Any]]:
    if document is None:
        return
    if not isinstance(document, Mapping):
        raise InputError(f"{source}: expected Kubernetes objects, got {type(document).__name__}")
    list_kind = document.get("kind")
    if list_kind in _LIST_KINDS:
        items = document.get("items") or []
        if not isinstance(items, list):
            raise InputError(f"{source}: {list_kind}.items must be a list")
        item_kind = _LIST_KINDS[str(list_kind)]
        for item in items:
            kindless = item_kind is not None and isinstance(item, Mapping) and "kind" not in item
            yield from _objects({**item, "kind": item_kind} if kindless else item, source)
        return
    yield document


def read_objects(paths: Iterable[Path]) -> list[tuple[str, Mapping[str, Any]]]:
    objects: list[tuple[str, Mapping[str, Any]]] = []
    for path in paths:
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: cannot read: {err}") from err
        try:
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError as err:
            raise InputError(f"{path}: not valid YAML or JSON: {yaml_problem(err)}") from err
        for document in documents:
            objects.extend((str(path), obj) for obj in _objects(document, str(path)))
    return objects


def load_cluster(paths: Iterable[Path]) -> ClusterInput:
    return cluster_of(read_objects(paths))


def cluster_of(objects: Iterable[tuple[str, Mapping[str, Any]]]) -> ClusterInput:
    """The cluster from (source, object) pairs: files, or what the API server listed."""
    nodes: dict[NodeName, NodeInventory] = {}
    unregistered: dict[NodeName, str] = {}
    unreadable: set[NodeName] = set()
    existing: list[PodAllocation] = []
    pending: list[Mapping[str, Any]] = []
    quotas: list[tuple[str, str, Mapping[str, object]]] = []
    not_pending: dict[str, str] = {}
    priorities: dict[str, int] = {}
    existing_pods: dict[str, PodView] = {}
    budgets: list[Budget] = []
    for source, obj in objects:
        kind = obj.get("kind")
        if kind == "Node":
            name, annotations = _node(obj, source)
            if KEY_NODE_NVIDIA_REGISTER not in annotations:
                unregistered[name] = f"no {KEY_NODE_NVIDIA_REGISTER} annotation (no device plugin)"
                continue
            try:
                nodes[name] = node_inventory(annotations)
            except NoGpusRegisteredError as err:
                unregistered[name] = str(err)
            except InventoryError as err:
                unregistered[name] = f"registration unreadable: {err}"
                unreadable.add(name)
        elif kind == "Pod":
            try:
                view = read_pod(obj)  # a pod must at least be named
                bound = view.annotations.get(KEY_VGPU_NODE) or view.node_name
                ref = view.ref
                if view.finished:
                    not_pending[ref] = f"{FINISHED} ({view.phase}) and holds nothing"
                elif bound and KEY_NVIDIA_ALLOCATED in view.annotations:
                    allocation = allocation_of(_with_node(view, bound))
                    if allocation is not None:
                        existing.append(allocation)
                        priorities[allocation.key] = view.priority
                        existing_pods[allocation.key] = view
                        not_pending[ref] = f"its GPUs are allocated on node {bound}"
                elif view.node_name or view.phase == "Running":
                    # kubelet runs it; no scheduler decides it again
                    where = f"it is {view.phase or 'bound'} on node {view.node_name or '?'}"
                    not_pending[ref] = f"{where} {NO_RECORD}"
                else:
                    pending.append(obj)
            except PodSpecError as err:
                raise InputError(f"{source}: {err}") from err
        elif kind == "ResourceQuota":
            quotas.append(_quota(obj, source))
        elif kind == "PodDisruptionBudget":
            try:
                budgets.append(Budget.from_object(obj))
            except BudgetError as err:
                raise InputError(f"{source}: {err}") from err
        elif kind is None:
            raise InputError(f"{source}: an object without a kind")
    return ClusterInput(
        nodes,
        unregistered,
        frozenset(unreadable),
        existing,
        pending,
        quotas,
        not_pending,
        priorities,
        existing_pods,
        tuple(budgets),
    )


def _quota(obj: Mapping[str, Any], source: str) -> tuple[str, str, Mapping[str, object]]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    hard = spec.get("hard") or {}  # type: ignore[union-attr]
    name = metadata.get("name")  # type: ignore[union-attr]
    namespace = metadata.get("namespace") or "default"  # type: ignore[union-attr]
    if not isinstance(name, str) or not isinstance(hard, Mapping):
        raise InputError(f"{source}: a ResourceQuota needs metadata.name and a spec.hard mapping")
    return f"{namespace}/{name}", str(namespace), hard


def _node(obj: Mapping[str, Any], source: str) -> tuple[NodeName, Mapping[str, str]]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise InputError(f"{source}: a Node without metadata.name")
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise InputError(f"{source}: node {metadata['name']}: annotations must be a mapping")
    return NodeName(metadata["name"]), annotations


def _with_node(pod: PodView, node: str) -> PodView:
    """A pod bound through spec.nodeName only still counts on that node."""
    return replace(pod, annotations={KEY_VGPU_NODE: node, **pod.annotations})
