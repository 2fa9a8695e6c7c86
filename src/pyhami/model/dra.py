"""Dynamic Resource Allocation objects as pyhami reads them (resource.k8s.io/v1): checked once by
`pyhami.kube.dra_views`, then immutable."""

from collections.abc import Mapping
from dataclasses import dataclass, field


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
class SliceView:
    """One ResourceSlice: what its writer needs to replace it, and the distinct memory sizes
    (bytes) of its GPUs."""

    name: str
    resource_version: str = ""
    generation: int = 0  # spec.pool.generation
    sizes: frozenset[int] = frozenset()
