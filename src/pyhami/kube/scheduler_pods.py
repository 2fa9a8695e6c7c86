"""The pod calls the scheduler's /filter and /bind make, typed at the edge: a pod comes back
read into its PodView, a write goes as the annotations it sets (HAMi's merge patches)."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pyhami.kube.client import JsonObject, resource_version
from pyhami.kube.patches import pod_annotations_patch, remove_annotations_patch
from pyhami.kube.views import read_pod
from pyhami.model import PodView
from pyhami.protocol import LABEL_VGPU_NODE


class PodApi(Protocol):
    """`KubeClient`'s pod calls (or a test's double)."""

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...

    async def patch_pod(self, namespace: str, name: str, body: JsonObject) -> Mapping[str, Any]: ...

    async def bind_pod(
        self, namespace: str, name: str, node: str, *, uid: str | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class SchedulerPods:
    """FilterBind's pod reads and writes."""

    api: PodApi

    async def read(self, namespace: str, name: str) -> PodView:
        """The pod as the API server has it now (PodSpecError, NotFound)."""
        return read_pod(await self.api.get_pod(namespace, name))

    async def annotate(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> str:
        """HAMi's PatchPodAnnotations (the node label too); the resourceVersion it answers with."""
        patch = pod_annotations_patch(annotations)
        return resource_version(await self.api.patch_pod(namespace, name, patch))

    async def unmark(self, namespace: str, name: str, keys: Iterable[str]) -> None:
        """Remove the annotations `keys` and the node label."""
        patch = remove_annotations_patch(keys)
        patch["metadata"]["labels"] = {LABEL_VGPU_NODE: None}
        await self.api.patch_pod(namespace, name, patch)

    async def bind(self, namespace: str, name: str, node: str, uid: str) -> None:
        await self.api.bind_pod(namespace, name, node, uid=uid)
