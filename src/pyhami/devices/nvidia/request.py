"""One container's NVIDIA request, as HAMi's `GenerateResourceRequests` computes it.

With one deliberate difference: every GPU resource value is checked
first (`check_resource_values`), and a value nobody can honour is an error naming the
container, the resource, the value and the valid range. HAMi instead drops the whole request
for a memory value that is not an integer MiB count (`16Gi`) or overflows int32, clamps a
percentage, and lets cores wrap through int32 (`4294967246` became -50). The webhook refuses
such pods at admission and `/filter` refuses pods the webhook never saw, both through this
check. Kept from HAMi: a percentage of 0 means "not given".
"""

from dataclasses import dataclass
from fractions import Fraction

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.quantity import QuantityError, parse_quantity
from pyhami.devices.vendor import PERCENT_UNSET, ContainerSpecError
from pyhami.model import ContainerDeviceRequest, ContainerView
from pyhami.protocol import NVIDIA_VENDOR
from pyhami.protocol.arithmetic import INT32_MAX

MIB = 2**20


@dataclass(frozen=True, slots=True)
class ValueRange:
    """The integers a GPU resource may hold, and what one unit is."""

    low: int
    high: int
    unit: str

    def describe(self) -> str:
        return f"an integer from {self.low} to {self.high} ({self.unit})"


def value_ranges(config: NvidiaConfig) -> dict[str, ValueRange]:
    """Every NVIDIA resource name pyhami reads, with the values it can honour.

    Memory is booked as int32 MiB after the memory factor; cores and the memory percentage
    are percent of one card; the priority is libvgpu's task priority (0 high, 1 low).
    """
    factor = max(config.memory_factor, 1)
    memory_unit = "MiB per GPU" if factor == 1 else f"units of {factor} MiB per GPU"
    ranges = {
        config.resource_count_name: ValueRange(0, INT32_MAX, "GPUs"),
        config.resource_memory_name: ValueRange(0, INT32_MAX // factor, memory_unit),
        config.resource_memory_percentage_name: ValueRange(0, 100, "percent of each GPU's memory"),
        config.resource_core_name: ValueRange(0, 100, "percent of each GPU's cores"),
        config.resource_priority_name: ValueRange(0, 1, "0 high, 1 low"),
    }
    return {name: bounds for name, bounds in ranges.items() if name}


def _unit_hint(text: object, exact: Fraction) -> str:
    """For a memory value written with a unit: the MiB count it probably meant."""
    if isinstance(text, str) and not text.lstrip("+-").isdigit() and exact % MIB == 0:
        return f"; write {text} as {exact // MIB} (a plain number of MiB, no unit)"
    return ""


def check_resource_values(container: ContainerView, config: NvidiaConfig) -> None:
    """ContainerSpecError for the first GPU resource value that is unreadable or out of range.

    The message names the container, the resource, the value as written and the valid range.
    """
    ranges = value_ranges(config)
    for section, values in container.sections():
        for name, text in values.items():
            bounds = ranges.get(name)
            if bounds is None:
                continue
            where = f"container {container.label}: resources.{section}[{name}] {text!r}"
            try:
                exact = parse_quantity(text)
            except QuantityError as err:
                raise ContainerSpecError(
                    f"{where} is not a number; it must be {bounds.describe()}"
                ) from err
            if exact.denominator != 1 or not bounds.low <= exact <= bounds.high:
                hint = _unit_hint(text, exact) if name == config.resource_memory_name else ""
                raise ContainerSpecError(
                    f"{where} is out of range: it must be {bounds.describe()}{hint}"
                )


def _quantity(container: ContainerView, name: str) -> int | None:
    """`limits[name]`, else `requests[name]` (HAMi's order), on a checked container."""
    text = container.quantity(name)
    return None if text is None else int(parse_quantity(text))


def container_request(
    container: ContainerView, config: NvidiaConfig
) -> ContainerDeviceRequest | None:
    """The NVIDIA request of one container, or None when it asks for no NVIDIA GPU.

    ContainerSpecError when a GPU resource value is unreadable or out of range.
    """
    check_resource_values(container, config)
    nums = _quantity(container, config.resource_count_name)
    if not nums:
        return None
    memnum = (_quantity(container, config.resource_memory_name) or 0) * max(config.memory_factor, 1)
    percentage = _quantity(container, config.resource_memory_percentage_name)
    mempnum = percentage if percentage else PERCENT_UNSET
    if mempnum == PERCENT_UNSET and memnum == 0:
        if config.default_memory != 0:
            memnum = config.default_memory
        else:
            mempnum = 100
    cores = _quantity(container, config.resource_core_name)
    return ContainerDeviceRequest(
        nums=nums,
        type=NVIDIA_VENDOR,
        memreq=memnum,
        mem_percentage_req=mempnum,
        coresreq=config.default_cores if cores is None else cores,
    )
