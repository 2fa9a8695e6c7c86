"""Dynamic Resource Allocation objects as pyhami reads them (resource.k8s.io/v1): checked once by
`pyhami.kube.dra_views`, then immutable."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyhami.model.views import ContainerView


class ClaimSpecError(ValueError):
    """The ResourceClaim cannot be read; the message names the claim and what is wrong."""


@dataclass(frozen=True, slots=True)
class DeviceResultView:
    """One entry of a claim's `status.allocation.devices.results`."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    # `consumedCapacity`: capacity name -> quantity as written
    consumed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimView:
    """One ResourceClaim: identity, its allocation's device results, the pods it is reserved for."""

    namespace: str
    name: str
    uid: str = ""
    allocated: bool = False  # status.allocation is set
    results: tuple[DeviceResultView, ...] = ()
    # (name, uid) of each pod in status.reservedFor, in the claim's order
    reserved_for: tuple[tuple[str, str], ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodClaimsView:
    """A pod as the DRA driver reads it: which of its containers use which ResourceClaims."""

    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # Every container, init containers first, with the pod-level claim names it references.
    containers: tuple[tuple[ContainerView, frozenset[str]], ...] = ()
    # Pod-level claim name -> the ResourceClaim names it stands for (`resourceClaimName`, or
    # the name generated from a template, from `status.resourceClaimStatuses`).
    claims: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def container_using(self, claim_name: str) -> ContainerView | None:
        """The first container (init containers first) that references the claim."""
        names = {name for name, claims in self.claims.items() if claim_name in claims}
        return next((c for c, used in self.containers if used & names), None)


@dataclass(frozen=True, slots=True)
class SliceView:
    """What a ResourceSlice's writer needs of the stored slice to replace it."""

    resource_version: str
    generation: int  # spec.pool.generation
