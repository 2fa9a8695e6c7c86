"""Builders: a node or a pod in one line of intent."""

from typing import Any

from pyhami.devices.inventory import NodeInventory
from pyhami.engine import Decision, Ledger, LedgerCard, PodAllocation
from pyhami.model import ContainerDevice, DeviceInfo, MigProfile, NodeName
from pyhami.protocol import NVIDIA_VENDOR, VENDORS, VendorKeys, filter_annotations


def card(uuid: str, mem: int = 8000, *, count: int = 10, type_: str = "NVIDIA", numa: int = 0,
         mode: str = "", index: int = 0, health: bool = True,
         profiles: tuple[MigProfile, ...] = ()) -> DeviceInfo:
    return DeviceInfo(id=uuid, index=index, count=count, devmem=mem, devcore=100, type=type_,
                      numa=numa, mode=mode, mig_profiles=profiles, health=health)


def inventory(*cards: DeviceInfo, cordoned: frozenset[str] = frozenset(),
              scores: dict[str, dict[str, int]] | None = None) -> NodeInventory:
    return NodeInventory(cards, scores or {}, cordoned)


def used(uuid: str, mem: int, cores: int = 0) -> ContainerDevice:
    return ContainerDevice(uuid, "NVIDIA", mem, cores)


def pod(name: str, *containers: dict[str, str], init: tuple[dict[str, str], ...] = (),
        annotations: dict[str, str] | None = None, namespace: str = "default",
        sidecars: tuple[int, ...] = ()) -> dict[str, Any]:
    """`sidecars`: the positions in `init` that are native sidecars (restartPolicy: Always)."""
    def spec(n: int, limits: dict[str, str]) -> dict[str, Any]:
        return {"name": f"c{n}", "resources": {"limits": limits}}

    def init_spec(n: int, limits: dict[str, str]) -> dict[str, Any]:
        container = {"name": f"i{n}", "resources": {"limits": limits}}
        return {**container, "restartPolicy": "Always"} if n in sidecars else container

    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "annotations": annotations or {}},
        "spec": {
            "initContainers": [init_spec(n, c) for n, c in enumerate(init)],
            "containers": [spec(n, c) for n, c in enumerate(containers)],
        },
    }


def gpus(n: int = 1, mem: int | None = None, cores: int | None = None,
         pct: int | None = None) -> dict[str, str]:
    limits = {"nvidia.com/gpu": str(n)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    if pct is not None:
        limits["nvidia.com/gpumem-percentage"] = str(pct)
    return limits


N = NodeName


def ledger_cards(*specs: tuple[DeviceInfo, int, int, int]) -> tuple[LedgerCard, ...]:
    """Cards as the ledger holds them: (card, slots used, memory used, cores used) each."""
    ledger = Ledger()
    ledger.upsert_node(N("n"), NodeInventory(tuple(spec[0] for spec in specs)))
    for n, (info, slots, mem, cores) in enumerate(specs):
        for slot in range(slots):
            share = ContainerDevice(info.id, "NVIDIA", mem if slot == 0 else 0,
                                    cores if slot == 0 else 0)
            ledger.add_pod(PodAllocation(f"p{n}-{slot}", "default", f"p{n}-{slot}", N("n"),
                                         ((share,),)))
    node = ledger.node(N("n"))
    assert node is not None
    return node.cards


def alloc_of(key: str, node: str, *containers: tuple[ContainerDevice, ...]) -> PodAllocation:
    return PodAllocation(key, "default", key, N(node), tuple(containers))


def written(decision: Decision, keys: VendorKeys = VENDORS[NVIDIA_VENDOR],
            now: int = 1755763200) -> dict[str, str]:
    """The annotations the scheduler writes for a placed pod's decision, at `now`."""
    chosen = decision.allocation
    assert chosen is not None, f"{decision.name} was not placed: {decision.outcome}"
    return filter_annotations(chosen.node, chosen.containers, chosen.mig_allocations, keys, now)
