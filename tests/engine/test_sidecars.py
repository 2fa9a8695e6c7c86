"""Native sidecars (init containers with `restartPolicy: Always`) hold their cards for the pod's
whole life: their usage adds to the app containers' and to every later init container's."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import (
    EngineConfig,
    Ledger,
    Outcome,
    QuotaBook,
    allocation_of,
    app_only_usage,
    collapse_init_usage,
    decide,
    plan_pod,
)
from pyhami.kube.views import read_pod
from pyhami.model import ContainerDevice

from .builders import N, card, gpus, inventory, pod, written

ENGINE_CONFIG = EngineConfig(vendor=NvidiaVendor())

T4 = 16384


def t4_node(ledger: Ledger, name: str, cards: int) -> None:
    ledger.upsert_node(N(name), inventory(
        *(card(f"{name}-t4-{n}", T4, type_="NVIDIA-Tesla T4", index=n) for n in range(cards))))


def run(ledger: Ledger, the_pod: dict[str, Any], *nodes: str,
        quotas: QuotaBook | None = None) -> Any:
    return decide(plan_pod(read_pod(the_pod), ENGINE_CONFIG), [N(n) for n in nodes], ledger,
                  config=ENGINE_CONFIG, quotas=quotas)


def sidecar_pod(name: str = "p", sidecar_mem: int = 10000, app_mem: int = 10000) -> dict[str, Any]:
    return pod(name, gpus(1, mem=app_mem), init=(gpus(1, mem=sidecar_mem),), sidecars=(0,))


def test_the_issue_example_sidecar_and_app_never_share_a_card_they_overflow() -> None:
    """Sidecar 10000 MiB + app 10000 MiB on a T4 of 16384 MiB: 20000 MiB on one card was the bug."""
    one = Ledger()
    t4_node(one, "t4", 1)
    refused = run(one, sidecar_pod(), "t4")
    assert refused.outcome is Outcome.UNSCHEDULABLE
    assert refused.failed_nodes == {"t4": "1/1 CardInsufficientMemory"}
    assert refused.verdicts[N("t4")].container == 1, "the app container is the one that fails"

    two = Ledger()
    t4_node(two, "t4", 2)
    placed = run(two, sidecar_pod(), "t4")
    assert placed.outcome is Outcome.SCHEDULED
    sidecar_cards = {d.uuid for d in placed.allocation.containers[0]}
    app_cards = {d.uuid for d in placed.allocation.containers[1]}
    assert sidecar_cards and app_cards and not sidecar_cards & app_cards
    two.add_pod(placed.allocation)
    assert sorted(u.usedmem for u in two.device_usage(N("t4"))) == [10000, 10000]


def test_a_classic_init_container_with_the_same_request_still_shares_the_card() -> None:
    """Without `restartPolicy: Always` the init container ends before the app starts."""
    ledger = Ledger()
    t4_node(ledger, "t4", 1)
    classic = pod("p", gpus(1, mem=10000), init=(gpus(1, mem=10000),))
    decision = run(ledger, classic, "t4")
    assert decision.outcome is Outcome.SCHEDULED
    ledger.add_pod(decision.allocation)
    assert ledger.device_usage(N("t4"))[0].usedmem == 10000


def test_sidecars_fit_beside_each_other_and_beside_later_init_containers() -> None:
    ledger = Ledger()
    t4_node(ledger, "t4", 1)
    # sidecar 6000, then a classic init of 9000 (15000 with the sidecar), then app 9000
    fits_init_not_app = pod("p", gpus(1, mem=11000), init=(gpus(1, mem=6000), gpus(1, mem=9000)),
                            sidecars=(0,))
    refused = run(ledger, fits_init_not_app, "t4")
    assert refused.outcome is Outcome.UNSCHEDULABLE and refused.verdicts[N("t4")].container == 2
    too_big_init = pod("q", gpus(1, mem=100), init=(gpus(1, mem=6000), gpus(1, mem=11000)),
                       sidecars=(0,))
    refused = run(ledger, too_big_init, "t4")
    assert refused.outcome is Outcome.UNSCHEDULABLE and refused.verdicts[N("t4")].container == 1
    # a classic init container before the sidecar runs alone
    init_first = pod("r", gpus(1, mem=6000), init=(gpus(1, mem=16000), gpus(1, mem=6000)),
                     sidecars=(1,))
    placed = run(ledger, init_first, "t4")
    assert placed.outcome is Outcome.SCHEDULED
    ledger.add_pod(placed.allocation)
    assert ledger.device_usage(N("t4"))[0].usedmem == 16000
    assert ledger.device_usage(N("t4"))[0].used == 2, "sidecar and app share the card"


def test_the_wire_format_lists_a_sidecar_among_the_init_containers() -> None:
    ledger = Ledger()
    t4_node(ledger, "t4", 2)
    decision = run(ledger, sidecar_pod(sidecar_mem=1000, app_mem=2000), "t4")
    value = written(decision)["hami.io/vgpu-devices-to-allocate"]
    first, second, *rest = value.split(";")
    assert first.endswith(",NVIDIA,1000,0:") and second.endswith(",NVIDIA,2000,0:")
    assert rest == [""]


def test_quota_counts_the_sidecar_and_the_app_container() -> None:
    ledger = Ledger()
    t4_node(ledger, "t4", 2)
    quotas = QuotaBook(NvidiaConfig())
    quotas.set_quota("q", "default", {"limits.nvidia.com/gpumem": "15000"})
    refused = run(ledger, sidecar_pod(sidecar_mem=8000, app_mem=8000), "t4", quotas=quotas)
    assert refused.failed_nodes == {"t4": "2/2 ResourceQuotaNotFit"}
    placed = run(ledger, sidecar_pod(sidecar_mem=7000, app_mem=8000), "t4", quotas=quotas)
    assert placed.outcome is Outcome.SCHEDULED
    ledger.add_pod(placed.allocation)
    assert ledger.namespace_usage("default") == (15000, 0)


def test_finished_init_containers_are_dropped_but_the_sidecar_stays() -> None:
    the_pod = pod("p", gpus(1, mem=1000), init=(gpus(1, mem=3000), gpus(1, mem=9000)),
                  sidecars=(0,))
    the_pod["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "t4",
        "hami.io/vgpu-devices-allocated":
            "GPU-a,NVIDIA,3000,0:;GPU-a,NVIDIA,9000,0:;GPU-a,NVIDIA,1000,0:;",
    }
    the_pod["status"] = {"initContainerStatuses": [
        {"name": "i0", "state": {"running": {}}},
        {"name": "i1", "state": {"terminated": {"exitCode": 0}}},
    ]}
    allocation = allocation_of(read_pod(the_pod))
    assert allocation is not None and allocation.init_finished
    assert allocation.sidecars == frozenset({0})
    ledger = Ledger()
    ledger.upsert_node(N("t4"), inventory(card("GPU-a", T4)))
    ledger.add_pod(allocation)
    assert ledger.device_usage(N("t4"))[0].usedmem == 4000, "sidecar 3000 + app 1000"
    the_pod["status"]["initContainerStatuses"][1]["state"] = {"running": {}}
    running = allocation_of(read_pod(the_pod))
    assert running is not None and not running.init_finished
    fresh = Ledger()
    fresh.upsert_node(N("t4"), inventory(card("GPU-a", T4)))
    fresh.add_pod(running)
    assert fresh.device_usage(N("t4"))[0].usedmem == 12000, "init 9000 beside sidecar 3000"


# ----- the peak, as a property -----------------------------------------------------------------

UUIDS = ("a", "b", "c")
entry = st.builds(lambda uuid, mem, cores: ContainerDevice(uuid, "NVIDIA", mem, cores),
                  st.sampled_from(UUIDS), st.integers(0, 5000), st.integers(0, 100))
pod_shape = st.integers(0, 4).flatmap(lambda init: st.tuples(
    st.just(init),
    # a container names a card once
    st.lists(st.lists(entry, max_size=2, unique_by=lambda d: d.uuid).map(tuple),
             min_size=init, max_size=init + 3),
    st.sets(st.integers(0, max(init - 1, 0)) if init else st.nothing()),
))


def _simulated_peak(containers: Any, init_count: int, sidecars: set[int]) -> dict[str, tuple]:
    """Run the pod as kubelet does, measuring every card whenever the running set changes."""
    peak: dict[str, list[int]] = {}

    def measure(running: list[int]) -> None:
        sums: dict[str, list[int]] = {}
        for position in running:
            for device in containers[position]:
                total = sums.setdefault(device.uuid, [0, 0, 0])
                total[0] += device.usedmem
                total[1] += device.usedcores
                total[2] += 1
        for uuid, (mem, cores, slots) in sums.items():
            top = peak.setdefault(uuid, [0, 0, 1])
            peak[uuid] = [max(top[0], mem), max(top[1], cores), max(top[2], slots)]

    running: list[int] = []
    for position in range(init_count):
        measure([*running, position])
        if position in sidecars:
            running.append(position)  # started, and it stays
    measure([*running, *range(init_count, len(containers))])
    return {uuid: tuple(values) for uuid, values in peak.items()}


@settings(max_examples=300, deadline=None)
@given(pod_shape)
def test_the_peak_is_the_largest_running_set(shape: tuple[int, Any, set[int]]) -> None:
    init_count, containers, sidecars = shape
    usage = collapse_init_usage(containers, init_count, "NVIDIA", sidecars)
    assert [d.uuid for d in usage] == sorted(d.uuid for d in usage)
    assert {d.uuid: (d.usedmem, d.usedcores, d.slots) for d in usage} == _simulated_peak(
        containers, init_count, sidecars)
    lasting = app_only_usage(containers, init_count, "NVIDIA", sidecars)
    by_uuid = {d.uuid: d for d in usage}
    for device in lasting:  # what stays is never more than the peak
        assert device.usedmem <= by_uuid[device.uuid].usedmem
        assert device.usedcores <= by_uuid[device.uuid].usedcores
    for position in sidecars:  # a sidecar always counts beside every app container
        for device in containers[position]:
            app = sum(d.usedmem for c in containers[init_count:] for d in c
                      if d.uuid == device.uuid)
            assert by_uuid[device.uuid].usedmem >= device.usedmem + app


@settings(max_examples=200, deadline=None)
@given(pod_shape)
def test_without_sidecars_the_peak_is_hamis_collapse(shape: tuple[int, Any, set[int]]) -> None:
    """HAMi `CollapseInitContainerUsage`: init containers' max against app containers' sum."""
    init_count, containers, _ = shape
    usage = {d.uuid: d for d in collapse_init_usage(containers, init_count, "NVIDIA")}
    for uuid in UUIDS:
        init = [d for c in containers[:init_count] for d in c if d.uuid == uuid]
        app = [d for c in containers[init_count:] for d in c if d.uuid == uuid]
        if not init and not app:
            assert uuid not in usage
            continue
        assert usage[uuid].usedmem == max(max((d.usedmem for d in init), default=0),
                                          sum(d.usedmem for d in app))
        assert usage[uuid].usedcores == max(max((d.usedcores for d in init), default=0),
                                            sum(d.usedcores for d in app))
