"""A pod's usage per card from its per-container entries (protocol.md §4.8, scheduler.md §6.2).

A pod's containers run in phases. Classic init containers run one after another, each beside
the native sidecars (init containers with `restartPolicy: Always`) started before it; then
every sidecar runs beside every app container for the rest of the pod's life. A card's usage is
the largest of its phases' sums, per dimension. Without sidecars this is HAMi's
`CollapseInitContainerUsage`: the init containers' peak against the app containers' sum.
"""

from collections.abc import Collection, Sequence

from pyhami.model import ContainerDevice, ContainerDevices


def container_phases(
    count: int, init_count: int, sidecars: Collection[int] = ()
) -> list[tuple[int, ...]]:
    """The groups of container positions (init first) that run at the same time.

    One group per classic init container, with the sidecars before it; then the lasting group:
    every sidecar and every app container.
    """
    phases: list[tuple[int, ...]] = []
    started: list[int] = []
    for position in range(min(init_count, count)):
        if position in sidecars:
            started.append(position)
        else:
            phases.append((*started, position))
    phases.append((*started, *range(init_count, count)))
    return phases


def lasting_positions(
    count: int, init_count: int, sidecars: Collection[int] = ()
) -> tuple[int, ...]:
    """The containers that run for the pod's whole life: the sidecars and the app containers."""
    return container_phases(count, init_count, sidecars)[-1]


def collapse_init_usage(
    containers: Sequence[ContainerDevices],
    init_count: int,
    vendor: str,
    sidecars: Collection[int] = (),
) -> ContainerDevices:
    """One entry per card, sorted by UUID, holding the card's peak over the pod's phases.

    `slots` is the most containers sharing the card in one phase (at least 1).
    """
    return _peak(containers, container_phases(len(containers), init_count, sidecars), vendor)


def app_only_usage(
    containers: Sequence[ContainerDevices],
    init_count: int,
    vendor: str,
    sidecars: Collection[int] = (),
) -> ContainerDevices:
    """HAMi `AppContainersOnlyDeviceUsage`: the usage left once every classic init container
    succeeded (the sidecars keep running beside the app containers)."""
    lasting = lasting_positions(len(containers), init_count, sidecars)
    return _peak(containers, [lasting], vendor)


def _peak(
    containers: Sequence[ContainerDevices], phases: Sequence[tuple[int, ...]], vendor: str
) -> ContainerDevices:
    peak: dict[str, tuple[int, int, int]] = {}
    for phase in phases:
        sums: dict[str, tuple[int, int, int]] = {}
        for position in phase:
            for device in containers[position]:
                mem, cores, slots = sums.get(device.uuid, (0, 0, 0))
                sums[device.uuid] = (mem + device.usedmem, cores + device.usedcores, slots + 1)
        for uuid, (mem, cores, slots) in sums.items():
            top_mem, top_cores, top_slots = peak.get(uuid, (0, 0, 1))
            peak[uuid] = (max(top_mem, mem), max(top_cores, cores), max(top_slots, slots))
    return tuple(
        ContainerDevice(uuid=uuid, type=vendor, usedmem=mem, usedcores=cores, slots=slots)
        for uuid, (mem, cores, slots) in sorted(peak.items())
    )
