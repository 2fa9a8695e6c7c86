"""An in-memory node and its pods for the node lock (`pyhami.kube.NodeLockAPI`).

A lock write with a stale resourceVersion fails with a 409 like the API server's; failures
can be injected one at a time. The scheduler's unit tests build their API double on it.
"""

import dataclasses
from collections.abc import Sequence

from pyhami.kube import Conflict, NotFound
from pyhami.model import NodeView, PodView
from pyhami.protocol import KEY_NODE_LOCK


class MemoryNodes:
    """Node `n1` and the pods that exist (`placed`: their views, for their node name,
    annotations and phase); a stale lock write fails like a 409."""

    def __init__(
        self,
        lock: str | None = None,
        pods: set[tuple[str, str]] | None = None,
        placed: Sequence[PodView] = (),
    ) -> None:
        annotations = {} if lock is None else {KEY_NODE_LOCK: lock}
        self.node = NodeView("n1", annotations=annotations, resource_version="1")
        self.placed = {(pod.namespace, pod.name): pod for pod in placed}
        self.pods = set(pods or ()) | set(self.placed)
        self.patches: list[str] = []  # the resourceVersion each lock write was sent with
        self.conflicts_left = 0
        self.fail_patch = False

    async def read_node(self, name: str) -> NodeView:
        return self.node

    async def write_node_lock(self, name: str, value: str | None, resource_version: str) -> None:
        self.patches.append(resource_version)
        if self.fail_patch:
            raise ConnectionError("API down")
        if self.conflicts_left or resource_version != self.node.resource_version:
            self.conflicts_left = max(0, self.conflicts_left - 1)
            raise Conflict(409, "Conflict", "the object has been modified")
        annotations = {k: v for k, v in self.node.annotations.items() if k != KEY_NODE_LOCK}
        if value is not None:
            annotations[KEY_NODE_LOCK] = value
        version = str(int(resource_version) + 1)
        self.node = dataclasses.replace(
            self.node, annotations=annotations, resource_version=version
        )

    async def read_pod(self, namespace: str, name: str) -> PodView:
        if (namespace, name) not in self.pods:
            raise NotFound(404, "NotFound", f'pods "{name}" not found')
        return self.placed.get((namespace, name)) or PodView(name, namespace, name)

    @property
    def lock(self) -> str | None:
        return self.node.annotations.get(KEY_NODE_LOCK)
