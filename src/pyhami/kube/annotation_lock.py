"""HAMi's node lock (`hami.io/mutex.lock`), over any API that can GET and merge-PATCH a node.

The algorithm is HAMi's: the lock value names its owner pod, it expires after `timeout`, a
lock whose owner pod is gone is dangling and taken over, and every write carries the node's
resourceVersion so two writers cannot both win. The scheduler takes the lock (and releases it
only when its own bind fails); the device plugin releases it after Allocate, with the owner
check, so it never removes another pod's lock.

One difference: a lock is also dangling when its owner pod is finished, or bound to or
scheduled for another node. A scheduler killed between its lock and its binding leaves the
lock behind; once the pod, scheduled again, lands elsewhere, HAMi honours that lock for the
whole timeout (5 minutes by default) and binds nothing else to the node meanwhile.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from pyhami.kube.client import KubeClient
from pyhami.kube.clock import Clock
from pyhami.kube.errors import Conflict, NotFound
from pyhami.kube.patches import node_lock_patch
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeView, PodView
from pyhami.protocol import (
    KEY_NODE_LOCK,
    KEY_VGPU_NODE,
    NodeLock,
    ProtocolError,
    format_node_lock,
    is_expired,
    owner_suffix,
    parse_node_lock,
)

# HAMi's retry strategy for lock writes: 5 steps, 100 ms, factor 2, jitter 0.5.
RETRY_STEPS = 5
RETRY_FIRST_DELAY = 0.1
RETRY_FACTOR = 2.0
RETRY_JITTER = 0.5
FINISHED_PHASES = ("Succeeded", "Failed")


class NodeLockAPI(Protocol):
    """What the lock needs from the Kubernetes API: the node and pods as views, and the write."""

    async def read_node(self, name: str) -> NodeView: ...

    async def write_node_lock(self, name: str, value: str | None, resource_version: str) -> None:
        """Set the lock (None: remove it); raises Conflict when `resource_version` is stale."""
        ...

    async def read_pod(self, namespace: str, name: str) -> PodView:
        """Raises `pyhami.kube.NotFound` when the pod does not exist."""
        ...


@dataclass(frozen=True, slots=True)
class KubeNodeLockAPI:
    """The lock's API over a Kubernetes client: each object read once into its view, each
    write a merge patch carrying the resourceVersion (`pyhami.kube.patches`)."""

    client: KubeClient

    async def read_node(self, name: str) -> NodeView:
        return read_node(await self.client.get_node(name))

    async def write_node_lock(self, name: str, value: str | None, resource_version: str) -> None:
        await self.client.patch_node(name, node_lock_patch(value, resource_version))

    async def read_pod(self, namespace: str, name: str) -> PodView:
        return read_pod(await self.client.get_pod(namespace, name))


class NodeLockError(RuntimeError):
    """The lock could not be taken or released."""


class NodeLockContentionError(NodeLockError):
    """Another pod holds the lock; the caller may retry later."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}: node lock contention")


def go_duration(delta: timedelta) -> str:
    """Go's `time.Duration.String()` for whole-second-ish values: `5m0s`, `28s`, `1h0m0s`."""
    total = delta.total_seconds()
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    secs = f"{seconds:g}s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{secs}"
    if minutes:
        return f"{int(minutes)}m{secs}"
    return secs


class NodeLocker:
    """Takes and releases `hami.io/mutex.lock` for one pod at a time."""

    def __init__(
        self,
        api: NodeLockAPI,
        *,
        timeout: timedelta = timedelta(minutes=5),
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        self.api = api
        self.timeout = timeout
        self._clock = clock
        self._rng = rng or random.Random()

    def _delays(self) -> Iterator[float]:
        delay = RETRY_FIRST_DELAY
        for _ in range(RETRY_STEPS - 1):
            yield delay * (1 + RETRY_JITTER * self._rng.random())
            delay *= RETRY_FACTOR

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[None]]) -> None:
        """Run `attempt` up to RETRY_STEPS times; contention is final, other errors retry."""
        delays = self._delays()
        while True:
            try:
                await attempt()
                return
            except NodeLockContentionError:
                raise
            except Exception as err:
                delay = next(delays, None)
                if delay is None:
                    raise NodeLockError(
                        f"failed to {what} (retry strategy={RETRY_STEPS} steps from "
                        f"{RETRY_FIRST_DELAY}s x{RETRY_FACTOR:g}): {err}"
                    ) from err
                await self._clock.sleep(delay)

    async def lock(
        self, node: str, namespace: str, pod: str, *, cached: NodeView | None = None
    ) -> None:
        """LockNode: take the lock for namespace/pod, taking over expired or dangling locks.

        `cached` is the node as an informer last saw it: when it shows no lock, the lock is
        written at once with its resourceVersion, and the node is read only if that write
        answers 409 (the cache was stale)."""
        if cached is not None and KEY_NODE_LOCK not in cached.annotations:
            value = format_node_lock(self._clock.now(), namespace, pod)
            try:
                await self.api.write_node_lock(node, value, cached.resource_version)
                return
            except Conflict:
                pass
        seen = await self.api.read_node(node)
        current = seen.annotations.get(KEY_NODE_LOCK)
        if current is None:
            await self._set(node, namespace, pod, seen)
            return
        try:
            held: NodeLock = parse_node_lock(current)
        except ProtocolError as err:
            raise NodeLockError(f"node {node}: {err}") from err
        if is_expired(held, self._clock.now(), self.timeout):
            await self.release(node, namespace, pod, skip_owner_check=True)
            await self._set(node, namespace, pod)
            return
        if held.namespace == namespace and held.name == pod and held.name:
            return
        if held.name and not await self._owner_may_still_use(node, held.namespace, held.name):
            await self.release(node, namespace, pod, skip_owner_check=True)
            await self._set(node, namespace, pod)
            return
        raise NodeLockContentionError(
            f"node {node} has been locked within {go_duration(self.timeout)}"
        )

    async def _owner_may_still_use(self, node: str, namespace: str, name: str) -> bool:
        """Whether the lock's owner pod may still be allocated on `node`. A lock is dangling
        when its pod is gone or finished, and also when the pod is bound to, or scheduled for,
        another node: a scheduler killed between its lock and its binding leaves the lock
        behind, and the pod, scheduled again, may land elsewhere."""
        try:
            owner = await self.api.read_pod(namespace, name)
        except NotFound:
            return False
        if owner.phase in FINISHED_PHASES:
            return False
        places = (owner.node_name, owner.annotations.get(KEY_VGPU_NODE))
        return all(place in (None, "", node) for place in places)

    async def _set(self, node: str, namespace: str, pod: str, seen: NodeView | None = None) -> None:
        """SetNodeLock. HAMi GETs the node twice more before its first PATCH; a node just read
        unlocked (`seen`) is written at once instead: its resourceVersion in the patch refuses
        the write if anyone changed the node since, and the retry then reads it afresh."""
        suffix = owner_suffix(namespace, pod)
        first = [seen] if seen is not None else []

        async def attempt() -> None:
            fresh = first.pop() if first else await self.api.read_node(node)
            value = fresh.annotations.get(KEY_NODE_LOCK)
            if value is not None:
                if value.endswith(suffix):
                    return  # our earlier write landed but its answer was lost
                raise NodeLockContentionError(f"node {node} is locked")
            mine = format_node_lock(self._clock.now(), namespace, pod)
            await self.api.write_node_lock(node, mine, fresh.resource_version)

        await self._retrying(f"set node lock (node={node})", attempt)

    async def release(
        self, node: str, namespace: str, pod: str, *, skip_owner_check: bool = False
    ) -> None:
        """ReleaseNodeLock: remove the lock if it is ours (or, skipping the check, unchanged)."""
        seen = (await self.api.read_node(node)).annotations.get(KEY_NODE_LOCK)
        if seen is None:
            return
        suffix = owner_suffix(namespace, pod)
        if not skip_owner_check and "," in seen and not seen.endswith(suffix):
            return

        async def attempt() -> None:
            fresh = await self.api.read_node(node)
            value = fresh.annotations.get(KEY_NODE_LOCK)
            if value is None:
                return
            if skip_owner_check or "," not in value:
                if value != seen:
                    return
            elif not value.endswith(suffix):
                return
            await self.api.write_node_lock(node, None, fresh.resource_version)

        await self._retrying(f"release node lock (node={node})", attempt)
