"""Selection and policy annotations (protocol.md §3.9). Reading them never fails.

All lists are comma lists whose items are trimmed with Go's `strings.TrimSpace`.

* UUID use/nouse (`CheckUUID`): exact, case-sensitive equality with the device id; a blank
  value imposes nothing.
* Type use/nouse (`CheckType`): items and card type upper-cased (Go `ToUpper`); a non-empty
  item matches when it is a substring of the card type (`A10` matches `NVIDIA A100`).
* `nvidia.com/vgpu-mode`: a device is acceptable iff the value contains its mode.
* `nvidia.com/numa-bind`: Go `ParseBool` true enforces; invalid, false or absent do not.
* `hami.io/device-cordon` (node): listed UUIDs, empties skipped.
* `hami.io/gpu-scheduler-policy`: `policy_contains` is HAMi's `PolicyContains`.
"""

from pyhami.protocol.goparse import GoNumError, parse_bool, to_upper, trim_space


def split_list(value: str | None) -> tuple[str, ...]:
    """A comma list: items trimmed, empty items dropped, order kept."""
    if value is None:
        return ()
    return tuple(item for item in (trim_space(part) for part in value.split(",")) if item)


def uuid_selected(use: str | None, nouse: str | None, uuid: str) -> bool:
    """HAMi `CheckUUID` for one device id given the use and nouse annotation values."""
    if use is not None and trim_space(use) and uuid not in _items(use):
        return False
    return not (nouse is not None and trim_space(nouse) and uuid in _items(nouse))


def _items(value: str) -> tuple[str, ...]:
    # Not split_list: HAMi keeps empty items, and an empty item equals an empty id.
    return tuple(trim_space(part) for part in value.split(","))


def type_selected(use: str | None, nouse: str | None, card_type: str) -> bool:
    """HAMi `CheckType` for one card type given the use and nouse annotation values."""
    upper = to_upper(card_type)

    def matches(value: str) -> bool:
        return any(to_upper(item) in upper for item in split_list(value))

    if use is not None and trim_space(use) and not matches(use):
        return False
    return not (nouse is not None and trim_space(nouse) and matches(nouse))


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
