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
memory share and the whole card otherwise, as in HAMi. gpumem-percentage 100 is the whole card's
memory; another percentage has no DRA form (capacity is consumed in bytes, and cards differ)
and is refused. Whole-GPU containers become claims too, not the DeviceClass's extended
resource: kube-scheduler refuses every node to a pod one of whose extended resources is backed
by DRA while another (`gpumem`) is neither offered by the node nor backed by DRA, so in a mixed
cluster the class must not map `nvidia.com/gpu`, or HAMi-style pods would fit nowhere. A pod
annotated `gpu.pyhami.io/same-topology: numa|nvlink` keeps each container's cards on one NUMA
node or NVLink domain.

The pod keeps its scheduler: kube-scheduler allocates claims itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.dra_claims import (
    MIB,
    NODE_MODE_DRA,
    NODE_MODE_LABEL,
    TOPOLOGY_ATTRIBUTES,
    GpuShare,
    claim_template,
)
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil

JsonObject = dict[str, Any]
DraMode = Literal["off", "selected", "all"]
DRA_MODES: tuple[DraMode, ...] = ("off", "selected", "all")
TOPOLOGY_ANNOTATION = "gpu.pyhami.io/same-topology"


class DraTranslationError(ValueError):
    """The pod asks for something that has no DRA form; the message says what."""


def resource_value(container: Mapping[str, Any], name: str) -> object | None:
    """A container's value for a resource: its limit, else its request."""
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        values = resources.get(part) or {}
        if name and name in values:
            found: object = values[name]
            return found
    return None


def heads_to_dra(pod: Mapping[str, Any], mode: DraMode) -> bool:
    if mode == "all":
        return True
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return mode == "selected" and selector.get(NODE_MODE_LABEL) == NODE_MODE_DRA


def _whole_number(container: Mapping[str, Any], name: str) -> int | None:
    value = resource_value(container, name)
    if value is None:
        return None
    try:
        return value_ceil(parse_quantity(value))
    except QuantityError as err:
        raise DraTranslationError(f"container {container.get('name')!r}: {name}: {err}") from err


def container_share(
    container: Mapping[str, Any], cfg: NvidiaConfig, same: str | None
) -> GpuShare | None:
    """The GPU share a container asks for in HAMi's resources; None when it asks for none."""
    memory_mib = _whole_number(container, cfg.resource_memory_name)
    percentage = _whole_number(container, cfg.resource_memory_percentage_name)
    cores = _whole_number(container, cfg.resource_core_name)
    count = _whole_number(container, cfg.resource_count_name)
    if memory_mib is None and percentage is None and cores is None and not count:
        return None
    name = container.get("name")
    if percentage is not None and percentage != 100:
        raise DraTranslationError(
            f"container {name!r}: {cfg.resource_memory_percentage_name}={percentage} cannot "
            f"run on a DRA node (GPU memory is shared there in bytes): ask for "
            f"{cfg.resource_memory_name} in MiB instead"
        )
    try:
        return GpuShare(
            count=count or cfg.default_gpu_num,
            memory_bytes=memory_mib * MIB if memory_mib is not None else None,
            # a share that names memory but no cores has no SM limit, as in HAMi
            cores_percent=0 if cores is None and memory_mib is not None else cores,
            same=same,
        )
    except ValueError as err:
        raise DraTranslationError(f"container {name!r}: {err}") from err


def translate_to_claims(pod: JsonObject, namespace: str, cfg: NvidiaConfig) -> list[JsonObject]:
    """Rewrite the pod's share requests as claims (in place); the templates they name, which
    must exist before the pod is created."""
    spec = pod.setdefault("spec", {})
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    same = annotations.get(TOPOLOGY_ANNOTATION)
    if same is not None and same not in TOPOLOGY_ATTRIBUTES:
        raise DraTranslationError(
            f"annotation {TOPOLOGY_ANNOTATION}={same!r}: known values are "
            f"{', '.join(TOPOLOGY_ATTRIBUTES)}"
        )
    owned = (
        cfg.resource_count_name,
        cfg.resource_memory_name,
        cfg.resource_memory_percentage_name,
        cfg.resource_core_name,
    )
    templates: dict[str, JsonObject] = {}
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    for number, container in enumerate(containers):
        share = container_share(container, cfg, same)
        if share is None:
            continue
        template = claim_template(namespace, {"gpu": share})
        template_name = template["metadata"]["name"]
        templates[template_name] = template
        claim = f"gpu-{number}"
        resources = container.setdefault("resources", {})
        for part in ("limits", "requests"):
            values = resources.get(part)
            if isinstance(values, dict):
                for name in owned:
                    values.pop(name, None)
        resources.setdefault("claims", []).append({"name": claim})
        spec.setdefault("resourceClaims", []).append(
            {"name": claim, "resourceClaimTemplateName": template_name}
        )
    return list(templates.values())
