"""The client-side token bucket (client-go's --kube-qps / --kube-burst)."""

import asyncio

import pytest

from pyhami.kube import NODES, KubeClient, RateLimit, TokenBucket
from pyhami.testing import FakeKubeAPIServer


class StepClock:
    """Time moves only when someone sleeps; sleeps are recorded."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now_s

    def now(self):  # not used by the bucket
        raise AssertionError("the bucket reads only monotonic time")

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds
        await asyncio.sleep(0)


async def test_burst_then_paced_at_qps() -> None:
    clock = StepClock()
    bucket = TokenBucket(RateLimit(qps=5, burst=3), clock)
    for _ in range(3):
        await bucket.acquire()
    assert clock.sleeps == []  # the burst is free
    await bucket.acquire()
    await bucket.acquire()
    assert clock.sleeps == pytest.approx([0.2, 0.2])  # then one token every 1/qps


async def test_refill_is_capped_at_burst() -> None:
    clock = StepClock()
    bucket = TokenBucket(RateLimit(qps=10, burst=2), clock)
    clock.now_s = 100.0  # a long idle time buys only `burst` tokens
    for _ in range(3):
        await bucket.acquire()
    assert clock.sleeps == pytest.approx([0.1])


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        RateLimit(qps=0, burst=1)
    with pytest.raises(ValueError):
        RateLimit(qps=1, burst=0)


async def test_client_requests_go_through_the_bucket(apiserver: FakeKubeAPIServer) -> None:
    clock = StepClock()
    async with KubeClient(
        apiserver.configuration(), rate_limit=RateLimit(qps=2, burst=1), clock=clock
    ) as client:
        await client.create(NODES, {"metadata": {"name": "n1"}})
        await client.get_node("n1")
        await client.get_node("n1")
    assert clock.sleeps == pytest.approx([0.5, 0.5])
