"""The memory sizes of the DRA driver's GPUs, for the webhook's gpumem-percentage translation,
kept per ResourceSlice as the slice informer reads them (`pyhami.kube.dra_views`)."""

from __future__ import annotations

from pyhami.model.dra import SliceView


class DraCardMemories:
    """The distinct memory sizes of every GPU the DRA driver publishes, kept by slice."""

    def __init__(self) -> None:
        self._by_slice: dict[str, frozenset[int]] = {}

    def on_slice(self, resource_slice: SliceView) -> None:
        self._by_slice[resource_slice.name] = resource_slice.sizes  # perhaps none

    def on_slice_deleted(self, resource_slice: SliceView) -> None:
        self._by_slice.pop(resource_slice.name, None)

    def sizes(self) -> frozenset[int]:
        return frozenset().union(*self._by_slice.values())
