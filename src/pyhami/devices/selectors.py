"""Which of a node's cards a pod may use: type and UUID allow/deny lists, mode, NUMA binding.

Each vendor reads them from its own annotation keys (`Vendor.card_selectors`), once per pod
(the k8s "cycle state" idea); Fit consults them per card.
"""

from dataclasses import dataclass, field

from pyhami.protocol import TypeSelector, UuidSelector, vgpu_mode_accepts


@dataclass(frozen=True, slots=True)
class CardSelectors:
    """The per-card filters of one pod: type and UUID allow/deny lists, mode, NUMA binding."""

    types: TypeSelector = field(default_factory=TypeSelector)
    uuids: UuidSelector = field(default_factory=UuidSelector)
    vgpu_mode: str | None = None
    numa_bind: bool = False

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
