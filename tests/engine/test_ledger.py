"""The ledger: HAMi's usage rules and add/remove == rebuild."""

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.engine import Ledger, PodAllocation, build_ledger
from pyhami.model import ContainerDevice, MigAllocation, MigPlacement, NodeName

from .builders import N, card, inventory, used


def alloc(
    key: str, node: str, *containers: tuple[ContainerDevice, ...], init: int = 0, **fields: Any
) -> PodAllocation:
    return PodAllocation(key, "default", key, N(node), tuple(containers), init, **fields)


def state(ledger: Ledger) -> dict[str, object]:
    nodes = {}
    for name in sorted(ledger.node_names()):
        node = ledger.node(name)
        assert node is not None
        columns = ledger.columns
        for c in node.cards:  # the screen's columns follow the cards exactly
            assert (columns.used[c.slot], columns.usedmem[c.slot], columns.usedcores[c.slot],
                    columns.health[c.slot]) == (c.used, c.usedmem, c.usedcores, c.health)
        nodes[name] = (
            ledger.device_usage(name),
            [
                (
                    int(columns.used[c.slot]),
                    int(columns.usedmem[c.slot]),
                    int(columns.usedcores[c.slot]),
                    bool(columns.health[c.slot]),
                    bool(columns.active[c.slot]),
                    bool(columns.cordoned[c.slot]),
                )
                for c in node.cards
            ],
            [sorted((p.start, p.size) for p in c.mig_in_use) for c in node.cards],
            node.score,
        )
    return {
        "nodes": nodes,
        "binpack": [n.name for n in ledger.preferred_nodes(spread=False)],
        "spread": [n.name for n in ledger.preferred_nodes(spread=True)],
        "namespaces": {ns: ledger.namespace_usage(ns) for ns in ("a", "b", "default")},
    }


def test_usage_adds_slots_memory_cores() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("n1"), inventory(card("g0"), card("g1")))
    first = (used("g0", 1000, 10), used("g1", 2000, 20))
    ledger.add_pod(alloc("p", "n1", first, (used("g0", 500, 5),)))
    g0, g1 = ledger.device_usage(N("n1"))
    assert (g0.used, g0.usedmem, g0.usedcores) == (2, 1500, 15)  # two app containers: slots 2
    assert (g1.used, g1.usedmem, g1.usedcores) == (1, 2000, 20)
    assert ledger.namespace_usage("default") == (3500, 35)
    ledger.remove_pod("p")
    ledger.remove_pod("p")  # idempotent
    assert ledger.device_usage(N("n1"))[0].used == 0
    assert ledger.namespace_usage("default") == (0, 0)


def test_init_containers_count_at_their_peak_then_shrink() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("n1"), inventory(card("g0")))
    containers = ((used("g0", 3000, 30),), (used("g0", 1000, 10),))
    ledger.add_pod(alloc("p", "n1", *containers, init=1))
    assert ledger.device_usage(N("n1"))[0].usedmem == 3000
    ledger.add_pod(alloc("p", "n1", *containers, init=1, init_finished=True))
    assert ledger.device_usage(N("n1"))[0].usedmem == 1000
    ledger.add_pod(alloc("p", "n1", *containers, init=1))  # a re-add never un-shrinks
    assert ledger.device_usage(N("n1"))[0].usedmem == 1000


def test_pods_wait_for_their_node() -> None:
    ledger = Ledger()
    ledger.add_pod(alloc("p", "n1", (used("g0", 1000),)))
    ledger.upsert_node(N("n1"), inventory(card("g0")))
    assert ledger.device_usage(N("n1"))[0].usedmem == 1000
    ledger.remove_node(N("n1"))
    assert ledger.device_usage(N("n1")) == ()
    ledger.upsert_node(N("n1"), inventory(card("g0", 16000)))
    assert ledger.device_usage(N("n1"))[0].usedmem == 1000


def mig(uuid: str, start: int, container: int = 0) -> MigAllocation:
    return MigAllocation(container, 0, uuid, "1g.10gb", MigPlacement(start, 1))


def test_mig_bookkeeping_fails_closed() -> None:
    ledger = Ledger()
    ledger.upsert_node(N("n1"), inventory(card("m0", mode="mig"), card("m1", mode="mig"),
                                          card("h0", mode="hami-core")))
    ledger.add_pod(alloc("ok", "n1", (used("m0", 9856),), mig_allocations=(mig("m0", 6),)))
    m0 = ledger.node(N("n1")).cards[0]  # type: ignore[union-attr]
    assert m0.health and m0.mig_in_use == [MigPlacement(6, 1)]
    ledger.add_pod(alloc("bare", "n1", (used("m1", 9856),)))  # MIG card used, no reservation
    assert [c.health for c in ledger.device_usage(N("n1"))] == [True, False, True]
    ledger.add_pod(alloc("wrong", "n1", (used("h0", 100),), mig_allocations=(mig("h0", 0),)))
    assert [c.health for c in ledger.device_usage(N("n1"))] == [True, False, False]
    ledger.add_pod(alloc("ghost", "n1", (), mig_allocations=(mig("GPU-elsewhere", 0),)))
    assert [c.health for c in ledger.device_usage(N("n1"))] == [False, False, False]
    for key in ("bare", "wrong", "ghost"):
        ledger.remove_pod(key)
    assert [c.health for c in ledger.device_usage(N("n1"))] == [True, True, True]


NODES = {
    "n1": inventory(card("a0"), card("a1", 16000)),
    "n1-cordoned": inventory(card("a0"), card("a1", 16000), cordoned=frozenset({"a1"})),
    "n2": inventory(card("b0", mode="mig"), card("b1", mode="hami-core")),
    "n2-resized": inventory(card("b0", 40000, mode="mig"), card("x9")),
}
UUIDS = ["a0", "a1", "b0", "b1", "x9", "zz"]

device = st.builds(used, st.sampled_from(UUIDS), st.integers(0, 5000), st.integers(0, 100))
container = st.lists(device, max_size=2).map(tuple)
allocation = st.builds(
    lambda key, node, containers, init, finished, ns, migs: PodAllocation(
        key, ns, key, N(node), tuple(containers), init, tuple(migs), finished
    ),
    st.sampled_from(["p1", "p2", "p3", "p4"]),
    st.sampled_from(["n1", "n2", "n3"]),
    st.lists(container, max_size=3),
    st.integers(0, 2),
    st.booleans(),
    st.sampled_from(["a", "b"]),
    st.lists(st.builds(mig, st.sampled_from(UUIDS), st.integers(0, 6)), max_size=2),
)
operation = st.one_of(
    st.tuples(st.just("add"), allocation),
    st.tuples(st.just("remove"), st.sampled_from(["p1", "p2", "p3", "p4"])),
    st.tuples(st.just("node"), st.sampled_from([("n1", "n1"), ("n2", "n2"), ("n2", "n2-resized"),
                                                 ("n3", "n1"), ("n1", "n1-cordoned")])),
    st.tuples(st.just("drop"), st.sampled_from(["n1", "n2", "n3"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(operation, max_size=25))
def test_any_sequence_equals_a_rebuild(operations: list[tuple[str, object]]) -> None:
    ledger = Ledger()
    nodes: dict[NodeName, object] = {}
    pods: dict[str, PodAllocation] = {}
    shrunk: set[str] = set()
    for kind, arg in operations:
        if kind == "add":
            assert isinstance(arg, PodAllocation)
            ledger.add_pod(arg)
            if arg.init_finished:
                shrunk.add(arg.key)
            pods[arg.key] = replace(arg, init_finished=arg.key in shrunk)
        elif kind == "remove":
            ledger.remove_pod(str(arg))
            pods.pop(str(arg), None)
            shrunk.discard(str(arg))
        elif kind == "node":
            name, which = arg  # type: ignore[misc]
            ledger.upsert_node(N(name), NODES[which])
            nodes[N(name)] = NODES[which]
        else:
            ledger.remove_node(N(str(arg)))
            nodes.pop(N(str(arg)), None)
    rebuilt = build_ledger(nodes, list(pods.values()))  # type: ignore[arg-type]
    assert state(ledger) == state(rebuilt)
