"""The extender in a mixed cluster: DRA nodes (label gpu.pyhami.io/mode=dra) are never given to a
HAMi-style pod and are left to kube-scheduler for its own pods; without DRA nodes nothing
changes."""

from typing import Any

from pyhami.kube import Conflict, JsonObject
from pyhami.kube.extender_wire import (
    ClaimedPod,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
)
from pyhami.kube.views import read_node
from pyhami.scheduler.dra_nodes import (
    DEVICE_PLUGIN_NODE_REASON,
    DRA_NODE_REASON,
    DraAwareExtender,
)
from pyhami.scheduler.explanations import PodRef
from pyhami.scheduler.state import is_dra_node

NODES = {
    "dp-1": read_node({"metadata": {"name": "dp-1", "labels": {"gpu": "on"}}}),
    "dp-2": read_node({"metadata": {"name": "dp-2", "labels": {"gpu": "on"}}}),
    "dra-1": read_node({"metadata": {"name": "dra-1", "labels": {"gpu.pyhami.io/mode": "dra"}}}),
}
DRA_NODES = {name for name, node in NODES.items() if is_dra_node(node)}


class Inner:
    """The extender underneath: fits every node it is asked about but dp-2."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []
        self.bound: list[str] = []

    async def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        names = args.node_names or ()
        self.asked.append(names)
        fit = [n for n in names if n != "dp-2"]
        return ExtenderFilterResult(
            node_names=fit[:1], failed_nodes={n: "no room" for n in names if n == "dp-2"}
        )

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        self.bound.append(args.pod_name)
        return ExtenderBindingResult()

    def explain(self, pod: PodRef) -> JsonObject | None:
        return None

    def readiness(self) -> tuple[bool, str]:
        return True, ""


class Kube:
    def __init__(self, fail: bool = False) -> None:
        self.bindings: list[tuple[str, str, str, str | None]] = []
        self.fail = fail

    async def bind_pod(
        self, namespace: str, name: str, node: str, *, uid: str | None = None
    ) -> Any:
        if self.fail:
            raise Conflict(409, "Conflict", "pod p is already bound")
        self.bindings.append((namespace, name, node, uid))


def pod(scheduler: str, uid: str = "u1") -> ClaimedPod:
    return ClaimedPod("ns", "p", uid, scheduler)


def extender(inner: Inner, kube: Kube | None = None) -> DraAwareExtender:
    return DraAwareExtender(inner, DRA_NODES, kube or Kube(), scheduler_name="hami-scheduler")


async def test_a_hami_style_pod_is_decided_on_device_plugin_nodes_only() -> None:
    inner = Inner()
    args = ExtenderArgs(pod("hami-scheduler"), node_names=("dp-1", "dp-2", "dra-1"))
    result = await extender(inner).filter(args)
    assert inner.asked == [("dp-1", "dp-2")]
    assert result.node_names == ["dp-1"]
    assert result.failed_nodes == {"dp-2": "no room", "dra-1": DRA_NODE_REASON}

    only_dra = await extender(inner).filter(
        ExtenderArgs(pod("hami-scheduler"), node_names=("dra-1",))
    )
    assert only_dra.node_names == [] and only_dra.failed_nodes == {"dra-1": DRA_NODE_REASON}


async def test_kube_schedulers_own_pod_passes_on_dra_nodes_and_binds_plainly() -> None:
    inner, kube = Inner(), Kube()
    wrapped = extender(inner, kube)
    args = ExtenderArgs(pod("default-scheduler"), node_names=("dp-1", "dra-1"))
    result = await wrapped.filter(args)
    assert inner.asked == []  # no ledger decision, no reservation
    assert result.node_names == ["dra-1"]
    assert result.failed_nodes == {"dp-1": DEVICE_PLUGIN_NODE_REASON}

    # a bind to a device-plugin node, or naming another pod, is refused
    refused = await wrapped.bind(ExtenderBindingArgs("p", "ns", "u1", "dp-1"))
    assert "not a DRA node" in refused.error
    forged = await wrapped.bind(ExtenderBindingArgs("q", "ns", "u1", "dra-1"))
    assert "is not ns/q" in forged.error
    bound = await wrapped.bind(ExtenderBindingArgs("p", "ns", "u1", "dra-1"))
    assert bound.error == ""
    assert kube.bindings == [("ns", "p", "dra-1", "u1")]
    assert inner.bound == []
    # once bound, the uid is the inner extender's again
    await wrapped.bind(ExtenderBindingArgs("p", "ns", "u1", "dp-1"))
    assert inner.bound == ["p"]


async def test_a_failed_binding_is_the_answer() -> None:
    wrapped = extender(Inner(), Kube(fail=True))
    await wrapped.filter(ExtenderArgs(pod("default-scheduler"), node_names=("dra-1",)))
    result = await wrapped.bind(ExtenderBindingArgs("p", "ns", "u1", "dra-1"))
    assert "already bound" in result.error


async def test_without_dra_nodes_every_pod_is_the_inner_extenders() -> None:
    inner = Inner()
    for scheduler in ("hami-scheduler", "default-scheduler"):
        args = ExtenderArgs(pod(scheduler), node_names=("dp-1", "dp-2"))
        result = await extender(inner).filter(args)
        assert result.node_names == ["dp-1"]
    assert inner.asked == [("dp-1", "dp-2"), ("dp-1", "dp-2")]
