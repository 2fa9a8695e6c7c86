"""What a pod's annotations say about which NVIDIA cards it may use (protocol.md §3.9).

Read once per pod (the k8s "cycle state" idea), then consulted per card in Fit.
"""

from collections.abc import Mapping
from dataclasses import dataclass

USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"
USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NOUSE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
NUMA_BIND = "nvidia.com/numa-bind"
VGPU_MODE = "nvidia.com/vgpu-mode"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def parse_go_bool(text: str | None) -> bool:
    """True only for Go `strconv.ParseBool`'s true forms; false forms and errors mean not set."""
    return text in _TRUE


def policy_contains(policy: str, name: str) -> bool:
    """HAMi `PolicyContains`: the comma list, items trimmed, holds `name` exactly."""
    return any(item.strip() == name for item in policy.split(","))


def _items(text: str | None) -> tuple[str, ...] | None:
    """A comma list with items trimmed and empties dropped; None when absent or blank."""
    if text is None or not text.strip():
        return None
    return tuple(item.strip() for item in text.split(",") if item.strip())


@dataclass(frozen=True, slots=True)
class CardSelectors:
    """The per-card filters of one pod: type and UUID allow/deny lists, mode, NUMA binding."""

    use_types: tuple[str, ...] | None = None  # upper-cased substrings
    nouse_types: tuple[str, ...] | None = None
    use_uuids: frozenset[str] | None = None
    nouse_uuids: frozenset[str] | None = None
    vgpu_mode: str | None = None
    numa_bind: bool = False

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> "CardSelectors":
        use_types = _items(annotations.get(USE_GPU_TYPE))
        nouse_types = _items(annotations.get(NOUSE_GPU_TYPE))
        use_uuids = _items(annotations.get(USE_GPU_UUID))
        nouse_uuids = _items(annotations.get(NOUSE_GPU_UUID))
        return cls(
            use_types=None if use_types is None else tuple(t.upper() for t in use_types),
            nouse_types=None if nouse_types is None else tuple(t.upper() for t in nouse_types),
            use_uuids=None if use_uuids is None else frozenset(use_uuids),
            nouse_uuids=None if nouse_uuids is None else frozenset(nouse_uuids),
            vgpu_mode=annotations.get(VGPU_MODE),
            numa_bind=parse_go_bool(annotations.get(NUMA_BIND)),
        )

    def type_ok(self, card_type: str, card_mode: str) -> bool:
        """HAMi `checkType`: model allow/deny substrings (case-insensitive) and the mode test."""
        upper = card_type.upper()
        if self.use_types is not None and not any(t in upper for t in self.use_types):
            return False
        if self.nouse_types is not None and any(t in upper for t in self.nouse_types):
            return False
        # The annotation value must contain the card's mode; an empty mode always matches.
        return self.vgpu_mode is None or card_mode in self.vgpu_mode

    def uuid_ok(self, uuid: str) -> bool:
        """HAMi `CheckUUID`: exact, case-sensitive membership."""
        if self.use_uuids is not None and uuid not in self.use_uuids:
            return False
        return self.nouse_uuids is None or uuid not in self.nouse_uuids

    @property
    def filters_types(self) -> bool:
        return not (self.use_types is None and self.nouse_types is None and self.vgpu_mode is None)

    @property
    def filters_uuids(self) -> bool:
        return self.use_uuids is not None or self.nouse_uuids is not None
