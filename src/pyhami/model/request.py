"""What a container asks for, per vendor (HAMi `ContainerDeviceRequest`)."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContainerDeviceRequest:
    """One container's request for one vendor: count, memory (MiB or %), cores (%)."""

    nums: int
    type: str
    memreq: int = 0
    mem_percentage_req: int = 101  # HAMi's "not set" marker: 101 means no percentage given
    coresreq: int = 0
