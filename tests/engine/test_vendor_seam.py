"""The engine schedules through the vendor it is given: a second, made-up vendor works too."""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import pytest

from pyhami.devices.inventory import PairScores
from pyhami.devices.reasons import CardCheck
from pyhami.devices.selectors import CardSelectors
from pyhami.devices.vendor import (
    CardState,
    ContainerSpecError,
    FitOutcome,
    FitPolicy,
    QuotaCheck,
    Vendor,
)
from pyhami.engine import EngineConfig, Ledger, Outcome, PodSpecError, decide, plan_pod
from pyhami.kube.views import read_pod
from pyhami.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerView,
    MigPlacement,
    MigProfile,
)
from pyhami.protocol import (
    KEY_NVIDIA_ALLOCATED,
    KEY_VGPU_NODE,
    Reason,
    RegisterForm,
    VendorKeys,
    decode_pod_single_device,
)

from .builders import N, card, inventory, pod, written

NPU = "example.com/npu"
NPU_KEYS = VendorKeys(
    vendor="Acme",
    register_form=RegisterForm.JSON,
    to_allocate="example.com/npu-to-allocate",
    allocated="example.com/npu-allocated",
)


@dataclass(frozen=True, slots=True)
class AcmeVendor:
    """Whole NPUs only: a card is free when nobody uses it, and card index 0 is never given."""

    name: str = "Acme"
    keys: VendorKeys = NPU_KEYS
    column_screen: bool = False

    def container_request(self, container: ContainerView) -> ContainerDeviceRequest | None:
        value = container.limits.get(NPU)
        if value is None:
            return None
        if not isinstance(value, str) or not value.isdigit():
            raise ContainerSpecError(f"container {container.label}: {NPU} {value!r}")
        return ContainerDeviceRequest(nums=int(value), type=self.name, coresreq=100)

    def card_selectors(self, annotations: Mapping[str, str]) -> CardSelectors:
        return CardSelectors()

    def fit(
        self,
        cards: Sequence[CardState],
        request: ContainerDeviceRequest,
        *,
        selectors: CardSelectors,
        policy: FitPolicy,
        cordoned: Collection[str],
        pair_scores: PairScores,
        quota_ok: QuotaCheck | None,
        trace: list[CardCheck] | None,
        container: int,
    ) -> FitOutcome:
        free = [c for c in reversed(cards) if c.used == 0 and c.index != 0]
        if len(free) < request.nums:
            counts = {Reason.CARD_TYPE_MISMATCH.value: len(cards) - len(free)}
            return FitOutcome(False, (), counts, len(cards))
        chosen = tuple(
            ContainerDevice(c.id, self.name, c.totalmem, 100, c.index) for c in free[: request.nums]
        )
        return FitOutcome(True, chosen, {}, len(cards))

    def partition(self, card: CardState, memory: int) -> tuple[MigProfile, MigPlacement] | None:
        raise AssertionError("Acme cards have no MIG mode")


ACME: Vendor = AcmeVendor()
CONFIG = EngineConfig(vendor=ACME)


def acme_ledger() -> Ledger:
    ledger = Ledger(ACME.name)
    # Only Acme's cards count on a node; the NVIDIA card beside them is not Acme's to give.
    ledger.upsert_node(
        N("mixed"),
        inventory(
            card("gpu-0", type_="NVIDIA-A100", index=1),
            card("npu-0", type_="ACME-N1", index=0),
        ),
    )
    ledger.upsert_node(
        N("acme"),
        inventory(
            card("npu-1", type_="ACME-N1", index=0),
            card("npu-2", type_="ACME-N1", index=1),
        ),
    )
    return ledger


def test_a_second_vendor_schedules_through_its_own_request_fit_and_keys() -> None:
    ledger = acme_ledger()
    the_pod = pod("p", {NPU: "1"})
    decision = decide(
        plan_pod(read_pod(the_pod), CONFIG),
        [N("mixed"), N("acme")],
        ledger,
        config=CONFIG,
        quotas=None,
        all_reasons=True,
    )
    assert decision.outcome is Outcome.SCHEDULED
    assert decision.node == "acme"
    assert decision.allocation is not None
    assert decision.allocation.containers == ((ContainerDevice("npu-2", "Acme", 8000, 100, 1),),)
    annotations = written(decision, CONFIG.vendor.keys)
    recorded = decode_pod_single_device(annotations[NPU_KEYS.allocated])
    assert [device.uuid for device in recorded[0]] == ["npu-2"]
    assert annotations[NPU_KEYS.to_allocate] == annotations[NPU_KEYS.allocated]
    assert annotations[KEY_VGPU_NODE] == "acme"
    assert KEY_NVIDIA_ALLOCATED not in annotations
    # Its Fit refused the mixed node's one Acme card (index 0); the NVIDIA card was never its.
    assert dict(decision.failed_nodes) == {"mixed": "1/1 CardTypeMismatch"}


def test_the_booked_usage_is_the_vendors() -> None:
    ledger = acme_ledger()
    first = decide(
        plan_pod(read_pod(pod("p", {NPU: "1"})), CONFIG),
        [N("acme")],
        ledger,
        config=CONFIG,
        quotas=None,
    )
    assert first.allocation is not None
    ledger.add_pod(first.allocation)
    second = decide(
        plan_pod(read_pod(pod("q", {NPU: "1"})), CONFIG),
        [N("acme")],
        ledger,
        config=CONFIG,
        quotas=None,
    )
    assert second.outcome is Outcome.UNSCHEDULABLE


def test_another_vendors_resources_are_no_request() -> None:
    decision = decide(
        plan_pod(read_pod(pod("p", {"nvidia.com/gpu": "1"})), CONFIG),
        [N("acme")],
        acme_ledger(),
        config=CONFIG,
        quotas=None,

    )
    assert decision.outcome is Outcome.NO_DEVICE_REQUEST


def test_the_vendors_request_errors_name_the_pod() -> None:
    with pytest.raises(PodSpecError) as refused:
        plan_pod(read_pod(pod("p", {NPU: "lots"})), CONFIG)
    assert str(refused.value) == "pod default/p: container 'c0': example.com/npu 'lots'"


def test_a_ledger_of_another_vendor_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ledger books 'NVIDIA' devices.*vendor is 'Acme'"):
        decide(
            plan_pod(read_pod(pod("p", {NPU: "1"})), CONFIG),
            [N("acme")],
            Ledger(),
            config=CONFIG,
            quotas=None,
        )
