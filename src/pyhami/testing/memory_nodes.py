"""An in-memory node and its pods for the node lock (`pyhami.kube.NodeLockAPI`).

A merge patch with a stale resourceVersion fails with a 409 like the API server's; failures
can be injected one at a time. The scheduler's unit tests build their API double on it.
"""

import copy
from collections.abc import Sequence
from typing import Any

from pyhami.kube import Conflict, NotFound
from pyhami.model import PodView
from pyhami.protocol import KEY_NODE_LOCK


class MemoryNodes:
    """Node `n1` and the pods that exist (`placed`: their views, for their node name,
    annotations and phase); a stale merge patch fails like a 409."""

    def __init__(
        self,
        lock: str | None = None,
        pods: set[tuple[str, str]] | None = None,
        placed: Sequence[PodView] = (),
    ) -> None:
        annotations = {} if lock is None else {KEY_NODE_LOCK: lock}
        self.node: dict[str, Any] = {
            "metadata": {"name": "n1", "resourceVersion": "1", "annotations": annotations}
        }
        self.placed = {(pod.namespace, pod.name): pod for pod in placed}
        self.pods = set(pods or ()) | set(self.placed)
        self.patches: list[str] = []  # the resourceVersion each merge patch was sent with
        self.conflicts_left = 0
        self.fail_patch = False

    async def get_node(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.node)

    async def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        self.patches.append(meta["resourceVersion"])
        if self.fail_patch:
            raise ConnectionError("API down")
        if (
            self.conflicts_left
            or meta["resourceVersion"] != self.node["metadata"]["resourceVersion"]
        ):
            self.conflicts_left = max(0, self.conflicts_left - 1)
            raise Conflict(409, "Conflict", "the object has been modified")
        annotations = self.node["metadata"]["annotations"]
        for key, value in meta["annotations"].items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        rv = int(self.node["metadata"]["resourceVersion"]) + 1
        self.node["metadata"]["resourceVersion"] = str(rv)
        return copy.deepcopy(self.node)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.pods:
            raise NotFound(404, "NotFound", f'pods "{name}" not found')
        placed = self.placed.get((namespace, name)) or PodView(name, namespace, name)
        return {
            "metadata": {"name": name, "namespace": namespace, "annotations": placed.annotations},
            "spec": {"nodeName": placed.node_name},
            "status": {"phase": placed.phase},
        }

    @property
    def lock(self) -> str | None:
        annotations: dict[str, str] = self.node["metadata"]["annotations"]
        return annotations.get(KEY_NODE_LOCK)
