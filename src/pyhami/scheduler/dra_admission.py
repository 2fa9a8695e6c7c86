"""The webhook's DRA translation: a HAMi-style GPU pod headed to DRA nodes asks for a share of
a GPU through a ResourceClaimTemplate instead of HAMi's extended resources.

Which pods: with `dra_mode` "all" (every GPU node of the cluster runs the DRA driver) every
pod the webhook takes; with "selected" (a mixed cluster) a pod whose `nodeSelector` names the
DRA node label (`gpu.pyhami.io/mode: dra`); with "off" none.

What changes, per container asking for GPUs (`nvidia.com/gpu`, `gpumem`, `gpumem-percentage`,
`gpucores`): those resources leave its limits and requests, and it uses a pod claim `gpu-<n>`
made from a content-named ResourceClaimTemplate asking for `count` devices of class
`gpu.pyhami.io` with `memory` (gpumem MiB in bytes) and `cores` (gpucores percent) as capacity
requests; memory not asked is the whole card's, cores not asked are none (no SM limit) for a
memory share and the whole card otherwise, as in HAMi. A gpumem-percentage below 100 (and no
gpumem, which wins as in HAMi) becomes one alternative per card memory size known from the
driver's ResourceSlices, each taking that percentage of such a card with HAMi's rounding; with
no size known yet the pod is refused. Whole-GPU containers become claims too, not the
DeviceClass's extended resource: kube-scheduler refuses every node to a pod one of whose
extended resources is backed by DRA while another (`gpumem`) is neither offered by the node nor
backed by DRA, so in a mixed cluster the class must not map `nvidia.com/gpu`, or HAMi-style pods
would fit nowhere.

HAMi's card annotations carry over: `nvidia.com/use-gputype` / `nouse-gputype` and
`use-gpuuuid` / `nouse-gpuuuid` become CEL selectors on the card's attributes, and
`nvidia.com/numa-bind` keeps each container's cards on one NUMA node (a `matchAttribute`
constraint), as does `gpu.pyhami.io/same-topology: numa`; `gpu.pyhami.io/same-topology: nvlink`
keeps them on one NVLink domain.

The pod keeps its scheduler: kube-scheduler allocates claims itself.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.dra_claims import (
    MAX_ALTERNATIVES,
    MIB,
    NODE_MODE_DRA,
    NODE_MODE_LABEL,
    TOPOLOGY_ATTRIBUTES,
    GpuShare,
    card_selectors,
)
from pyhami.devices.nvidia.selectors import pod_card_selectors
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil
from pyhami.devices.vendor import resolve_memory
from pyhami.kube.admission_review import ContainerChanges
from pyhami.model import ContainerDeviceRequest, ContainerView, PodView
from pyhami.protocol import NVIDIA_VENDOR

DraMode = Literal["off", "selected", "all"]
DRA_MODES: tuple[DraMode, ...] = ("off", "selected", "all")
TOPOLOGY_ANNOTATION = "gpu.pyhami.io/same-topology"


class DraTranslationError(ValueError):
    """The pod asks for something that has no DRA form; the message says what."""


def heads_to_dra(node_selector: Mapping[str, str], mode: DraMode) -> bool:
    """Whether a pod with this `nodeSelector` asks for DRA claims."""
    return mode == "all" or (
        mode == "selected" and node_selector.get(NODE_MODE_LABEL) == NODE_MODE_DRA
    )


def _whole_number(container: ContainerView, name: str) -> int | None:
    value = container.quantity(name) if name else None
    if value is None:
        return None
    try:
        return value_ceil(parse_quantity(value))
    except QuantityError as err:
        raise DraTranslationError(f"container {container.name!r}: {name}: {err}") from err


@dataclass(frozen=True, slots=True)
class PodCardRules:
    """What a pod's annotations ask of every card of its claims."""

    same: frozenset[str] = frozenset()  # topologies: "numa", "nvlink"
    selectors: tuple[str, ...] = ()  # CEL

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> PodCardRules:
        same = annotations.get(TOPOLOGY_ANNOTATION)
        if same is not None and same not in TOPOLOGY_ATTRIBUTES:
            raise DraTranslationError(
                f"annotation {TOPOLOGY_ANNOTATION}={same!r}: known values are "
                f"{', '.join(TOPOLOGY_ATTRIBUTES)}"
            )
        cards = pod_card_selectors(annotations)
        topologies = {same} if same is not None else set()
        if cards.numa_bind:
            topologies.add("numa")
        try:
            return cls(same=frozenset(topologies), selectors=card_selectors(cards))
        except ValueError as err:
            raise DraTranslationError(str(err)) from err


def memory_by_card(percentage: int, card_memories: Collection[int]) -> tuple[tuple[int, int], ...]:
    """`percentage` of each card memory size (bytes, whole MiB), smallest card first so
    kube-scheduler's choice on a node with several sizes is always the same. HAMi's rounding:
    the card's MiB times the percentage over 100, truncated."""
    request = ContainerDeviceRequest(
        nums=1, type=NVIDIA_VENDOR, memreq=0, mem_percentage_req=percentage, coresreq=0
    )
    return tuple(
        (card, resolve_memory(request, card // MIB) * MIB) for card in sorted(set(card_memories))
    )


def _percentage_share(
    name: object, percentage: int, card_memories: Collection[int], cfg: NvidiaConfig
) -> tuple[tuple[int, int], ...]:
    asked = f"container {name!r}: {cfg.resource_memory_percentage_name}={percentage}"
    if not 0 < percentage < 100:
        raise DraTranslationError(f"{asked} is not a percentage (0..100)")
    if not card_memories:
        raise DraTranslationError(
            f"{asked}: no GPU of the DRA driver is known yet (no ResourceSlice), so the "
            "percentage cannot be turned into memory; create the pod again once the driver "
            f"runs, or ask for {cfg.resource_memory_name} in MiB"
        )
    sizes = len(set(card_memories))
    if sizes > MAX_ALTERNATIVES:
        raise DraTranslationError(
            f"{asked}: the DRA GPUs have {sizes} memory sizes, more than the "
            f"{MAX_ALTERNATIVES} alternatives a claim request may have; ask for "
            f"{cfg.resource_memory_name} in MiB"
        )
    return memory_by_card(percentage, card_memories)


def container_share(
    container: ContainerView,
    cfg: NvidiaConfig,
    rules: PodCardRules,
    card_memories: Collection[int] = (),
) -> GpuShare | None:
    """The GPU share a container asks for in HAMi's resources; None when it asks for none.
    `card_memories`: the memory sizes (bytes) of the DRA driver's GPUs, for a percentage."""
    memory_mib = _whole_number(container, cfg.resource_memory_name)
    percentage = _whole_number(container, cfg.resource_memory_percentage_name)
    cores = _whole_number(container, cfg.resource_core_name)
    count = _whole_number(container, cfg.resource_count_name)
    if memory_mib is None and percentage is None and cores is None and not count:
        return None
    name = container.name
    by_card: tuple[tuple[int, int], ...] = ()
    # gpumem wins over a percentage, and 0 or 100 percent is the whole card, as in HAMi
    if memory_mib is None and percentage is not None and percentage not in (0, 100):
        by_card = _percentage_share(name, percentage, card_memories, cfg)
    try:
        return GpuShare(
            count=count or cfg.default_gpu_num,
            memory_bytes=memory_mib * MIB if memory_mib is not None else None,
            # a share that names memory but no cores has no SM limit, as in HAMi
            cores_percent=0 if cores is None and (memory_mib is not None or by_card) else cores,
            same=rules.same,
            selectors=rules.selectors,
            memory_by_card=by_card,
        )
    except ValueError as err:
        raise DraTranslationError(f"container {name!r}: {err}") from err


def translate_to_claims(
    pod: PodView, cfg: NvidiaConfig, card_memories: Collection[int] = ()
) -> tuple[ContainerChanges, ...]:
    """Each container's change (init containers first): the claim for the share it asks for
    (`container_share`), which replaces its GPU resources."""
    rules = PodCardRules.from_annotations(pod.annotations)
    shares = (container_share(view, cfg, rules, card_memories) for view in pod.all_containers)
    return tuple(ContainerChanges(claim=share) for share in shares)
