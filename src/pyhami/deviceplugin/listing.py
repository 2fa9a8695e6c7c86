"""What kubelet sees: `split` replica ids per GPU, and which replicas to prefer (pure).

kubelet only counts these ids; the real assignment comes from the scheduler's annotation.
"""

from collections import Counter
from collections.abc import Mapping, Sequence

from pyhami.deviceplugin.api import HEALTHY, UNHEALTHY, api_pb2
from pyhami.deviceplugin.inventory import Gpu


def replica_ids(uuid: str, split: int) -> list[str]:
    return [f"{uuid}-{n}" for n in range(split)]


def kubelet_devices(
    gpus: Sequence[Gpu],
    split: int | Mapping[str, int],
    healthy: dict[str, bool],
    *,
    numa_topology: bool,
) -> list[api_pb2.Device]:
    """The ListAndWatch list, GPUs in index order (HAMi's order is random).

    `split` is the replicas per GPU, or per GPU UUID (dynamic MIG: the published count).
    """
    devices: list[api_pb2.Device] = []
    for gpu in gpus:
        health = HEALTHY if healthy.get(gpu.uuid, True) else UNHEALTHY
        topology = None
        if numa_topology and gpu.numa is not None:
            topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=gpu.numa)])
        devices.extend(
            api_pb2.Device(ID=replica, health=health, topology=topology)
            for replica in replica_ids(
                gpu.uuid, split if isinstance(split, int) else split.get(gpu.uuid, 0)
            )
        )
    return devices


def physical_id(kubelet_id: str) -> str:
    """The GPU behind a kubelet id: `<uuid>-<n>` or `<uuid>::<n>` -> `<uuid>`."""
    if "::" in kubelet_id:
        return kubelet_id.split("::", 1)[0]
    head, sep, tail = kubelet_id.rpartition("-")
    # A GPU UUID has 5 dashes; a replica id adds a sixth before an integer.
    if sep and kubelet_id.count("-") == 6 and tail.isdigit():
        return head
    return kubelet_id


class NoPreferenceError(ValueError):
    """The scheduler's devices cannot be expressed with the ids kubelet offers."""


def preferred_replicas(
    available: Sequence[str], must_include: Sequence[str], desired: Sequence[str], size: int
) -> list[str]:
    """Replica ids on the GPUs the scheduler chose (`desired`, one UUID per device)."""
    if len(desired) < size:
        raise NoPreferenceError(f"scheduler assigned {len(desired)} devices, kubelet wants {size}")
    chosen = list(must_include)
    unclaimed = Counter(physical_id(replica) for replica in must_include)
    free: dict[str, list[str]] = {}
    for replica in available:
        if replica not in must_include:
            free.setdefault(physical_id(replica), []).append(replica)
    for uuid in desired[:size]:
        if unclaimed[uuid] > 0:
            unclaimed[uuid] -= 1  # a must-include replica already covers this device
        elif free.get(uuid):
            chosen.append(free[uuid].pop(0))
        else:
            raise NoPreferenceError(f"no available slice device found for annotated GPU {uuid}")
    if len(chosen) != size:
        raise NoPreferenceError(f"preferred {len(chosen)} devices, kubelet wants {size}")
    return chosen
