"""Invariants of every scheduled decision, over random clusters, pods and policies.

Whatever the nodes, their usage, their pair scores (negative ones included: a third party or a
hand-written `hami.io/node-nvidia-score` may carry any integer) and the policies, a scheduled
pod gets, in each container, exactly the number of cards it asked for, each of them one that
the container's request fits: healthy, not cordoned, of an accepted type, with the memory and
cores it books free on the card.
"""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.inventory import NodeInventory
from pyhami.devices.nvidia.request import container_request
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.devices.vendor import resolve_memory
from pyhami.engine import EngineConfig, Ledger, Outcome, decide, plan_pod
from pyhami.kube.views import read_container, read_pod
from pyhami.model import NodeName

from .builders import alloc_of, card, gpus, pod, used

ENGINE_CONFIG = EngineConfig(vendor=NvidiaVendor())

TYPES = ("NVIDIA A100", "NVIDIA V100", "NVIDIA T4")
GPU_POLICIES = ("binpack", "spread", "topology-aware", "mutex", "binpack,numa", "spread,numa")
# topology-aware is drawn more often: it is the policy whose choice has most branches.
DRAWN_GPU_POLICIES = st.sampled_from(GPU_POLICIES) | st.just("topology-aware")
NODE_POLICIES = ("binpack", "spread")


@st.composite
def nodes(draw: st.DrawFn) -> tuple[NodeName, NodeInventory, list[tuple[str, int, int]]]:
    """A node: its cards, pair scores (any sign), cordons and the usage already booked."""
    number = draw(st.integers(0, 3))
    name = NodeName(f"node{number}")
    count = draw(st.integers(1, 6))
    uuids = [f"{name}-gpu{i}" for i in range(count)]
    cards = tuple(
        card(
            uuid,
            draw(st.sampled_from((8000, 16000, 40000))),
            count=draw(st.integers(1, 4)),
            type_=draw(st.sampled_from(TYPES)),
            numa=draw(st.integers(0, 1)),
            index=i,
            health=draw(st.booleans().map(lambda sick: not sick) | st.just(True)),
        )
        for i, uuid in enumerate(uuids)
    )
    # Some tables are all negative and complete: a missing pair scores 0 and would win.
    negative = draw(st.booleans())
    score = st.integers(-1000, -1) if negative else st.integers(-1000, 1000)
    scores = {
        a: {b: draw(score) for b in uuids if b != a and (negative or draw(st.booleans()))}
        for a in uuids
    }
    cordoned = frozenset(u for u in uuids if draw(st.integers(0, 7)) == 0)
    usage = [
        (uuid, draw(st.integers(0, 8000)), draw(st.integers(0, 60)))
        for uuid in uuids
        if draw(st.booleans())
    ]
    return name, NodeInventory(cards, scores, cordoned), usage


requests = st.builds(
    lambda n, mem, cores, pct: gpus(n, mem=mem, cores=cores, pct=pct),
    st.integers(1, 3),
    st.one_of(st.none(), st.integers(1, 12000)),
    st.one_of(st.none(), st.integers(0, 100)),
    st.one_of(st.none(), st.integers(1, 100)),
)
annotations = st.fixed_dictionaries(
    {},
    optional={
        "hami.io/gpu-scheduler-policy": DRAWN_GPU_POLICIES,
        "hami.io/node-scheduler-policy": st.sampled_from(NODE_POLICIES),
        "nvidia.com/use-gputype": st.sampled_from(("A100", "V100,T4", "a100")),
        "nvidia.com/nouse-gputype": st.sampled_from(("T4", "V100")),
        "nvidia.com/numa-bind": st.sampled_from(("true", "false")),
    },
)


def check_scheduled(
    ledger: Ledger, the_pod: dict[str, Any], node: NodeName, devices: tuple[tuple[Any, ...], ...]
) -> None:
    config = NvidiaConfig()
    plan = plan_pod(read_pod(the_pod), EngineConfig(vendor=NvidiaVendor(config), nvidia=config))
    ledger_node = ledger.node(node)
    assert ledger_node is not None
    inventory = {c.id: c for c in ledger_node.cards}
    containers = [*the_pod["spec"]["initContainers"], *the_pod["spec"]["containers"]]
    assert len(devices) == len(containers)
    for container, request, given_devices in zip(containers, plan.requests, devices, strict=True):
        expected = container_request(read_container(container, init=False), config)
        assert request == expected
        if request is None:
            assert given_devices == ()
            continue
        assert len(given_devices) == request.nums, (container, given_devices)
        assert len({d.uuid for d in given_devices}) == request.nums
        for device in given_devices:
            held = inventory[device.uuid]
            assert held.health and device.uuid not in ledger_node.inventory.cordoned
            assert plan.selectors.type_ok(held.type, held.mode)
            assert device.usedmem == resolve_memory(request, held.totalmem)
            assert device.usedcores == min(request.coresreq, 100)
            assert held.totalmem - held.usedmem >= device.usedmem
            assert held.totalcore - held.usedcores >= device.usedcores
            assert held.used < held.count


@settings(max_examples=300, deadline=None)
@given(
    st.lists(nodes(), min_size=1, max_size=4, unique_by=lambda node: node[0]),
    st.lists(requests, min_size=1, max_size=2),
    st.lists(requests | st.just({}), max_size=1),
    annotations,
    DRAWN_GPU_POLICIES,
    st.sampled_from(NODE_POLICIES),
)
def test_a_scheduled_pod_gets_exactly_its_cards_and_each_fits(
    cluster: list[tuple[NodeName, NodeInventory, list[tuple[str, int, int]]]],
    apps: list[dict[str, str]],
    init: list[dict[str, str]],
    notes: dict[str, str],
    gpu_policy: str,
    node_policy: str,
) -> None:
    ledger = Ledger()
    for name, inventory, usage in cluster:
        ledger.upsert_node(name, inventory)
        for n, (uuid, mem, cores) in enumerate(usage):
            ledger.add_pod(alloc_of(f"{uuid}-user{n}", name, (used(uuid, mem, cores),)))
    the_pod = pod("p", *apps, init=tuple(init), annotations=notes)
    config = EngineConfig(vendor=NvidiaVendor(), node_policy=node_policy, gpu_policy=gpu_policy)
    decision = decide(
        plan_pod(read_pod(the_pod), config),
        [name for name, _, _ in cluster],
        ledger,
        config=config,
        quotas=None,

    )
    assert decision.outcome in (Outcome.SCHEDULED, Outcome.UNSCHEDULABLE), decision.error
    if decision.outcome is Outcome.SCHEDULED:
        assert decision.node is not None
        check_scheduled(ledger, the_pod, decision.node, decision.allocation.containers)
        assert decision.allocation is not None
        ledger.add_pod(decision.allocation)
        for usage in ledger.device_usage(decision.node):
            assert usage.used <= usage.count
            assert usage.usedmem <= usage.totalmem
            assert usage.usedcores <= usage.totalcore


def test_topology_aware_takes_the_best_pair_when_every_total_is_negative() -> None:
    """Finding: all pair totals below zero left a two-GPU pod with no card at all (`;`)."""
    ledger = Ledger()
    uuids = ("a", "b", "c")
    scores = {"a": {"b": -30, "c": -5}, "b": {"a": -30, "c": -20}, "c": {"a": -5, "b": -20}}
    ledger.upsert_node(
        NodeName("n"),
        NodeInventory(tuple(card(u, index=i) for i, u in enumerate(uuids)), scores, frozenset()),
    )
    the_pod = pod(
        "p", gpus(2, mem=10), annotations={"hami.io/gpu-scheduler-policy": "topology-aware"}
    )
    decision = decide(
        plan_pod(read_pod(the_pod), ENGINE_CONFIG),
        [NodeName("n")],
        ledger,
        config=ENGINE_CONFIG,
        quotas=None,

    )
    assert decision.outcome is Outcome.SCHEDULED
    assert sorted(d.uuid for d in decision.allocation.containers[0]) == ["a", "c"]
