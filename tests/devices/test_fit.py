"""HAMi's NVIDIA Fit: check order, reasons, quirks, examples."""

from collections.abc import Mapping

import pytest

from pyhami.devices.nvidia.fit import fit
from pyhami.devices.nvidia.selectors import pod_card_selectors
from pyhami.devices.reasons import CardCheck
from pyhami.devices.selectors import CardSelectors
from pyhami.devices.vendor import FitPolicy, resolve_memory
from pyhami.model import ContainerDeviceRequest, MigPlacement
from pyhami.protocol import Reason

from .cards import A100_PROFILES, ONE_G, Card, gpu

R = Reason
PLAIN = CardSelectors()
SPREAD = FitPolicy()


def ask(nums: int = 1, mem: int = 0, pct: int = 101, cores: int = 0) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "NVIDIA", mem, pct, cores)


def select(annotations: Mapping[str, str]) -> CardSelectors:
    return pod_card_selectors(annotations)


def uuids(outcome_devices: tuple) -> list[str]:  # type: ignore[type-arg]
    return [d.uuid for d in outcome_devices]


@pytest.mark.parametrize(
    ("card", "request_", "selectors", "policy", "want"),
    [
        pytest.param(
            gpu("a", health=False, used=10),
            ask(),
            PLAIN,
            SPREAD,
            R.CARD_NOT_HEALTH,
            id="health-first",
        ),
        pytest.param(
            gpu("a", type="NVIDIA-V100"),
            ask(),
            select({"nvidia.com/use-gputype": "A100"}),
            SPREAD,
            R.CARD_TYPE_MISMATCH,
            id="use-gputype",
        ),
        pytest.param(
            gpu("a", type="NVIDIA-A100"),
            ask(),
            select({"nvidia.com/nouse-gputype": "v100, a10"}),
            SPREAD,
            R.CARD_TYPE_MISMATCH,
            id="nouse-gputype-substring-any-case",
        ),
        pytest.param(
            gpu("a", mode="hami-core"),
            ask(),
            select({"nvidia.com/vgpu-mode": "mig"}),
            SPREAD,
            R.CARD_TYPE_MISMATCH,
            id="vgpu-mode",
        ),
        pytest.param(
            gpu("a"),
            ask(),
            select({"nvidia.com/use-gpuuuid": "b, c"}),
            SPREAD,
            R.CARD_UUID_MISMATCH,
            id="use-gpuuuid",
        ),
        pytest.param(
            gpu("a"),
            ask(),
            select({"nvidia.com/nouse-gpuuuid": " a "}),
            SPREAD,
            R.CARD_UUID_MISMATCH,
            id="nouse-gpuuuid-trimmed",
        ),
        pytest.param(
            gpu("a", used=10, usedmem=8000),
            ask(),
            PLAIN,
            SPREAD,
            R.CARD_TIME_SLICING_EXHAUSTED,
            id="slots-before-memory",
        ),
        pytest.param(
            gpu("a", used=1),
            ask(mem=10),
            PLAIN,
            FitPolicy(is_mutex=True),
            R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
            id="mutex-needs-idle-card",
        ),
        pytest.param(
            gpu("a", usedmem=7000),
            ask(mem=2000),
            PLAIN,
            SPREAD,
            R.CARD_INSUFFICIENT_MEMORY,
            id="memory",
        ),
        pytest.param(
            gpu("a", usedcores=90),
            ask(mem=10, cores=20),
            PLAIN,
            SPREAD,
            R.CARD_INSUFFICIENT_CORE,
            id="cores",
        ),
        pytest.param(
            gpu("a", used=1, usedcores=0),
            ask(mem=10, cores=100),
            PLAIN,
            SPREAD,
            R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
            id="whole-card-on-shared-card",
        ),
        pytest.param(
            gpu("a", used=1, usedcores=0),
            ask(mem=10, cores=300),
            PLAIN,
            SPREAD,
            R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
            id="clamped-to-whole-card",
        ),
        pytest.param(
            gpu("a", used=1, usedcores=100),
            ask(mem=10, cores=0),
            PLAIN,
            SPREAD,
            R.CARD_COMPUTE_UNITS_EXHAUSTED,
            id="zero-core-task-on-full-card",
        ),
    ],
)
def test_first_failing_check_names_the_card(
    card: Card,
    request_: ContainerDeviceRequest,
    selectors: CardSelectors,
    policy: FitPolicy,
    want: Reason,
) -> None:
    outcome = fit([card], request_, selectors=selectors, policy=policy)
    assert not outcome.ok
    assert dict(outcome.counts) == {want: 1}, "a card counts once, for its first failing check"


def test_cordoned_card_is_skipped_after_health() -> None:
    outcome = fit([gpu("a")], ask(), selectors=PLAIN, policy=SPREAD, cordoned={"a"})
    assert dict(outcome.counts) == {R.CARD_CORDONED: 1}


def test_cards_are_walked_from_the_end() -> None:
    outcome = fit(
        [gpu("a"), gpu("b"), gpu("c")], ask(nums=2, mem=10), selectors=PLAIN, policy=SPREAD
    )
    assert outcome.ok and uuids(outcome.devices) == ["c", "b"]


def test_reason_counts_over_every_card() -> None:
    cards = [
        gpu("core", usedcores=95),
        *[gpu(f"mem{i}", usedmem=7990) for i in range(2)],
        *[gpu(f"nouse{i}") for i in range(3)],
        *[gpu(f"full{i}", used=10) for i in range(4)],
    ]
    selectors = select({"nvidia.com/nouse-gpuuuid": "nouse0,nouse1,nouse2"})
    outcome = fit(cards, ask(mem=100, cores=10), selectors=selectors, policy=SPREAD)
    assert not outcome.ok and outcome.total == 10
    assert dict(outcome.counts) == {
        R.CARD_INSUFFICIENT_CORE: 1,
        R.CARD_INSUFFICIENT_MEMORY: 2,
        R.CARD_UUID_MISMATCH: 3,
        R.CARD_TIME_SLICING_EXHAUSTED: 4,
    }


def test_partial_run_is_allocated_cards_insufficient() -> None:
    """TestFit_MutexPolicy/two cards: `1/2 AllocatedCardsInsufficientRequest, 1/2 Exclusive…`."""
    outcome = fit(
        [gpu("busy", used=1), gpu("idle")],
        ask(nums=2),
        selectors=PLAIN,
        policy=FitPolicy(is_mutex=True),
    )
    assert not outcome.ok
    assert dict(outcome.counts) == {
        R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1,
        R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 1,
    }


def test_numa_switching_discards_the_run() -> None:
    """TestFit_NumaSwitching: dev-2 (numa 0) taken, then numa 1 restarts with dev-1, dev-0."""
    cards = [gpu("dev-0", numa=1), gpu("dev-1", numa=1), gpu("dev-2", numa=0)]
    outcome = fit(
        cards,
        ask(nums=2, mem=10),
        selectors=select({"nvidia.com/numa-bind": "true"}),
        policy=SPREAD,
    )
    assert outcome.ok and uuids(outcome.devices) == ["dev-1", "dev-0"]
    assert dict(outcome.counts) == {R.NUMA_NOT_FIT: 1}


def test_numa_reset_comes_before_capacity_checks() -> None:
    """A card on a new NUMA node resets the run even when it then fails on memory."""
    cards = [gpu("x", numa=0), gpu("short", numa=1, usedmem=8000), gpu("y", numa=0)]
    outcome = fit(
        cards, ask(nums=2, mem=10), selectors=select({"nvidia.com/numa-bind": "1"}), policy=SPREAD
    )
    assert not outcome.ok
    assert dict(outcome.counts) == {
        R.NUMA_NOT_FIT: 1,
        R.CARD_INSUFFICIENT_MEMORY: 1,
        R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1,
    }


def test_numa_bind_false_forms_do_not_bind() -> None:
    assert not select({"nvidia.com/numa-bind": "False"}).numa_bind
    assert not select({"nvidia.com/numa-bind": "yes"}).numa_bind
    assert select({"nvidia.com/numa-bind": "T"}).numa_bind


def test_percentage_books_a_share_of_each_card() -> None:
    cards = [gpu("small", totalmem=16000), gpu("big", totalmem=80000)]
    outcome = fit(cards, ask(nums=2, pct=25), selectors=PLAIN, policy=SPREAD)
    assert [(d.uuid, d.usedmem) for d in outcome.devices] == [("big", 20000), ("small", 4000)]


def test_absolute_memory_wins_over_percentage() -> None:
    assert resolve_memory(ask(mem=3000, pct=50), 80000) == 3000
    assert resolve_memory(ask(pct=33), 1001) == 330  # int32 product, truncated
    assert resolve_memory(ask(pct=33), -1001) == -330  # toward zero, not floored
    assert resolve_memory(ask(pct=100), 30_000_000) == -12_949_672  # the int32 product wraps


def test_core_clamp_sticks_for_the_booking() -> None:
    outcome = fit([gpu("a")], ask(mem=10, cores=250), selectors=PLAIN, policy=SPREAD)
    assert outcome.devices[0].usedcores == 100


def test_quota_is_checked_before_memory() -> None:
    seen: list[tuple[str, ...]] = []

    def quota_ok(devices: tuple) -> bool:  # type: ignore[type-arg]
        seen.append(tuple(d.uuid for d in devices))
        return False

    outcome = fit(
        [gpu("a", usedmem=8000), gpu("b")],
        ask(nums=1, mem=100),
        selectors=PLAIN,
        policy=SPREAD,
        quota_ok=quota_ok,
    )
    assert dict(outcome.counts) == {R.RESOURCE_QUOTA_NOT_FIT: 2}
    assert seen == [("b",), ("a",)]


def test_trace_records_every_visit() -> None:
    trace: list[CardCheck] = []
    fit(
        [gpu("a"), gpu("b", health=False), gpu("c")],
        ask(nums=2, mem=10),
        selectors=PLAIN,
        policy=SPREAD,
        trace=trace,
        container=1,
    )
    assert trace == [
        CardCheck("c", 0, None, 1),
        CardCheck("b", 0, R.CARD_NOT_HEALTH, 1),
        CardCheck("a", 0, None, 1),
    ]


TOPOLOGY = FitPolicy(need_topology=True)
SCORES = {
    "a": {"b": 10, "c": 100, "d": 10},
    "b": {"a": 10, "c": 10, "d": 200},
    "c": {"a": 100, "b": 10, "d": 10},
    "d": {"a": 10, "b": 200, "c": 10},
}


def test_topology_collects_every_card_then_best_pair() -> None:
    cards = [gpu("a"), gpu("b"), gpu("c"), gpu("d")]
    outcome = fit(cards, ask(nums=2, mem=10), selectors=PLAIN, policy=TOPOLOGY, pair_scores=SCORES)
    # Collection order is d, c, b, a; the pair d-b has the highest score and keeps that order.
    assert outcome.ok and uuids(outcome.devices) == ["d", "b"]


def test_topology_single_card_is_the_least_connected() -> None:
    scores = {"a": {"b": 50, "c": 50}, "b": {"a": 50, "c": 100}, "c": {"a": 50, "b": 100}}
    outcome = fit(
        [gpu("a"), gpu("b"), gpu("c")],
        ask(nums=1, mem=10),
        selectors=PLAIN,
        policy=TOPOLOGY,
        pair_scores=scores,
    )
    assert uuids(outcome.devices) == ["a"]


def test_topology_without_scores_takes_first_combination() -> None:
    outcome = fit(
        [gpu("a"), gpu("b"), gpu("c")], ask(nums=2, mem=10), selectors=PLAIN, policy=TOPOLOGY
    )
    assert uuids(outcome.devices) == ["c", "b"]


def test_topology_with_numa_never_counts_numa_not_fit() -> None:
    cards = [gpu("a", numa=1), gpu("b", numa=0), gpu("c", numa=0)]
    outcome = fit(
        cards,
        ask(nums=2, mem=10),
        selectors=select({"nvidia.com/numa-bind": "true"}),
        policy=TOPOLOGY,
    )
    assert not outcome.ok
    assert dict(outcome.counts) == {R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}


def mig_card(uuid: str = "mig-0", in_use: tuple[MigPlacement, ...] = (), **fields: object) -> Card:
    return gpu(
        uuid,
        mode="mig",
        count=7,
        totalmem=81920,
        mig_profiles=A100_PROFILES,
        mig_in_use=in_use,
        **fields,
    )


def test_mig_card_is_revisited_for_several_instances() -> None:
    outcome = fit([mig_card()], ask(nums=3, mem=5000), selectors=PLAIN, policy=SPREAD)
    assert outcome.ok and uuids(outcome.devices) == ["mig-0"] * 3


def test_mig_single_placement_example() -> None:
    """Test_fitInCertainDevice/mode is mig: one placement, Nums 2."""
    card = gpu(
        "test-0",
        mode="mig",
        count=7,
        totalmem=81920,
        mig_profiles=(ONE_G.__class__("1g.10gb", 9856, 15, 1, (MigPlacement(0, 1),)),),
    )
    outcome = fit([card], ask(nums=2, mem=1000), selectors=PLAIN, policy=SPREAD)
    assert not outcome.ok and outcome.total == 1
    assert dict(outcome.counts) == {
        R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1,
        R.CARD_MIG_TOPOLOGY_INFEASIBLE: 1,
    }


def test_mig_card_full_is_infeasible() -> None:
    taken = tuple(MigPlacement(s, 1) for s in range(7))
    outcome = fit([mig_card(in_use=taken)], ask(mem=5000), selectors=PLAIN, policy=SPREAD)
    assert dict(outcome.counts) == {R.CARD_MIG_TOPOLOGY_INFEASIBLE: 1}
