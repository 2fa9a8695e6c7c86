"""Request paths of the Kubernetes REST API, parsed into resource, namespace, name, sub."""

from __future__ import annotations

from dataclasses import dataclass

from pyhami.testing.fake_apiserver.resources import PODS, ResourceType, find_resource


@dataclass(frozen=True, slots=True)
class Route:
    """A parsed request path."""

    resource: ResourceType
    namespace: str | None
    name: str | None
    subresource: str

    @property
    def audit_name(self) -> str:
        """`pods`, `pods/binding`: what fault hooks and request counters match on."""
        return self.resource.plural + (f"/{self.subresource}" if self.subresource else "")


def parse_path(path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = find_resource(group, version, rest[2])
        if (candidate is not None and candidate.namespaced) or rest[2:] == ["bindings"]:
            namespace, rest = rest[1], rest[2:]
    if namespace is not None and not group and rest == ["bindings"]:
        return Route(PODS, namespace, None, "binding")  # the legacy binding collection
    if not rest or len(rest) > 3:
        return None
    resource = find_resource(group, version, rest[0])
    if resource is None:
        return None
    name = rest[1] if len(rest) >= 2 else None
    subresource = rest[2] if len(rest) == 3 else ""
    return Route(resource, namespace, name, subresource)
