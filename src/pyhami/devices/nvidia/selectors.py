"""What a pod's annotations say about which NVIDIA cards it may use.

Read once per pod (the k8s "cycle state" idea) with the protocol's readers, then consulted
per card in Fit.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyhami.protocol import (
    KEY_NVIDIA_NOUSE_GPUTYPE,
    KEY_NVIDIA_NOUSE_GPUUUID,
    KEY_NVIDIA_NUMA_BIND,
    KEY_NVIDIA_USE_GPUTYPE,
    KEY_NVIDIA_USE_GPUUUID,
    KEY_NVIDIA_VGPU_MODE,
    TypeSelector,
    UuidSelector,
    parse_numa_bind,
    parse_type_selector,
    parse_uuid_selector,
    vgpu_mode_accepts,
)


@dataclass(frozen=True, slots=True)
class CardSelectors:
    """The per-card filters of one pod: type and UUID allow/deny lists, mode, NUMA binding."""

    types: TypeSelector = field(default_factory=TypeSelector)
    uuids: UuidSelector = field(default_factory=UuidSelector)
    vgpu_mode: str | None = None
    numa_bind: bool = False

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> "CardSelectors":
        return cls(
            types=parse_type_selector(
                annotations.get(KEY_NVIDIA_USE_GPUTYPE), annotations.get(KEY_NVIDIA_NOUSE_GPUTYPE)
            ),
            uuids=parse_uuid_selector(
                annotations.get(KEY_NVIDIA_USE_GPUUUID), annotations.get(KEY_NVIDIA_NOUSE_GPUUUID)
            ),
            vgpu_mode=annotations.get(KEY_NVIDIA_VGPU_MODE),
            numa_bind=parse_numa_bind(annotations.get(KEY_NVIDIA_NUMA_BIND)),
        )

    def type_ok(self, card_type: str, card_mode: str) -> bool:
        """HAMi `checkType`: model allow/deny substrings (case-insensitive) and the mode test."""
        return self.types.accepts(card_type) and vgpu_mode_accepts(self.vgpu_mode, card_mode)

    def uuid_ok(self, uuid: str) -> bool:
        """HAMi `CheckUUID`: exact, case-sensitive membership."""
        return self.uuids.accepts(uuid)

    @property
    def filters_types(self) -> bool:
        types = self.types
        return not (types.use is None and types.nouse is None and self.vgpu_mode is None)

    @property
    def filters_uuids(self) -> bool:
        return self.uuids.use is not None or self.uuids.nouse is not None
