"""Reading raw pods: pending plans and recorded allocations."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import (
    EngineConfig,
    Ledger,
    Outcome,
    PodSpecError,
    allocation_of,
    decide,
    plan_pod,
)
from pyhami.kube.views import read_pod
from pyhami.model import ContainerDevice, MigAllocation, MigPlacement

from .builders import N, card, gpus, inventory, pod

ENGINE_CONFIG = EngineConfig(vendor=NvidiaVendor())


def scheduled(annotations: dict[str, str], **extra: Any) -> dict[str, Any]:
    the_pod = pod("p", gpus(1), init=(gpus(1),), annotations=annotations)
    the_pod.update(extra)
    return the_pod


RECORDED = {
    "hami.io/vgpu-node": "node1",
    "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;GPU-a,NVIDIA,500,5:;",
}


def test_allocation_is_read_from_the_allocated_annotation() -> None:
    allocation = allocation_of(read_pod(scheduled(RECORDED)))
    assert allocation is not None
    assert allocation.key == "uid-p" and allocation.node == "node1" and allocation.init_count == 1
    assert allocation.containers == (
        (ContainerDevice("GPU-a", "NVIDIA", 1000, 10),),
        (ContainerDevice("GPU-a", "NVIDIA", 500, 5),),
        (),  # HAMi's trailing empty segment
    )
    assert not allocation.init_finished


def test_finished_init_containers_shrink_the_allocation() -> None:
    status = {"initContainerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}
    allocation = allocation_of(read_pod(scheduled(RECORDED, status=status)))
    assert allocation is not None and allocation.init_finished
    failed = {"initContainerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]}
    finished = allocation_of(read_pod(scheduled(RECORDED, status=failed)))
    assert finished is not None and not finished.init_finished


@pytest.mark.parametrize(
    "annotations, extra",
    [
        ({"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1,1:;"}, {}),  # no node recorded
        ({"hami.io/vgpu-node": "node1"}, {}),  # nothing allocated
        (RECORDED, {"status": {"phase": "Succeeded"}}),
        (RECORDED, {"status": {"phase": "Failed"}}),
    ],
)
def test_pods_that_hold_nothing(annotations: dict[str, str], extra: dict[str, Any]) -> None:
    assert allocation_of(read_pod(scheduled(annotations, **extra))) is None


def test_mig_reservations_are_read_and_invalid_ones_ignored() -> None:
    mig = ('[{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.10gb",'
           '"placement":{"start":6,"size":1}}]')
    recorded = scheduled({**RECORDED, "hami.io/vgpu-mig-allocations": mig})
    allocation = allocation_of(read_pod(recorded))
    assert allocation is not None
    assert allocation.mig_allocations == (
        MigAllocation(1, 0, "GPU-a", "1g.10gb", MigPlacement(6, 1)),)
    broken = allocation_of(read_pod(scheduled({**RECORDED, "hami.io/vgpu-mig-allocations": "[{"})))
    assert broken is not None and broken.mig_allocations == ()


def test_malformed_allocation_names_the_pod_and_key() -> None:
    bad = {**RECORDED, "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,lots,1:;"}
    with pytest.raises(PodSpecError, match=r"default/p: hami\.io/vgpu-devices-allocated"):
        allocation_of(read_pod(scheduled(bad)))


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"metadata": {}}, "no metadata.name"),
        ({"metadata": {"name": "x", "annotations": {"a": 1}}}, "annotation 'a' must be a string"),
        ({"metadata": {"name": "x"}, "spec": {"containers": {}}}, "spec.containers"),
        ({"metadata": {"name": "x"}, "spec": []}, "spec must be an object"),
    ],
)
def test_unreadable_pods(bad: dict[str, Any], match: str) -> None:
    with pytest.raises(PodSpecError, match=match):
        plan_pod(read_pod(bad), ENGINE_CONFIG)


def test_plan_reads_policies_and_requests_init_first() -> None:
    plan = plan_pod(read_pod(pod("p", {}, gpus(2, mem=100), init=(gpus(1),),
                        annotations={"hami.io/gpu-scheduler-policy": "binpack"})), ENGINE_CONFIG)
    assert plan.init_count == 1 and plan.gpu_policy == "binpack" and plan.node_policy == "binpack"
    assert [r.nums if r else 0 for r in plan.requests] == [1, 0, 2]


json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=3),
    max_leaves=12,
)
pod_like = st.fixed_dictionaries({
    "metadata": st.one_of(json_value, st.fixed_dictionaries(
        {"name": st.text(min_size=1, max_size=5)},
        optional={"annotations": st.dictionaries(st.text(max_size=30), json_value, max_size=3)})),
    "spec": st.one_of(json_value, st.fixed_dictionaries({}, optional={
        "containers": st.lists(st.fixed_dictionaries({"name": st.text(max_size=3)}, optional={
            "resources": st.dictionaries(st.sampled_from(["limits", "requests"]),
                                         st.one_of(json_value, st.dictionaries(
                                             st.sampled_from(["nvidia.com/gpu",
                                                              "nvidia.com/gpumem"]),
                                             json_value | st.sampled_from(["1", "2Gi", "x"]))))
        }), max_size=2),
        "initContainers": json_value,
    })),
})


@settings(max_examples=150, deadline=None)
@given(pod_like)
def test_decide_never_crashes_on_a_malformed_pod(the_pod: dict[str, Any]) -> None:
    ledger = Ledger()
    ledger.upsert_node(N("node1"), inventory(card("g0")))
    try:
        plan = plan_pod(read_pod(the_pod), ENGINE_CONFIG)
    except PodSpecError as err:
        assert str(err)  # refused at the edge, or by the plan, with a reason
        return
    decision = decide(plan, [N("node1")], ledger, config=ENGINE_CONFIG, quotas=None)
    assert decision.outcome in set(Outcome)
    if decision.outcome is Outcome.ERROR:
        assert decision.error
