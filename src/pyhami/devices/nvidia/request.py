"""One container's NVIDIA request, exactly as HAMi's `GenerateResourceRequests` computes it.

nvidia-fit-score.md §4. Quirks kept on purpose because they decide where pods go: a memory
value that is not an integer MiB count (`16Gi`, `0.5`) or overflows int32 drops the whole
request; percentages are clamped to 100 and 0 means "not given"; cores are not range-checked.
"""

from collections.abc import Mapping
from typing import Any

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.quantity import QuantityError, as_int64, parse_quantity
from pyhami.model import ContainerDeviceRequest
from pyhami.protocol import NVIDIA_VENDOR

INT32_MAX = 2**31 - 1
PERCENT_UNSET = 101  # HAMi's sentinel: no memory percentage was given


class ContainerSpecError(ValueError):
    """A container's resources cannot be read; the message names the container and the key."""


def _int32(value: int) -> int:
    """Go's `int32(x)` conversion: keep the low 32 bits, signed."""
    return (value + 2**31) % 2**32 - 2**31


def lookup_quantity(container: Mapping[str, Any], name: str) -> int | None:
    """`limits[name]`, else `requests[name]`, as an exact int64; None when absent or fractional.

    HAMi looks in limits first and falls back to requests (device.go:520-600).
    """
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ContainerSpecError(f"container {_name(container)}: resources must be a mapping")
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise ContainerSpecError(
                f"container {_name(container)}: resources.{section} must be a mapping"
            )
        if name in values:
            try:
                return as_int64(parse_quantity(values[name]))
            except QuantityError as err:
                raise ContainerSpecError(
                    f"container {_name(container)}: resources.{section}[{name}]: {err}"
                ) from err
    return None


def _name(container: Mapping[str, Any]) -> str:
    return repr(container.get("name", "<unnamed>"))


def container_request(
    container: Mapping[str, Any], config: NvidiaConfig
) -> ContainerDeviceRequest | None:
    """The NVIDIA request of one container, or None when it asks for no NVIDIA GPU."""
    nums = lookup_quantity(container, config.resource_count_name)
    if nums is None:
        return None
    memnum = 0
    memory = lookup_quantity(container, config.resource_memory_name)
    if _present(container, config.resource_memory_name):
        factor = max(config.memory_factor, 1)
        if memory is None or memory < 0 or memory > INT32_MAX // factor:
            return None
        memnum = memory * factor
    mempnum = PERCENT_UNSET
    percentage = lookup_quantity(container, config.resource_memory_percentage_name)
    if percentage is not None:
        percentage = min(percentage, 100)
        if percentage > 0:
            mempnum = percentage
    if mempnum == PERCENT_UNSET and memnum == 0:
        if config.default_memory != 0:
            memnum = config.default_memory
        else:
            mempnum = 100
    corenum = config.default_cores
    cores = lookup_quantity(container, config.resource_core_name)
    if cores is not None:
        corenum = _int32(cores)
    request = ContainerDeviceRequest(
        nums=_int32(nums),
        type=NVIDIA_VENDOR,
        memreq=_int32(memnum),
        mem_percentage_req=mempnum,
        coresreq=corenum,
    )
    return request if request.nums > 0 else None


def _present(container: Mapping[str, Any], name: str) -> bool:
    resources = container.get("resources") or {}
    return any(name in (resources.get(section) or {}) for section in ("limits", "requests"))
