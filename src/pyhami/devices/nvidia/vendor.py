"""NVIDIA behind the vendor seam: HAMi's NVIDIA request, card filters, Fit and MIG instances."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.fit import fit as nvidia_fit
from pyhami.devices.nvidia.mig import select_candidate
from pyhami.devices.nvidia.request import container_request
from pyhami.devices.nvidia.selectors import pod_card_selectors
from pyhami.devices.selectors import CardSelectors
from pyhami.devices.vendor import CardState
from pyhami.model import ContainerDeviceRequest, ContainerView, MigPlacement, MigProfile
from pyhami.protocol import NVIDIA_VENDOR, VENDORS, VendorKeys


@dataclass(frozen=True, slots=True)
class NvidiaVendor:
    """The NVIDIA backend, configured by the `nvidia` section of the device configuration."""

    config: NvidiaConfig = field(default_factory=NvidiaConfig)

    @property
    def name(self) -> str:
        return NVIDIA_VENDOR

    @property
    def keys(self) -> VendorKeys:
        return VENDORS[NVIDIA_VENDOR]

    @property
    def column_screen(self) -> bool:
        return True  # the screen runs this Fit's checks, in its order (tests/engine/test_screen.py)

    def container_request(self, container: ContainerView) -> ContainerDeviceRequest | None:
        return container_request(container, self.config)

    def card_selectors(self, annotations: Mapping[str, str]) -> CardSelectors:
        return pod_card_selectors(annotations)

    # HAMi's NVIDIA Fit is the seam's fit, as it stands (its keyword defaults serve its tests).
    fit = staticmethod(nvidia_fit)

    def partition(self, card: CardState, memory: int) -> tuple[MigProfile, MigPlacement] | None:
        return select_candidate(card.mig_profiles, card.mig_in_use, memory)
