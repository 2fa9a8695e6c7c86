"""What a pod's annotations say about which NVIDIA cards it may use (HAMi's NVIDIA keys)."""

from collections.abc import Mapping

from pyhami.devices.selectors import CardSelectors
from pyhami.protocol import (
    KEY_NVIDIA_NOUSE_GPUTYPE,
    KEY_NVIDIA_NOUSE_GPUUUID,
    KEY_NVIDIA_NUMA_BIND,
    KEY_NVIDIA_USE_GPUTYPE,
    KEY_NVIDIA_USE_GPUUUID,
    KEY_NVIDIA_VGPU_MODE,
    parse_numa_bind,
    parse_type_selector,
    parse_uuid_selector,
)


def pod_card_selectors(annotations: Mapping[str, str]) -> CardSelectors:
    """The pod's NVIDIA card filters: `nvidia.com/use-gputype` and the other selector keys."""
    return CardSelectors(
        types=parse_type_selector(
            annotations.get(KEY_NVIDIA_USE_GPUTYPE), annotations.get(KEY_NVIDIA_NOUSE_GPUTYPE)
        ),
        uuids=parse_uuid_selector(
            annotations.get(KEY_NVIDIA_USE_GPUUUID), annotations.get(KEY_NVIDIA_NOUSE_GPUUUID)
        ),
        vgpu_mode=annotations.get(KEY_NVIDIA_VGPU_MODE),
        numa_bind=parse_numa_bind(annotations.get(KEY_NVIDIA_NUMA_BIND)),
    )
