"""An in-memory stand-in for the API calls /filter and /bind make, for unit tests of the flow.

Component tests use the real FakeKubeAPIServer over HTTP; this one keeps unit tests of the
filter/bind logic small and lets them inject one failure at a time.
"""

import copy
from typing import Any

from pyhami.kube import NotFound
from pyhami.testing.memory_nodes import MemoryNodes


class MemoryKube(MemoryNodes):
    def __init__(self) -> None:
        super().__init__()
        self.pod_objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_patches: list[tuple[str, str, dict[str, Any]]] = []
        self.bindings: list[tuple[str, str, dict[str, Any]]] = []
        self.events: list[dict[str, Any]] = []
        self.fail_pod_patch = False
        self.fail_binding = False
        self.pod_version = 0  # the resourceVersion each pod write answers with, as etcd counts

    async def patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail_pod_patch:
            raise ConnectionError("pods API down")
        self.pod_patches.append((namespace, name, copy.deepcopy(body)))
        self.pod_version += 1
        answer = copy.deepcopy(body)
        answer.setdefault("metadata", {})["resourceVersion"] = str(self.pod_version)
        return answer

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.pod_objects.get((namespace, name))
        if pod is None:
            raise NotFound(404, "NotFound", f'pods "{name}" not found')
        return pod

    async def bind_pod(
        self, namespace: str, name: str, node: str, *, uid: str | None = None
    ) -> None:
        if self.fail_binding:
            raise ConnectionError("binding refused")
        self.bindings.append((namespace, name, {"node": node, "uid": uid}))

    async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append(body)
