"""What a pod's annotations say about which NVIDIA cards it may use (protocol.md §3.9).

Read once per pod (the k8s "cycle state" idea), then consulted per card in Fit through the
protocol's readers, so the parsing rules live in one place.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.protocol import (
    KEY_NVIDIA_NOUSE_GPUTYPE,
    KEY_NVIDIA_NOUSE_GPUUUID,
    KEY_NVIDIA_NUMA_BIND,
    KEY_NVIDIA_USE_GPUTYPE,
    KEY_NVIDIA_USE_GPUUUID,
    KEY_NVIDIA_VGPU_MODE,
    parse_numa_bind,
    type_selected,
    uuid_selected,
    vgpu_mode_accepts,
)


@dataclass(frozen=True, slots=True)
class CardSelectors:
    """The per-card filters of one pod: type and UUID allow/deny lists, mode, NUMA binding."""

    use_types: str | None = None
    nouse_types: str | None = None
    use_uuids: str | None = None
    nouse_uuids: str | None = None
    vgpu_mode: str | None = None
    numa_bind: bool = False

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> "CardSelectors":
        return cls(
            use_types=annotations.get(KEY_NVIDIA_USE_GPUTYPE),
            nouse_types=annotations.get(KEY_NVIDIA_NOUSE_GPUTYPE),
            use_uuids=annotations.get(KEY_NVIDIA_USE_GPUUUID),
            nouse_uuids=annotations.get(KEY_NVIDIA_NOUSE_GPUUUID),
            vgpu_mode=annotations.get(KEY_NVIDIA_VGPU_MODE),
            numa_bind=parse_numa_bind(annotations.get(KEY_NVIDIA_NUMA_BIND)),
        )

    def type_ok(self, card_type: str, card_mode: str) -> bool:
        """HAMi `checkType`: model allow/deny substrings (case-insensitive) and the mode test."""
        return type_selected(self.use_types, self.nouse_types, card_type) and vgpu_mode_accepts(
            self.vgpu_mode, card_mode
        )

    def uuid_ok(self, uuid: str) -> bool:
        """HAMi `CheckUUID`: exact, case-sensitive membership."""
        return uuid_selected(self.use_uuids, self.nouse_uuids, uuid)

    @property
    def filters_types(self) -> bool:
        return not (self.use_types is None and self.nouse_types is None and self.vgpu_mode is None)

    @property
    def filters_uuids(self) -> bool:
        return self.use_uuids is not None or self.nouse_uuids is not None
