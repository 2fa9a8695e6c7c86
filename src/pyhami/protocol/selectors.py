"""Selection and policy annotations. Reading them never fails.

All lists are comma lists whose items are trimmed with Go's `strings.TrimSpace`.

* UUID use/nouse (`CheckUUID`, `parse_uuid_selector`): exact, case-sensitive equality with
  the device id; a blank value imposes nothing.
* Type use/nouse (`CheckType`, `parse_type_selector`): items and card type upper-cased (Go
  `ToUpper`); a non-empty item matches when it is a substring of the card type (`A10`
  matches `NVIDIA A100`).
* `nvidia.com/vgpu-mode`: a device is acceptable iff the value contains its mode.
* `nvidia.com/numa-bind`: Go `ParseBool` true enforces; invalid, false or absent do not.
* `hami.io/device-cordon` (node): listed UUIDs, empties skipped.
* `hami.io/gpu-scheduler-policy`: `policy_contains` is HAMi's `PolicyContains`.
"""

from dataclasses import dataclass

from pyhami.protocol.goparse import GoNumError, parse_bool, to_upper, trim_space


def split_list(value: str | None) -> tuple[str, ...]:
    """A comma list: items trimmed, empty items dropped, order kept."""
    if value is None:
        return ()
    return tuple(item for item in (trim_space(part) for part in value.split(",")) if item)


@dataclass(frozen=True, slots=True)
class UuidSelector:
    """A pod's use/nouse UUID annotations, read once (HAMi `CheckUUID`); None = no rule."""

    use: frozenset[str] | None = None
    nouse: frozenset[str] | None = None

    def accepts(self, uuid: str) -> bool:
        if self.use is not None and uuid not in self.use:
            return False
        return self.nouse is None or uuid not in self.nouse


def parse_uuid_selector(use: str | None, nouse: str | None) -> UuidSelector:
    """Items trimmed and kept even when empty (an empty item equals an empty id, as in
    HAMi); a blank value imposes nothing."""
    return UuidSelector(use=_uuid_items(use), nouse=_uuid_items(nouse))


def _uuid_items(value: str | None) -> frozenset[str] | None:
    if value is None or not trim_space(value):
        return None
    return frozenset(trim_space(part) for part in value.split(","))


@dataclass(frozen=True, slots=True)
class TypeSelector:
    """A pod's use/nouse type annotations, read once (HAMi `CheckType`); None = no rule.

    Items are upper-cased and non-empty; a non-blank value whose items are all empty is
    a rule nothing satisfies (an empty tuple)."""

    use: tuple[str, ...] | None = None
    nouse: tuple[str, ...] | None = None

    def accepts(self, card_type: str) -> bool:
        upper = to_upper(card_type)
        if self.use is not None and not any(item in upper for item in self.use):
            return False
        return self.nouse is None or not any(item in upper for item in self.nouse)


def parse_type_selector(use: str | None, nouse: str | None) -> TypeSelector:
    return TypeSelector(use=_type_items(use), nouse=_type_items(nouse))


def _type_items(value: str | None) -> tuple[str, ...] | None:
    if value is None or not trim_space(value):
        return None
    return tuple(to_upper(item) for item in split_list(value))


def vgpu_mode_accepts(value: str | None, mode: str) -> bool:
    """`nvidia.com/vgpu-mode`: absent accepts all; else the value must contain the mode."""
    return value is None or mode in value


def parse_numa_bind(value: str | None) -> bool:
    """`nvidia.com/numa-bind`: true only for Go `ParseBool` true forms."""
    if value is None:
        return False
    try:
        return parse_bool(value)
    except GoNumError:
        return False


def parse_device_cordon(value: str | None) -> frozenset[str]:
    """`hami.io/device-cordon`: the cordoned card UUIDs."""
    return frozenset(split_list(value))


def policy_contains(policy: str | None, name: str) -> bool:
    """HAMi `PolicyContains`: the comma list, items trimmed, holds `name` exactly."""
    if policy is None:
        return False
    return any(trim_space(item) == name for item in policy.split(","))
