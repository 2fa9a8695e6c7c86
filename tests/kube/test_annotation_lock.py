"""HAMi's node lock algorithm over an in-memory node with resourceVersions, and the client's
lock API over the fake API server."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pyhami.kube import (
    NODES,
    PODS,
    Conflict,
    KubeClient,
    NodeLockContentionError,
    NodeLocker,
    NodeLockError,
)
from pyhami.kube.annotation_lock import KubeNodeLockAPI, go_duration
from pyhami.model import PodView
from pyhami.protocol import KEY_NODE_LOCK, KEY_VGPU_NODE
from pyhami.testing import ManualClock
from pyhami.testing.memory_nodes import MemoryNodes

from .builders import pod

NOW = datetime(2026, 8, 21, 12, 0, 0, tzinfo=UTC)


def _old(**fields: Any) -> PodView:
    """Pod default/old, the lock's owner, with `fields`."""
    return PodView("default/old", "default", "old", **fields)


def _locker(api: MemoryNodes, now: datetime = NOW) -> NodeLocker:
    return NodeLocker(api, clock=ManualClock(now))


async def test_free_node_is_locked_with_owner_and_resource_version() -> None:
    api = MemoryNodes()
    await _locker(api).lock("n1", "default", "gpu-pod")
    assert api.lock == "2026-08-21T12:00:00Z,default,gpu-pod"
    assert api.patches == ["1"]


async def test_same_owner_is_reentrant_and_others_are_contention() -> None:
    api = MemoryNodes("2026-08-21T11:59:00Z,default,gpu-pod", pods={("default", "gpu-pod")})
    await _locker(api).lock("n1", "default", "gpu-pod")
    assert api.patches == []
    with pytest.raises(
        NodeLockContentionError, match="node n1 has been locked within 5m0s: node lock contention"
    ):
        await _locker(api).lock("n1", "default", "other")


async def test_expired_and_dangling_locks_are_taken_over() -> None:
    expired = MemoryNodes("2026-08-21T11:54:59Z,default,old", pods={("default", "old")})
    await _locker(expired).lock("n1", "default", "new")
    assert expired.lock == "2026-08-21T12:00:00Z,default,new"
    dangling = MemoryNodes("2026-08-21T11:59:59Z,default,gone")
    await _locker(dangling).lock("n1", "default", "new")
    assert dangling.lock == "2026-08-21T12:00:00Z,default,new"


@pytest.mark.parametrize(
    "owner",
    [
        pytest.param(_old(node_name="n2"), id="bound-elsewhere"),
        pytest.param(_old(annotations={KEY_VGPU_NODE: "n2"}), id="scheduled-elsewhere"),
        pytest.param(_old(phase="Succeeded"), id="finished"),
    ],
)
async def test_a_lock_whose_owner_cannot_use_the_node_any_more_is_taken_over(
    owner: PodView,
) -> None:
    """A scheduler killed between its lock and its binding leaves the lock; the pod, scheduled
    again, may land on another node: that lock must not hold this node for 5 minutes."""
    api = MemoryNodes("2026-08-21T11:59:59Z,default,old", placed=[owner])
    await _locker(api).lock("n1", "default", "new")
    assert api.lock == "2026-08-21T12:00:00Z,default,new"


@pytest.mark.parametrize(
    "owner",
    [
        pytest.param(_old(), id="pending"),
        pytest.param(_old(annotations={KEY_VGPU_NODE: "n1"}), id="scheduled-here"),
        pytest.param(_old(node_name="n1", phase="Pending"), id="bound-here"),
    ],
)
async def test_a_lock_whose_owner_may_still_be_allocated_here_is_contention(
    owner: PodView,
) -> None:
    api = MemoryNodes("2026-08-21T11:59:59Z,default,old", placed=[owner])
    with pytest.raises(NodeLockContentionError):
        await _locker(api).lock("n1", "default", "new")
    assert api.lock == "2026-08-21T11:59:59Z,default,old"


async def test_legacy_lock_is_contention_until_it_expires() -> None:
    api = MemoryNodes("2026-08-21T11:59:00Z")
    with pytest.raises(NodeLockContentionError):
        await _locker(api).lock("n1", "default", "p")
    await _locker(api, NOW + timedelta(minutes=6)).lock("n1", "default", "p")
    assert api.lock is not None and api.lock.endswith(",default,p")


async def test_malformed_lock_is_an_error_not_contention() -> None:
    api = MemoryNodes("a,b")
    with pytest.raises(NodeLockError) as caught:
        await _locker(api).lock("n1", "default", "p")
    assert not isinstance(caught.value, NodeLockContentionError)
    assert "n1" in str(caught.value)


async def test_conflicts_are_retried_and_exhaustion_is_reported() -> None:
    api = MemoryNodes()
    api.conflicts_left = 2
    await _locker(api).lock("n1", "default", "p")
    assert len(api.patches) == 3 and api.lock is not None
    down = MemoryNodes()
    down.fail_patch = True
    with pytest.raises(NodeLockError, match="failed to set node lock"):
        await _locker(down).lock("n1", "default", "p")
    assert len(down.patches) == 5


async def test_release_only_removes_our_own_lock() -> None:
    api = MemoryNodes("2026-08-21T11:59:00Z,default,owner")
    await _locker(api).release("n1", "default", "someone-else")
    assert api.lock is not None
    await _locker(api).release("n1", "default", "owner")
    assert api.lock is None
    await _locker(api).release("n1", "default", "owner")  # nothing to do


def test_go_duration_strings() -> None:
    assert go_duration(timedelta(minutes=5)) == "5m0s"
    assert go_duration(timedelta(seconds=28)) == "28s"
    assert go_duration(timedelta(hours=1)) == "1h0m0s"
    assert go_duration(timedelta(seconds=1.5)) == "1.5s"


async def test_the_clients_lock_api_writes_the_lock_with_the_nodes_resource_version(
    kube: KubeClient,
) -> None:
    await kube.create(NODES, {"metadata": {"name": "n1"}})
    await kube.create(PODS, pod("owner"), "default")
    api = KubeNodeLockAPI(kube)
    seen = await api.read_node("n1")
    await api.write_node_lock("n1", "2026-08-21T12:00:00Z,default,owner", seen.resource_version)
    with pytest.raises(Conflict):  # the node changed since `seen`
        await api.write_node_lock("n1", None, seen.resource_version)
    locked = await api.read_node("n1")
    assert locked.annotations[KEY_NODE_LOCK] == "2026-08-21T12:00:00Z,default,owner"
    assert (await api.read_pod("default", "owner")).name == "owner"
    await api.write_node_lock("n1", None, locked.resource_version)
    assert KEY_NODE_LOCK not in (await api.read_node("n1")).annotations
