"""A pod's usage per card from its per-container entries (protocol.md §4.8, scheduler.md §6.2).

Init containers run one after another, so they need only their peak; app containers run
together, so they add up. A card's usage is the larger of the two, per dimension.
"""

from collections.abc import Sequence

from pyhami.model import ContainerDevice, ContainerDevices


def collapse_init_usage(
    containers: Sequence[ContainerDevices], init_count: int, vendor: str
) -> ContainerDevices:
    """HAMi `CollapseInitContainerUsage`: one entry per card, sorted by UUID, with slots."""
    init_peak: dict[str, tuple[int, int]] = {}
    app_sum: dict[str, tuple[int, int, int]] = {}
    for position, devices in enumerate(containers):
        for device in devices:
            if position < init_count:
                mem, cores = init_peak.get(device.uuid, (0, 0))
                init_peak[device.uuid] = (max(mem, device.usedmem), max(cores, device.usedcores))
            else:
                mem, cores, slots = app_sum.get(device.uuid, (0, 0, 0))
                app_sum[device.uuid] = (mem + device.usedmem, cores + device.usedcores, slots + 1)
    collapsed = []
    for uuid in sorted(init_peak.keys() | app_sum.keys()):
        init_mem, init_cores = init_peak.get(uuid, (0, 0))
        app_mem, app_cores, app_slots = app_sum.get(uuid, (0, 0, 0))
        init_slots = 1 if uuid in init_peak else 0
        collapsed.append(
            ContainerDevice(
                uuid=uuid,
                type=vendor,
                usedmem=max(init_mem, app_mem),
                usedcores=max(init_cores, app_cores),
                slots=max(init_slots, app_slots, 1),
            )
        )
    return tuple(collapsed)


def app_only_usage(
    containers: Sequence[ContainerDevices], init_count: int, vendor: str
) -> ContainerDevices:
    """HAMi `AppContainersOnlyDeviceUsage`: the usage left once every init container succeeded."""
    return collapse_init_usage(containers[init_count:], 0, vendor)
