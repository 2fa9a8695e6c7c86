"""Pods, containers and nodes as pyhami reads them: checked once, then immutable.

`pyhami.kube.views` builds these from the API's JSON (the only reader of that JSON); every
layer above the model decides on them and never looks at the raw object again.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field


class PodSpecError(ValueError):
    """The pod cannot be read; the message names the pod and what is wrong."""


class NodeSpecError(ValueError):
    """The node cannot be read; the message names the node and what is wrong."""


@dataclass(frozen=True, slots=True)
class ContainerView:
    """One container: its resource quantities as written (parsed by whoever knows the resource)."""

    name: str
    limits: Mapping[str, object] = field(default_factory=dict)
    requests: Mapping[str, object] = field(default_factory=dict)
    # (name, value) of each `env` entry; value None when it comes from `valueFrom`.
    env: tuple[tuple[str, object], ...] = ()
    # A native sidecar: an init container with `restartPolicy: Always` (Kubernetes 1.28+),
    # which keeps running beside the app containers.
    sidecar: bool = False
    image: str = ""
    command: tuple[str, ...] = ()  # `command` then `args`, as the runtime executes them
    # (pod claim name, request name or "" for the whole claim) of each `resources.claims` entry
    claims: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """The name as messages quote it."""
        return repr(self.name or "<unnamed>")

    def sections(self) -> tuple[tuple[str, Mapping[str, object]], ...]:
        """(`limits`, values) then (`requests`, values): HAMi reads limits first."""
        return (("limits", self.limits), ("requests", self.requests))

    def quantity(self, resource: str) -> object | None:
        """`limits[resource]`, else `requests[resource]`, as written; None when neither has it."""
        for _, values in self.sections():
            if resource in values:
                return values[resource]
        return None

    def asks_for(self, resource: str) -> bool:
        """Some section names `resource` with a value other than empty or zero."""
        return any(
            str(values.get(resource, "0")).strip() not in ("", "0") for _, values in self.sections()
        )


@dataclass(frozen=True, slots=True)
class InitStatusView:
    """One entry of `status.initContainerStatuses`."""

    name: str
    succeeded: bool  # terminated with exit code 0


@dataclass(frozen=True, slots=True)
class TaintView:
    """One `spec.taints` entry of a node."""

    key: str
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class TolerationView:
    """One `spec.tolerations` entry of a pod."""

    key: str = ""
    operator: str = ""  # "Exists" or "Equal" ("" means Equal)
    value: str = ""
    effect: str = ""  # "" tolerates every effect


@dataclass(frozen=True, slots=True)
class ExtendedClaimView:
    """`status.extendedResourceClaimStatus`: the claim kube-scheduler made for the extended
    resources a DeviceClass backs on the pod's node."""

    claim_name: str
    # (container, resource, request name in the claim) of each request mapping
    mappings: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class PodView:
    """One pod: identity, the annotations and spec fields pyhami decides on, its containers."""

    key: str  # the UID, or namespace/name where a pod has none (offline input)
    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = ""
    node_name: str = ""
    phase: str = ""
    deleting: bool = False  # metadata.deletionTimestamp is set
    priority: int = 0  # spec.priority as the Priority admission plugin set it
    preemption_policy: str = ""  # spec.preemptionPolicy ("Never": the pod never preempts)
    termination_grace_s: int | None = None  # spec.terminationGracePeriodSeconds
    nominated_node_name: str = ""  # status.nominatedNodeName
    init_containers: tuple[ContainerView, ...] = ()
    containers: tuple[ContainerView, ...] = ()
    init_statuses: tuple[InitStatusView, ...] = ()
    resource_version: str = ""
    # pod claim name -> its ResourceClaim's name (`spec.resourceClaims`, then the names
    # `status.resourceClaimStatuses` gives the claims made from templates)
    resource_claims: Mapping[str, str] = field(default_factory=dict)
    extended_claim: ExtendedClaimView | None = None
    tolerations: tuple[TolerationView, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        """namespace/name, as messages and the API name the pod."""
        return f"{self.namespace}/{self.name}"

    @property
    def all_containers(self) -> tuple[ContainerView, ...]:
        """Init containers first, then the app containers (HAMi's container order)."""
        return self.init_containers + self.containers

    @property
    def sidecars(self) -> frozenset[int]:
        """The positions (init first) of the native sidecars among the init containers."""
        return frozenset(n for n, c in enumerate(self.init_containers) if c.sidecar)

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: the pod holds nothing any more."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node: name, labels, annotations and the resources it offers pods."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, object] = field(default_factory=dict)
    resource_version: str = ""
    uid: str = ""
    ready: bool = True  # no Ready condition says otherwise
    unschedulable: bool = False  # spec.unschedulable: cordoned
    taints: tuple[TaintView, ...] = ()


class BudgetError(ValueError):
    """A PodDisruptionBudget whose selector cannot be read; the text names it and what is wrong."""


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One requirement of a label selector (`matchLabels` entries are `In` one value)."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str]

    def holds(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        inside = present and labels[self.key] in self.values
        return inside if self.operator == "In" else not inside


@dataclass(frozen=True, slots=True)
class Budget:
    """One PodDisruptionBudget: whom it covers and how many of them may go now."""

    name: str  # namespace/name
    namespace: str
    requirements: tuple[SelectorRequirement, ...] | None  # None: the selector matches no pod
    allowed: int
    disrupted: frozenset[str]  # pod names the budget already counts as going

    def covers(self, pod: PodView) -> bool:
        if self.requirements is None or pod.namespace != self.namespace:
            return False
        return all(requirement.holds(pod.labels) for requirement in self.requirements)
