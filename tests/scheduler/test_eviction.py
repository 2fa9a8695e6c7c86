"""The scheduler's own preemption (scheduler/eviction.py) on a real ClusterState and engine; only
the API calls are recorded by a stand-in that can refuse an eviction as the API server does."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import EngineConfig, Outcome, decide, plan_pod
from pyhami.kube import Resource, ServerError, TooManyRequests
from pyhami.kube.client import ObjectList
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeName
from pyhami.protocol import KEY_NVIDIA_ALLOCATED, KEY_VGPU_NODE
from pyhami.scheduler.events import EventRecorder
from pyhami.scheduler.eviction import LOWEST_PRIORITY_TTL, NOMINATION_MARGIN, EvictingPreemption
from pyhami.scheduler.explanations import PreemptionExplanation
from pyhami.scheduler.metrics import MetricsSnapshot, SchedulerMetrics
from pyhami.scheduler.ownership import registered_inventory
from pyhami.scheduler.state import ClusterState
from pyhami.testing import ManualClock

from .builders import card, gpu_pod
from .cluster import node_object

START = datetime(2026, 1, 1, tzinfo=UTC)


class Api:
    """Records evictions and status patches; refuses evicting the pods named in `refuse`."""

    def __init__(self, pdbs: list[dict[str, Any]] | None = None) -> None:
        self.pdbs = pdbs or []
        self.refuse: set[str] = set()
        self.fail: set[str] = set()
        self.evicted: list[str] = []
        self.status: list[tuple[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    async def list(self, resource: Resource, namespace: str | None = None) -> ObjectList:
        self.meanwhile()
        return ObjectList(self.pdbs, "1")

    def meanwhile(self) -> None:
        """What the informers deliver while the budgets are read (tests replace it)."""

    async def evict_pod(self, namespace: str, name: str, *, uid: str) -> None:
        if name in self.refuse:
            raise TooManyRequests(429, "TooManyRequests", "would violate the disruption budget")
        if name in self.fail:
            raise ServerError(500, "InternalError", "etcd timed out")
        self.evicted.append(name)

    async def patch_pod_status(self, namespace: str, name: str, body: Any) -> Any:
        self.status.append((name, body["status"]["nominatedNodeName"]))

    async def create_event(self, namespace: str, body: dict[str, Any]) -> Any:
        self.events.append(body)

    def reasons(self, reason: str) -> list[str]:
        return sorted(e["involvedObject"]["name"] for e in self.events if e["reason"] == reason)


class World:
    """n1: c0 low-a 8000 + low-b 7000, c1 low-c 3000 + top-e 3000 (15360 MiB cards)."""

    def __init__(self, pdbs: list[dict[str, Any]] | None = None) -> None:
        self.clock = ManualClock(START)
        self.state = ClusterState(EngineConfig(vendor=NvidiaVendor()), registered_inventory)
        self.state.on_node(
            read_node(node_object("n1", [card("c0", mem=15360), card("c1", 1, 15360)]))
        )
        for name, uuid, mem, priority in (
            ("low-a", "c0", 8000, 100),
            ("low-b", "c0", 7000, 100),
            ("low-c", "c1", 3000, 100),
            ("top-e", "c1", 3000, 9000),
        ):
            self.state.on_pod(read_pod(running(name, uuid, mem, priority)))
        self.api = Api(pdbs)
        events = EventRecorder(self.api.create_event, "test", self.clock)
        self.metrics = SchedulerMetrics(MetricsSnapshot)
        self.preemption = EvictingPreemption(
            self.state, self.api, events, self.metrics, clock=self.clock
        )
        self.events = events

    async def unschedulable(self, pod: dict[str, Any]) -> None:
        """What /filter does for the pod: release its own claim, decide, call the hook."""
        self.state.on_pod(read_pod(pod))
        self.state.release(pod["metadata"]["uid"])
        view = read_pod(pod)
        decision = decide(
            plan_pod(view, self.state.config),
            [NodeName("n1")],
            self.state.ledger,
            config=self.state.config,
            quotas=None,
        )
        assert decision.outcome is Outcome.UNSCHEDULABLE
        await self.preemption.on_unschedulable(view, decision)
        await self.events.drain()

    def attempts(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "pyhami_scheduler_preemption_attempts_total", {"path": "scheduler", "outcome": outcome}
        )
        return value or 0.0

    def usage(self) -> list[int]:
        return [c.usedmem for c in self.state.ledger.device_usage(NodeName("n1"))]


def running(name: str, uuid: str, mem: int, priority: int, **labels: str) -> dict[str, Any]:
    pod = gpu_pod(name, mem=mem)
    pod["metadata"]["annotations"] = {
        KEY_VGPU_NODE: "n1",
        KEY_NVIDIA_ALLOCATED: f"{uuid},NVIDIA,{mem},0:;",
    }
    pod["metadata"]["labels"] = labels or {"app": name}
    pod["spec"].update(nodeName="n1", priority=priority, terminationGracePeriodSeconds=5)
    pod["status"]["phase"] = "Running"
    return pod


def pending(name: str, mem: int, priority: int, **spec: Any) -> dict[str, Any]:
    pod = gpu_pod(name, mem=mem)
    pod["spec"].update(priority=priority, **spec)
    return pod


def budget(selector: Mapping[str, str], allowed: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "guard", "namespace": "default", "generation": 1},
        "spec": {"selector": {"matchLabels": dict(selector)}},
        "status": {"disruptionsAllowed": allowed, "observedGeneration": 1},
    }


async def test_the_two_victims_are_evicted_and_the_freed_card_is_held_for_the_pod() -> None:
    world = World()
    high = pending("high", 14000, 1000)
    await world.unschedulable(high)
    assert sorted(world.api.evicted) == ["low-a", "low-b"]
    assert world.api.status == [("high", "n1")]
    assert world.api.reasons("Preempted") == ["low-a", "low-b"]
    assert world.api.reasons("Preempting") == ["high"]
    assert world.usage() == [8000 + 7000 + 14000, 6000], "the claim is held while they go"
    assert world.attempts("evicted") == 1
    victims = world.metrics.registry.get_sample_value(
        "pyhami_scheduler_preemption_victims_total", {"path": "scheduler"}
    )
    assert victims == 2
    assert world.preemption.explanation("default/high") == PreemptionExplanation(
        "scheduler",
        "evicted",
        {NodeName("n1"): world.preemption.last["default/high"][NodeName("n1")].reason},
        NodeName("n1"),
        ("default/low-a", "default/low-b"),
    )

    # The pod's next filter while the victims terminate: the claim again, no second eviction.
    await world.unschedulable(high)
    assert sorted(world.api.evicted) == ["low-a", "low-b"]
    assert world.usage() == [29000, 6000]

    # The victims are gone; the pod is filtered onto the freed card (the claim was its own).
    for name in ("low-a", "low-b"):
        world.state.on_pod_deleted(read_pod(running(name, "c0", 0, 100)))
    assert world.usage() == [14000, 6000]
    world.state.release(high["metadata"]["uid"])
    decision = decide(
        plan_pod(read_pod(high), world.state.config),
        [NodeName("n1")],
        world.state.ledger,
        config=world.state.config,
        quotas=None,
    )
    assert decision.outcome is Outcome.SCHEDULED


async def test_the_nomination_lapses_after_the_grace_period_and_a_margin() -> None:
    world = World()
    high = pending("high", 14000, 1000)
    await world.unschedulable(high)
    high["status"]["nominatedNodeName"] = "n1"
    world.state.on_pod(read_pod(high))
    await world.preemption.expire(high["metadata"]["uid"])
    assert world.usage() == [15000, 6000], "the claim left the ledger"
    assert world.api.status[-1] == ("high", None)

    # Lapsed: the next filter may evict again (here, the same pods still running).
    world = World()
    await world.unschedulable(high)
    world.clock.advance((timedelta(seconds=5) + NOMINATION_MARGIN).total_seconds() + 1)
    await world.unschedulable(high)
    assert sorted(world.api.evicted) == ["low-a", "low-a", "low-b", "low-b"]


async def test_a_refused_eviction_stops_and_holds_nothing() -> None:
    world = World([budget({"app": "low-a"}, 1)])
    world.api.refuse = {"low-a"}  # the API server's view changed: 429
    high = pending("high", 14000, 1000)
    await world.unschedulable(high)
    assert world.api.evicted == [], "the covered victim goes first, so nothing is half done"
    assert world.usage() == [15000, 6000]
    assert world.api.status == []
    [event] = [e for e in world.api.events if e["reason"] == "PreemptionFailed"]
    assert "eviction of default/low-a was refused" in event["message"]
    assert "nothing evicted" in event["message"]
    failed = world.metrics.registry.get_sample_value(
        "pyhami_scheduler_preemption_evictions_failed_total", {"code": "429"}
    )
    assert failed == 1
    world.api.refuse = set()
    await world.unschedulable(high)  # retried on the next attempt
    assert sorted(world.api.evicted) == ["low-a", "low-b"]


async def test_a_budget_that_allows_no_disruption_blocks_the_only_way() -> None:
    world = World([budget({"app": "low-a"}, 0)])
    await world.unschedulable(pending("high", 14000, 1000))
    assert world.api.evicted == []
    assert world.usage() == [15000, 6000]
    assert world.attempts("blocked") == 1
    [event] = [e for e in world.api.events if e["reason"] == "PreemptionBlocked"]
    assert "default/low-a: default/guard" in event["message"]


async def test_pods_that_cannot_or_may_not_preempt_evict_nothing() -> None:
    world = World()
    await world.unschedulable(pending("huge", 20000, 1000))
    await world.unschedulable(pending("polite", 14000, 1000, preemptionPolicy="Never"))
    await world.unschedulable(pending("lowly", 14000, 100))  # no pod below it
    assert world.api.evicted == [] and world.api.status == []
    assert world.api.reasons("PreemptionNotHelpful") == ["huge"]
    assert world.usage() == [15000, 6000]


async def test_a_pod_whose_nominated_node_has_a_victim_terminating_waits_for_it() -> None:
    """kube-scheduler's /preempt nominated the pod and deletes its victim: nothing more."""
    world = World()
    going = running("low-c", "c1", 3000, 100)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    world.state.on_pod(read_pod(going))
    high = pending("high", 14000, 1000)
    high["status"]["nominatedNodeName"] = "n1"
    await world.unschedulable(high)
    assert world.api.evicted == [] and world.attempts("evicted") == 0


async def test_pods_that_arrive_while_the_budgets_are_read_are_judged_by_their_priority() -> None:
    world = World()

    def low_b_replaced_by_a_vip() -> None:
        world.state.on_pod_deleted(read_pod(running("low-b", "c0", 7000, 100)))
        world.state.on_pod(read_pod(running("vip", "c0", 7000, 5000)))

    world.api.meanwhile = low_b_replaced_by_a_vip  # type: ignore[method-assign]
    await world.unschedulable(pending("high", 14000, 1000))
    assert world.api.evicted == [], "the vip outranks the pod; low-a alone is not enough"
    assert world.api.reasons("PreemptionNotHelpful") == ["high"]


async def test_after_a_half_done_eviction_the_next_attempt_finishes_it() -> None:
    """low-a went, low-b's eviction failed: nothing is held; next time low-a (terminating, no
    budget asked) and low-b are the victims again, nothing else."""
    world = World()
    world.api.fail = {"low-b"}
    high = pending("high", 14000, 1000)
    await world.unschedulable(high)
    assert world.api.evicted == ["low-a"]
    assert world.attempts("eviction-refused") == 1
    assert world.usage() == [15000, 6000], "nothing held for the pod"
    going = running("low-a", "c0", 8000, 100)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    world.state.on_pod(read_pod(going))
    world.api.fail = set()
    world.api.pdbs = [budget({"app": "low-a"}, 0)]  # a terminating pod is not asked about
    await world.unschedulable(high)
    assert world.api.evicted == ["low-a", "low-a", "low-b"]
    assert world.attempts("evicted") == 1


async def test_the_lowest_priority_is_read_again_after_a_second() -> None:
    """A pod above no pod costs no pass over the pods for a second; then a newcomer counts."""
    world = World()
    await world.unschedulable(pending("mid", 14000, 100))  # no pod below 100
    # placed since (0 MiB beside low-a, b)
    world.state.on_pod(read_pod(running("tiny", "c0", 0, 10)))
    await world.unschedulable(pending("mid", 14000, 100))
    assert world.api.evicted == [], "seen within the second: not yet"
    world.clock.advance(LOWEST_PRIORITY_TTL.total_seconds())
    await world.unschedulable(pending("mid", 14000, 100))
    assert world.api.reasons("PreemptionNotHelpful") == ["mid"], "tiny alone frees nothing"
