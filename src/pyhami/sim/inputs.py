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
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from pyhami.cli_habits import yaml_problem
from pyhami.devices.inventory import NodeInventory
from pyhami.devices.nvidia.inventory import (
    InventoryError,
    NoGpusRegisteredError,
    node_inventory,
)
from pyhami.engine import PodAllocation, PodSpecError, allocation_of
from pyhami.kube.manifests import ObjectView, QuotaView, read_manifests
from pyhami.kube.views import read_budget
from pyhami.model import NodeName, NodeView, PodView
from pyhami.model.views import Budget, BudgetError
from pyhami.protocol import KEY_NODE_NVIDIA_REGISTER, KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE

FINISHED = "it has finished"
NO_RECORD = "without a GPU allocation record"


class InputError(ValueError):
    """Input that cannot be read; the message names the file and the object."""


@dataclass(frozen=True, slots=True)
class ClusterInput:
    nodes: dict[NodeName, NodeInventory] = field(default_factory=dict)
    # GPU-less or unreadable nodes: why they are left out
    unregistered: dict[NodeName, str] = field(default_factory=dict)
    # those of them whose registration is there but bad
    unreadable: set[NodeName] = field(default_factory=set)
    existing: list[PodAllocation] = field(default_factory=list)
    pending: list[PodView] = field(default_factory=list)
    quotas: list[QuotaView] = field(default_factory=list)
    # Every pod that is not pending, by NAMESPACE/NAME: why (finished, placed, running).
    not_pending: dict[str, str] = field(default_factory=dict)
    # The existing pods' spec.priority by ledger key (for the preemption what-if).
    priorities: dict[str, int] = field(default_factory=dict)
    # The existing pods themselves by ledger key, and the PodDisruptionBudgets that may cover
    # them (preemption evicts a pod a budget protects only where nothing else makes room).
    existing_pods: dict[str, PodView] = field(default_factory=dict)
    budgets: list[Budget] = field(default_factory=list)

    @property
    def finished(self) -> int:  # Succeeded or Failed: they hold nothing, are never decided
        return sum(why.startswith(FINISHED) for why in self.not_pending.values())

    @property
    def placed_without_record(self) -> int:  # bound or running without a devices annotation
        return sum(why.endswith(NO_RECORD) for why in self.not_pending.values())


def read_objects(paths: Iterable[Path]) -> list[tuple[str, ObjectView]]:
    """(file, object) for each object of the files, each read once."""
    objects: list[tuple[str, ObjectView]] = []
    for path in paths:
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: cannot read: {err}") from err
        try:
            documents = list(yaml.safe_load_all(text))
            objects.extend((str(path), obj) for d in documents for obj in read_manifests(d))
        except yaml.YAMLError as err:
            raise InputError(f"{path}: not valid YAML or JSON: {yaml_problem(err)}") from err
        except ValueError as err:  # ManifestError, PodSpecError, NodeSpecError
            raise InputError(f"{path}: {err}") from err
    return objects


def cluster_of(objects: Iterable[tuple[str, ObjectView]]) -> ClusterInput:
    """The cluster from (source, object) pairs: files, or what the API server listed."""
    cluster = ClusterInput()
    for source, obj in objects:
        if isinstance(obj, NodeView):
            name, annotations = NodeName(obj.name), obj.annotations
            if KEY_NODE_NVIDIA_REGISTER not in annotations:
                cluster.unregistered[name] = (
                    f"no {KEY_NODE_NVIDIA_REGISTER} annotation (no device plugin)"
                )
                continue
            try:
                cluster.nodes[name] = node_inventory(annotations)
            except NoGpusRegisteredError as err:
                cluster.unregistered[name] = str(err)
            except InventoryError as err:
                cluster.unregistered[name] = f"registration unreadable: {err}"
                cluster.unreadable.add(name)
        elif isinstance(obj, PodView):
            bound = obj.annotations.get(KEY_VGPU_NODE) or obj.node_name
            ref = obj.ref
            if obj.finished:
                cluster.not_pending[ref] = f"{FINISHED} ({obj.phase}) and holds nothing"
            elif bound and KEY_NVIDIA_ALLOCATED in obj.annotations:
                # a pod bound through spec.nodeName only still counts on that node
                bound_pod = replace(obj, annotations={KEY_VGPU_NODE: bound, **obj.annotations})
                try:
                    allocation = allocation_of(bound_pod)
                except PodSpecError as err:
                    raise InputError(f"{source}: {err}") from err
                if allocation is not None:
                    cluster.existing.append(allocation)
                    cluster.priorities[allocation.key] = obj.priority
                    cluster.existing_pods[allocation.key] = obj
                    cluster.not_pending[ref] = f"its GPUs are allocated on node {bound}"
            elif obj.node_name or obj.phase == "Running":
                # kubelet runs it; no scheduler decides it again
                where = f"it is {obj.phase or 'bound'} on node {obj.node_name or '?'}"
                cluster.not_pending[ref] = f"{where} {NO_RECORD}"
            else:
                cluster.pending.append(obj)
        elif isinstance(obj, QuotaView):
            cluster.quotas.append(obj)
        elif obj.kind == "PodDisruptionBudget":
            try:
                cluster.budgets.append(read_budget(obj.document))
            except BudgetError as err:
                raise InputError(f"{source}: {err}") from err
    return cluster
