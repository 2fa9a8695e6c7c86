"""The API resources pyhami talks to: where each lives, so no call spells a path by hand."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The REST path; a namespaced resource without a namespace means all namespaces."""
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        elif not self.namespaced and namespace:
            raise ValueError(f"{self.plural} are cluster-scoped; got namespace {namespace!r}")
        path = f"{base}/{self.plural}"
        if name is not None:
            if not name:
                raise ValueError(f"an empty {self.kind} name")
            path += f"/{quote(name, safe='')}"
        elif subresource:
            raise ValueError("a subresource needs an object name")
        if subresource:
            path += f"/{subresource}"
        return path


PODS = Resource("", "v1", "pods", "Pod", True)
NODES = Resource("", "v1", "nodes", "Node", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
EVENTS = Resource("", "v1", "events", "Event", True)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
POD_DISRUPTION_BUDGETS = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
# Dynamic Resource Allocation
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
