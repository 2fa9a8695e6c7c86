"""Which GPUs this plugin serves, read once from NVML at start (HAMi fixes the set at start too)."""

import logging
from dataclasses import dataclass

from pyhami.deviceplugin.config import DeviceFilter
from pyhami.nvml import Nvml, NvmlError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Gpu:
    """A physical GPU as discovered at start: identity only; memory and health are re-read."""

    index: int
    uuid: str
    name: str
    bus_id: str
    numa: int | None


class InventoryError(RuntimeError):
    """NVML could not even list the GPUs."""


def discover(nvml: Nvml, device_filter: DeviceFilter) -> tuple[Gpu, ...]:
    """Every GPU NVML reports, in index order, minus the filtered ones.

    A GPU whose identity cannot be read is left out with a log line (HAMi crashes instead);
    the others are served.
    """
    try:
        count = nvml.device_count()
    except NvmlError as error:
        raise InventoryError(f"cannot list GPUs: {error}") from error
    gpus: list[Gpu] = []
    for index in range(count):
        try:
            gpu = Gpu(
                index=index,
                uuid=nvml.device_uuid(index),
                name=nvml.device_name(index),
                bus_id=nvml.device_bus_id(index),
                numa=nvml.device_numa_node(index),
            )
        except NvmlError as error:
            log.error("GPU %d skipped: cannot read its identity: %s", index, error)
            continue
        if device_filter.hides(gpu.uuid, gpu.index):
            log.info("GPU %d (%s) hidden by filterdevices", index, gpu.uuid)
            continue
        gpus.append(gpu)
    return tuple(gpus)
