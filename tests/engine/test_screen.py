"""The column screen (engine/columns.py) answers exactly like Fit on every card."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import EngineConfig, Ledger, PodAllocation, PodSpecError, decide, plan_pod
from pyhami.kube.views import read_pod
from pyhami.model import MigPlacement, MigProfile

from .builders import N, card, gpus, inventory, pod, used, written

ENGINE_CONFIG = EngineConfig(vendor=NvidiaVendor())

ONE_G = MigProfile("1g.10gb", 9856, 15, 1, tuple(MigPlacement(s, 1) for s in range(7)))

card_state = st.tuples(
    st.integers(0, 4),  # used
    st.integers(0, 9000),  # memory used
    st.sampled_from([0, 20, 50, 100]),  # cores used
    st.booleans(),  # healthy
    st.sampled_from(["NVIDIA-A100", "NVIDIA-T4", "Ascend"]),  # a non-NVIDIA type is skipped
    st.booleans(),  # cordoned
    # memory: a percentage of 1001 MiB truncates; of 30 000 000 MiB its int32 product wraps
    st.sampled_from([10000, 10000, 1001, 30_000_000]),
)
node_state = st.tuples(st.lists(card_state, min_size=1, max_size=4), st.booleans())  # , MIG


CardState = tuple[int, int, int, bool, str, bool, int]


def build(nodes: list[tuple[list[CardState], bool]]) -> Ledger:
    ledger = Ledger()
    for n, (cards, mig) in enumerate(nodes):
        infos = []
        cordoned = set()
        for c, (_, _, _, healthy, type_, cordon, memory) in enumerate(cards):
            uuid = f"g{n}-{c}"
            infos.append(
                card(
                    uuid,
                    memory,
                    count=4,
                    type_=type_,
                    index=c,
                    health=healthy,
                    mode="mig" if mig and c == 0 else "hami-core",
                    profiles=(ONE_G,) if mig and c == 0 else (),
                )
            )
            if cordon:
                cordoned.add(uuid)
        ledger.upsert_node(N(f"n{n:02d}"), inventory(*infos, cordoned=frozenset(cordoned)))
        for c, (slots, mem, cores, *_rest) in enumerate(cards):
            if mig and c == 0:
                continue
            for s in range(slots):
                share = used(f"g{n}-{c}", mem if s == 0 else 0, cores if s == 0 else 0)
                key = f"p{n}-{c}-{s}"
                ledger.add_pod(PodAllocation(key, "default", key, N(f"n{n:02d}"), ((share,),)))
    return ledger


request = st.builds(
    lambda n, mem, cores, pct: gpus(n, mem=mem, cores=cores, pct=pct),
    st.integers(1, 3),
    st.one_of(st.none(), st.integers(1, 10000)),
    st.one_of(st.none(), st.sampled_from([0, 10, 60, 100, 150])),
    st.one_of(st.none(), st.integers(1, 100)),
)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(node_state, min_size=34, max_size=45),
    request,
    st.lists(st.one_of(request, st.just({})), max_size=1),  # a second app container
    st.lists(st.one_of(request, st.just({})), max_size=2),  # init containers
    st.sampled_from(["spread", "binpack", "mutex", "topology-aware"]),
    st.sampled_from(["binpack", "spread"]),
)
def test_screen_matches_fit_on_every_node(
    nodes: list[tuple[list[CardState], bool]],
    limits: dict[str, str],
    more: list[dict[str, str]],
    init: list[dict[str, str]],
    gpu_policy: str,
    node_policy: str,
) -> None:
    ledger = build(nodes)
    the_pod = pod(
        "p",
        limits,
        *more,
        init=tuple(init),
        annotations={"hami.io/gpu-scheduler-policy": gpu_policy},
    )
    names = [N(f"n{n:02d}") for n in range(len(nodes))] + [N("ghost")]
    config = EngineConfig(vendor=NvidiaVendor(), node_policy=node_policy)
    try:
        plan = plan_pod(read_pod(the_pod), config)
    except PodSpecError:
        return  # a request out of range (150 cores) places nothing anywhere
    fast = decide(plan, names, ledger, config=config, quotas=None)
    full = decide(plan, names, ledger, config=config, quotas=None, explain=True)
    assert (fast.node, fast.allocation) == (full.node, full.allocation)
    every = decide(plan, names, ledger, config=config, quotas=None, all_reasons=True)
    assert (every.node, every.allocation) == (full.node, full.allocation)
    assert every.failed_nodes == full.failed_nodes, "every candidate's reason, as in explain"
    assert {n for n, v in every.verdicts.items() if v.fits} == {
        n for n, v in full.verdicts.items() if v.fits
    }
    if fast.node is None:
        assert fast.failed_nodes == full.failed_nodes
        for name, verdict in fast.verdicts.items():
            assert verdict.reasons == full.verdicts[name].reasons
            assert verdict.failure == full.verdicts[name].failure
            assert verdict.container == full.verdicts[name].container


def test_screen_sees_usage_changes_and_node_changes() -> None:
    ledger = build([([(0, 0, 0, True, "NVIDIA-A100", False, 10000)], False)] * 40)
    names = [N(f"n{n:02d}") for n in range(40)]
    big = plan_pod(read_pod(pod("big", gpus(1, mem=9000))), ENGINE_CONFIG)
    first = decide(big, names, ledger, config=ENGINE_CONFIG, quotas=None)
    assert first.node == "n00"
    for n in range(40):
        key = f"fill{n}"
        ledger.add_pod(
            PodAllocation(key, "default", key, N(f"n{n:02d}"), ((used(f"g{n}-0", 5000),),))
        )
    answer = decide(big, names, ledger, config=ENGINE_CONFIG, quotas=None)
    assert answer.node is None
    assert set(answer.failed_nodes.values()) == {"1/1 CardInsufficientMemory"}
    ledger.remove_pod("fill39")
    ledger.remove_node(N("n00"))
    ledger.upsert_node(N("n00"), inventory(card("new", 20000)))
    answer = decide(big, names, ledger, config=ENGINE_CONFIG, quotas=None)
    assert answer.node == "n00"  # n00 and n39 are both idle now: the tie goes to the smaller name


@settings(max_examples=15, deadline=None)
@given(
    st.lists(node_state, min_size=34, max_size=40),
    request,
    st.sampled_from(["binpack", "spread"]),
    st.data(),
)
def test_a_few_candidates_decide_as_if_alone(
    nodes: list[tuple[list[CardState], bool]],
    limits: dict[str, str],
    node_policy: str,
    data: st.DataObject,
) -> None:
    picked = sorted(
        data.draw(st.lists(st.integers(0, len(nodes) - 1), min_size=1, max_size=2, unique=True))
    )  # sorted: renaming keeps name order
    names = [N(f"n{n:02d}") for n in picked]
    config = EngineConfig(vendor=NvidiaVendor(), node_policy=node_policy)
    try:
        plan = plan_pod(read_pod(pod("p", limits)), config)
    except PodSpecError:
        return  # a request out of range (150 cores) places nothing anywhere
    among_all = decide(plan, names, build(nodes), config=config, quotas=None)
    alone = build([nodes[n] for n in picked])  # the same nodes, renamed n00, n01
    renamed = {N(f"n{i:02d}"): name for i, name in enumerate(names)}
    by_itself = decide(plan, list(renamed), alone, config=config, quotas=None)
    assert among_all.node == (renamed[by_itself.node] if by_itself.node else None)
    assert list(among_all.failed_nodes.values()) == list(by_itself.failed_nodes.values())


def test_absolute_memory_wins_over_percentage_in_the_screen() -> None:
    """A pod giving both gpumem and gpumem-percentage books the absolute amount."""
    full = ([(1, 9950, 0, True, "NVIDIA-A100", False, 10000)], False)
    roomy = ([(1, 6000, 0, True, "NVIDIA-A100", False, 10000)], False)  # 4000 MiB free
    ledger = build([full] * 39 + [roomy])  # binpack visits the full nodes first: n39 is screened
    names = [N(f"n{n:02d}") for n in range(40)]
    both = pod("p", gpus(1, mem=100, pct=65))  # 100 MiB fits n39; 65 % (6500 MiB) would not
    plan = plan_pod(read_pod(both), ENGINE_CONFIG)
    answer = decide(plan, names, ledger, config=ENGINE_CONFIG, quotas=None)
    assert answer.node == "n39"
    assert written(answer)["hami.io/vgpu-devices-allocated"] == "g39-0,NVIDIA,100,0:;"


def test_the_screen_wraps_a_percentage_product_as_fit_does() -> None:
    """100 % of a 30 000 000 MiB card is an int32 product that wraps negative: it fits."""
    full = ([(1, 9950, 0, True, "NVIDIA-A100", False, 10000)], False)
    huge = ([(1, 5000, 0, True, "NVIDIA-A100", False, 30_000_000)], False)
    ledger = build([full] * 39 + [huge])  # binpack visits the full nodes first: n39 is screened
    names = [N(f"n{n:02d}") for n in range(40)]
    whole = plan_pod(read_pod(pod("p", gpus(1, pct=100))), ENGINE_CONFIG)
    answer = decide(whole, names, ledger, config=ENGINE_CONFIG, quotas=None)
    assert answer.node == "n39"
    assert written(answer)["hami.io/vgpu-devices-allocated"] == "g39-0,NVIDIA,-12949672,0:;"
