"""Whole decisions: node choice, annotations, reasons."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami import engine
from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import (
    EngineConfig,
    Ledger,
    NodeFailure,
    Outcome,
    PodSpecError,
    QuotaBook,
    decide,
    plan_pod,
)
from pyhami.kube.views import read_pod
from pyhami.model import MigPlacement, MigProfile
from pyhami.protocol import Reason

from .builders import N, alloc_of, card, gpus, inventory, pod, used, written

CANDIDATES = [N("node1"), N("node2")]


def example_ledger() -> Ledger:
    """HAMi's worked scoring example: device1 holds 2000 MiB/25 %, device4 6000 MiB/75 %."""
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("device1"), card("device2")))
    ledger.upsert_node(N("node2"), inventory(card("device3"), card("device4")))
    ledger.add_pod(alloc_of("p1", "node1", (used("device1", 2000, 25),)))
    ledger.add_pod(alloc_of("p2", "node2", (used("device4", 6000, 75),)))
    return ledger


def run(ledger: Ledger, the_pod: dict[str, Any], *, node_policy: str = "binpack",
        gpu_policy: str = "spread", quotas: QuotaBook | None = None,
        candidates: list[str] | None = None, explain: bool = False,
        config: NvidiaConfig | None = None) -> engine.Decision:
    nvidia = config or NvidiaConfig()
    cfg = EngineConfig(vendor=NvidiaVendor(nvidia), nvidia=nvidia, node_policy=node_policy,
                       gpu_policy=gpu_policy)
    names = [N(c) for c in candidates] if candidates else CANDIDATES
    return decide(plan_pod(read_pod(the_pod), cfg), names, ledger, config=cfg, quotas=quotas,
                  explain=explain)


@pytest.mark.parametrize(
    ("node_policy", "gpu_policy", "node", "device"),
    [
        ("binpack", "binpack", "node2", "device4"),
        ("binpack", "spread", "node2", "device3"),
        ("spread", "binpack", "node1", "device1"),
        ("spread", "spread", "node1", "device2"),
    ],
)
def test_worked_example(node_policy: str, gpu_policy: str, node: str, device: str) -> None:
    decision = run(example_ledger(), pod("new", gpus(1, mem=1000, cores=20)),
                   node_policy=node_policy, gpu_policy=gpu_policy)
    assert decision.outcome is Outcome.SCHEDULED and decision.node == node
    assert decision.score == pytest.approx(8.0 if node == "node2" else 3.0)
    value = f"{device},NVIDIA,1000,20:;"
    assert written(decision) == {
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-time": "1755763200",
        "hami.io/vgpu-devices-to-allocate": value,
        "hami.io/vgpu-devices-allocated": value,
    }
    assert decision.failed_nodes == {}, "HAMi's /filter answers only NodeNames on success"


def test_pod_annotations_override_policies() -> None:
    annotated = pod("new", gpus(1, mem=1000, cores=20), annotations={
        "hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack"})
    decision = run(example_ledger(), annotated)
    assert (decision.node, decision.allocation.containers[0][0].uuid) == ("node1", "device1")


def test_every_failed_node_gets_hami_reason_text() -> None:
    decision = run(example_ledger(), pod("big", gpus(2, mem=7000)), candidates=[
        "node1", "node2", "ghost"])
    assert decision.outcome is Outcome.UNSCHEDULABLE and decision.node is None
    assert decision.failed_nodes == {
        "node1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
        "node2": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
        "ghost": "node unregistered",
    }
    verdict = decision.verdicts[N("node1")]
    assert verdict.failure is NodeFailure.CARDS
    assert dict(verdict.reasons) == {Reason.CARD_INSUFFICIENT_MEMORY: 1,
                                     Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}
    assert run(example_ledger(), pod("many", gpus(3))).failed_nodes == {
        "node1": "NodeInsufficientDevice", "node2": "NodeInsufficientDevice"}


def test_explain_keeps_every_node_and_card() -> None:
    decision = run(example_ledger(), pod("new", gpus(1, mem=7000)), explain=True)
    assert decision.node == "node2"  # same winner as without explain
    assert set(decision.verdicts) == {"node1", "node2"}
    assert all(v.fits for v in decision.verdicts.values())
    assert decision.failed_nodes == {}
    assert [c.uuid for c in decision.verdicts[N("node1")].checks] == ["device2"]


def test_pod_without_hami_resources_passes_through() -> None:
    plain = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}
    assert run(example_ledger(), plain).outcome is Outcome.NO_DEVICE_REQUEST


def test_bad_weights_fail_the_filter() -> None:
    decision = run(example_ledger(), pod("w", gpus(1), annotations={
        "hami.io/device-scoring-weights": "slot=1,core=x,memory=1"}))
    assert decision.outcome is Outcome.ERROR
    assert decision.error is not None and decision.error.startswith("calcScore failed")
    assert decision.error.endswith("for pod w")


def test_malformed_pod_is_an_error_not_a_crash() -> None:
    with pytest.raises(PodSpecError, match=r"pod default/x: spec\.containers"):
        read_pod({"metadata": {"name": "x"}, "spec": {"containers": "no"}})
    bad_value = pod("x", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "lots"})
    with pytest.raises(PodSpecError, match=r"pod default/x: .*gpumem"):
        run(example_ledger(), bad_value)


def test_init_containers_each_start_from_existing_usage() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("g0")))
    two_inits = pod("p", gpus(1, mem=5000), init=(gpus(1, mem=6000), gpus(1, mem=6000)))
    decision = run(ledger, two_inits, candidates=["node1"])
    assert decision.node == "node1"
    assert written(decision)["hami.io/vgpu-devices-allocated"] == (
        "g0,NVIDIA,6000,0:;g0,NVIDIA,6000,0:;g0,NVIDIA,5000,0:;")
    assert decision.allocation is not None
    ledger.add_pod(decision.allocation)
    assert ledger.device_usage(N("node1"))[0].usedmem == 6000  # peak of init vs app


def test_app_containers_accumulate() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("g0")))
    decision = run(ledger, pod("p", gpus(1, mem=5000), gpus(1, mem=5000)), candidates=["node1"])
    assert decision.failed_nodes == {"node1": "1/1 CardInsufficientMemory"}


def test_gpu_less_containers_keep_their_segment() -> None:
    """HAMi fix "one segment per container": one segment per container, init containers first."""
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("g0", type_="NVIDIA-A100")))
    mixed = pod("p", {}, gpus(1, mem=100), init=({},))
    decision = run(ledger, mixed, candidates=["node1"])
    assert written(decision)["hami.io/vgpu-devices-allocated"] == ";;g0,NVIDIA,100,0:;"


def test_quota_limits_namespace_memory() -> None:
    ledger = example_ledger()
    quotas = QuotaBook(NvidiaConfig())
    quotas.set_quota("q1", "default", {"limits.nvidia.com/gpumem": "9000",
                                       "requests.nvidia.com/gpumem": "1"})
    # the namespace already holds 8000 MiB
    assert run(ledger, pod("a", gpus(1, mem=1000)), quotas=quotas).outcome is Outcome.SCHEDULED
    refused = run(ledger, pod("b", gpus(1, mem=1001)), quotas=quotas)
    assert refused.failed_nodes == {"node1": "2/2 ResourceQuotaNotFit",
                                    "node2": "2/2 ResourceQuotaNotFit"}
    quotas.set_quota("q2", "default", {"limits.nvidia.com/gpumem": "20000"})
    assert run(ledger, pod("b", gpus(1, mem=1001)), quotas=quotas).outcome is Outcome.UNSCHEDULABLE
    quotas.remove_quota("q1")
    assert run(ledger, pod("b", gpus(1, mem=1001)), quotas=quotas).outcome is Outcome.SCHEDULED
    quotas.set_quota("q2", "default", {"limits.nvidia.com/gpucores": "0"})
    assert run(ledger, pod("c", gpus(1, mem=1, cores=1)), quotas=quotas).node is None


ONE_G = MigProfile("1g.10gb", 9856, 15, 1, tuple(MigPlacement(s, 1) for s in range(7)))
THREE_G = MigProfile("3g.40gb", 40192, 43, 3, (MigPlacement(0, 4), MigPlacement(4, 4)))


def test_mig_instances_rewrite_the_booking_and_are_recorded() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(
        card("mig0", 81920, count=7, mode="mig", profiles=(ONE_G, THREE_G))))
    decision = run(ledger, pod("p", gpus(2, mem=5000)), candidates=["node1"])
    assert written(decision)["hami.io/vgpu-devices-allocated"] == (
        "mig0,NVIDIA,9856,15:mig0,NVIDIA,9856,15:;")
    assert written(decision)["hami.io/vgpu-mig-allocations"] == (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"mig0","profile":"1g.10gb",'
        '"placement":{"start":6,"size":1}},{"containerIndex":0,"deviceIndex":1,'
        '"gpuUUID":"mig0","profile":"1g.10gb","placement":{"start":5,"size":1}}]')
    assert decision.allocation is not None
    ledger.add_pod(decision.allocation)
    node = ledger.node(N("node1"))
    assert node is not None and node.cards[0].health
    assert sorted(node.cards[0].mig_in_use, key=lambda p: p.start) == [
        MigPlacement(5, 1), MigPlacement(6, 1)]
    big = run(ledger, pod("q", gpus(1, mem=30000)), candidates=["node1"])
    assert written(big)["hami.io/vgpu-devices-allocated"] == "mig0,NVIDIA,40192,43:;"


def test_topology_aware_prefers_linked_pair() -> None:
    ledger = Ledger()
    scores = {"a": {"b": 10, "c": 10, "d": 10}, "b": {"a": 10, "c": 200, "d": 10},
              "c": {"a": 10, "b": 200, "d": 10}, "d": {"a": 10, "b": 10, "c": 10}}
    ledger.upsert_node(N("node1"), inventory(card("a", index=0), card("b", index=1),
                                             card("c", index=2), card("d", index=3),
                                             scores=scores))
    decision = run(ledger, pod("p", gpus(2, mem=10)), gpu_policy="topology-aware",
                   candidates=["node1"])
    assert sorted(d.uuid for d in decision.allocation.containers[0]) == ["b", "c"]


def test_cordoned_cards_are_skipped() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("a"), card("b"), cordoned=frozenset({"b"})))
    decision = run(ledger, pod("p", gpus(2)), candidates=["node1"])
    assert decision.failed_nodes == {
        "node1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardCordoned"}


cluster_pod = st.builds(
    lambda n, mem, cores, pct: gpus(n, mem=mem, cores=cores, pct=pct),
    st.integers(1, 3),
    st.one_of(st.none(), st.integers(1, 9000)),
    st.one_of(st.none(), st.integers(0, 120)),
    st.one_of(st.none(), st.integers(1, 100)),
)


containers = st.lists(st.one_of(cluster_pod, st.just({})), min_size=1, max_size=2)
inits = st.lists(st.tuples(st.one_of(cluster_pod, st.just({})), st.booleans()), max_size=2)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(containers, inits,
                          st.sampled_from(["binpack", "spread", "mutex", "topology-aware",
                                           "binpack,numa"]),
                          st.booleans()), min_size=1, max_size=10))
def test_decisions_never_overcommit_and_quick_equals_full(
    pods: list[tuple[list[dict[str, str]], list[tuple[dict[str, str], bool]], str, bool]],
) -> None:
    ledger = Ledger()
    for n in range(3):
        ledger.upsert_node(N(f"n{n}"), inventory(
            card(f"g{n}0", 8000, count=3, numa=0, index=0),
            card(f"g{n}1", 16000, count=2, numa=1, index=1)))
    names = ["n0", "n1", "n2"]
    for i, (apps, init, policy, numa) in enumerate(pods):
        annotations = {"hami.io/gpu-scheduler-policy": policy}
        if numa:
            annotations["nvidia.com/numa-bind"] = "true"
        the_pod = pod(f"p{i}", *apps, init=tuple(c for c, _ in init), annotations=annotations,
                      sidecars=tuple(n for n, (_, sidecar) in enumerate(init) if sidecar))
        try:
            fast = run(ledger, the_pod, candidates=names)
        except PodSpecError:
            continue  # a request out of range places nothing
        full = run(ledger, the_pod, candidates=names, explain=True)
        assert (fast.node, fast.allocation) == (full.node, full.allocation)
        if fast.node is None:
            assert fast.failed_nodes == full.failed_nodes
        if fast.allocation is not None:
            ledger.add_pod(fast.allocation)
        for name in names:
            for usage in ledger.device_usage(N(name)):
                assert usage.used <= usage.count
                assert usage.usedmem <= usage.totalmem
                assert usage.usedcores <= usage.totalcore


def test_weights_break_topology_ties() -> None:
    """TestCalcScoreUsesDeviceScoringWeightsAsTopologyTieBreaker: without pair scores the
    single card is the first one collected, and the weighted device scores decide that."""
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("mem-busy", index=0), card("slot-busy", index=1)))
    ledger.add_pod(alloc_of("a", "node1", (used("mem-busy", 6000, 0),)))
    ledger.add_pod(alloc_of("b", "node1", (used("slot-busy", 0, 0),), (used("slot-busy", 0, 0),)))

    def chosen(weights: str) -> str:
        the_pod = pod("p", gpus(1, mem=10), annotations={
            "hami.io/gpu-scheduler-policy": "topology-aware",
            "hami.io/device-scoring-weights": weights})
        return run(ledger, the_pod, candidates=["node1"]).allocation.containers[0][0].uuid

    # spread order puts the higher score first, so Fit meets the lower-scored card first
    assert chosen("slot=0,core=0,memory=1") == "slot-busy"  # memory makes mem-busy score high
    assert chosen("slot=1,core=0,memory=0") == "mem-busy"  # slots make slot-busy score high


def test_numa_bind_keeps_a_container_on_one_numa_node() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("a", numa=0, index=0), card("b", numa=1, index=1),
                                             card("c", numa=1, index=2)))
    the_pod = pod("p", gpus(2, mem=10), annotations={"nvidia.com/numa-bind": "true"})
    decision = run(ledger, the_pod, candidates=["node1"])
    assert sorted(d.uuid for d in decision.allocation.containers[0]) == ["b", "c"]
    three = run(ledger, pod("q", gpus(3, mem=10), annotations={"nvidia.com/numa-bind": "1"}),
                candidates=["node1"])
    assert three.failed_nodes == {"node1": "1/3 AllocatedCardsInsufficientRequest, 2/3 NumaNotFit"}


def test_mutex_takes_only_idle_cards() -> None:
    ledger = example_ledger()
    decision = run(ledger, pod("p", gpus(2, mem=10)), gpu_policy="mutex")
    assert decision.failed_nodes == {
        "node1": "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict",
        "node2": "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict",
    }
    mutex = run(ledger, pod("q", gpus(1, mem=10)), gpu_policy="mutex")
    assert mutex.allocation.containers[0][0].uuid in ("device2", "device3")


def test_mig_request_may_ask_for_more_instances_than_cards() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(
        card("mig0", 81920, count=7, mode="mig", profiles=(ONE_G, THREE_G))))
    decision = run(ledger, pod("p", gpus(3, mem=5000)), candidates=["node1"])
    assert decision.node == "node1" and len(decision.allocation.containers[0]) == 3
    core_only = pod("q", gpus(3, mem=5000), annotations={"nvidia.com/vgpu-mode": "hami-core"})
    assert run(ledger, core_only, candidates=["node1"]).failed_nodes == {
        "node1": "NodeInsufficientDevice"}


def test_quota_counts_init_containers_at_their_real_positions() -> None:
    """HAMi fix "Init containers in quota": HAMi would read the app entry as an init one (max, not
    sum) and let 2 × 1500 MiB through a 2048 MiB quota."""
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("g0")))
    quotas = QuotaBook(NvidiaConfig())
    quotas.set_quota("q", "default", {"limits.nvidia.com/gpumem": "2048"})
    the_pod = pod("p", gpus(1, mem=1500), gpus(1, mem=1500), init=(gpus(1, mem=1000),))
    decision = run(ledger, the_pod, quotas=quotas, candidates=["node1"])
    assert decision.failed_nodes == {"node1": "1/1 ResourceQuotaNotFit"}
    fits = pod("r", gpus(1, mem=2000), init=(gpus(1, mem=2048),))  # peak 2048: fits exactly
    assert run(ledger, fits, quotas=quotas, candidates=["node1"]).node == "node1"


def test_quota_memory_limit_scales_with_memory_factor() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("g0", 80000)))
    factor = NvidiaConfig(memoryFactor=4)
    quotas = QuotaBook(factor)
    quotas.set_quota("q", "default", {"limits.nvidia.com/gpumem": "1000"})
    assert run(ledger, pod("p", gpus(1, mem=1000)), quotas=quotas, config=factor,
               candidates=["node1"]).node == "node1"  # 4000 MiB booked, limit 1000 × 4
    assert run(ledger, pod("q", gpus(1, mem=1001)), quotas=quotas, config=factor,
               candidates=["node1"]).node is None
