"""The physical GPUs as NVML reports them at scrape time.

NVML is opened and closed around each read, as HAMi does. A failing card is logged and the
others are still read; memory `NOT_SUPPORTED` (unified-memory boards) skips that card quietly.
"""

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from pyhami.nvml import MemoryInfo, Nvml, NvmlError, NvmlNotSupportedError, Utilization

log = structlog.get_logger(__name__)

NvmlOpener = Callable[[], Nvml]


@dataclass(frozen=True, slots=True)
class HostCard:
    index: int
    uuid: str
    type: str  # "NVIDIA-" + NVML name, HAMi's device_type label
    memory: MemoryInfo
    utilization: Utilization
    pids: frozenset[int] | None  # host pids holding a context on the card; None: unknown


def read_host_cards(open_nvml: NvmlOpener) -> tuple[HostCard, ...]:
    """Every card NVML can describe; an empty tuple when NVML itself is unusable."""
    try:
        nvml = open_nvml()
    except NvmlError as err:
        log.warning("NVML unavailable; host metrics skipped", error=str(err))
        return ()
    try:
        cards = []
        for index in range(nvml.device_count()):
            try:
                cards.append(_card(nvml, index))
            except NvmlNotSupportedError:
                continue
            except NvmlError as err:
                log.warning("NVML device read failed", device_index=index, error=str(err))
        return tuple(cards)
    except NvmlError as err:
        log.warning("NVML device count failed; host metrics skipped", error=str(err))
        return ()
    finally:
        nvml.close()


def _card(nvml: Nvml, index: int) -> HostCard:
    memory = nvml.device_memory(index)
    try:
        pids: frozenset[int] | None = frozenset(p.pid for p in nvml.running_processes(index))
    except NvmlError as err:  # only the pid sanity check needs them
        log.info("NVML process list failed", device_index=index, error=str(err))
        pids = None
    return HostCard(
        index=index,
        uuid=nvml.device_uuid(index),
        type=f"NVIDIA-{nvml.device_name(index)}",
        memory=memory,
        utilization=nvml.utilization(index),
        pids=pids,
    )
