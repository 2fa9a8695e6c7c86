"""The pod being bound to this node, and the end of its bind: bind-phase and the node lock.

Finding the pod is HAMi's (the node lock's owner, else a scan of the node's pods) with one fix
(docs/hami-compatibility.md, "Stale lock owner"): a lock owner is used only if it really is a pod
being bound here (its `hami.io/vgpu-node` is this node, bind-phase `allocating`/`success`, not being
deleted); a stale owner falls through to the scan instead of handing out another pod's devices. The
scan takes the oldest bind first. Releasing the lock is HAMi's `ReleaseNodeLock` (only if this pod
still owns it), by `pyhami.kube.NodeLocker`.

A bind-phase that cannot be written (the API server or an admission webhook is down) is not
left behind: it is written again in the background, with backoff, until it lands or the pod is
gone; the node lock is released at once either way. HAMi logs the failure and leaves the pod
`allocating`.
"""

import asyncio
import logging
import random

from pyhami.deviceplugin.allocation import AllocationError
from pyhami.kube import (
    Clock,
    KubeClient,
    KubeError,
    NodeLocker,
    NodeLockError,
    NotFound,
    SystemClock,
)
from pyhami.kube.annotation_lock import KubeNodeLockAPI
from pyhami.kube.patches import pod_annotations_patch
from pyhami.kube.tasks import cancel_and_wait, guarded_task
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeSpecError, PodSpecError, PodView
from pyhami.protocol import (
    KEY_BIND_PHASE,
    KEY_BIND_TIME,
    KEY_NODE_LOCK,
    KEY_NVIDIA_TO_ALLOCATE,
    KEY_VGPU_NODE,
    BindPhase,
    ProtocolError,
    decode_pod_single_device,
    parse_node_lock,
)

log = logging.getLogger(__name__)

_BINDING_PHASES = frozenset({BindPhase.ALLOCATING.value, BindPhase.SUCCESS.value})
# Backoff between attempts to write a bind-phase that failed: from 0.5 s doubling to 30 s.
REPAIR_FIRST_DELAY_S = 0.5
REPAIR_MAX_DELAY_S = 30.0


def _is_binding_here(pod: PodView, node: str) -> bool:
    notes = pod.annotations
    return (
        notes.get(KEY_VGPU_NODE) == node
        and notes.get(KEY_BIND_PHASE) in _BINDING_PHASES
        and KEY_BIND_TIME in notes
        and not pod.deleting
        and pod.phase in ("", "Pending")
    )


def _served(pod: PodView) -> bool:
    """Every container already got its devices (a readable, all-empty to-allocate value)."""
    value = pod.annotations.get(KEY_NVIDIA_TO_ALLOCATE)
    if value is None:
        return False
    try:
        return not any(decode_pod_single_device(value))
    except ProtocolError:
        return False  # not served: Allocate will report the malformed value


def _bind_time(pod: PodView) -> int:
    try:
        return int(pod.annotations.get(KEY_BIND_TIME, ""))
    except ValueError:
        return 0


class PodBinding:
    """Pending-pod lookup and bind completion for one node."""

    def __init__(
        self,
        kube: KubeClient,
        node_name: str,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._kube = kube
        self._node = node_name
        self._clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._repairs: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._locker = NodeLocker(KubeNodeLockAPI(kube), clock=self._clock, rng=rng)

    async def pending_pod(self) -> PodView:
        """The pod kubelet is admitting now; AllocationError says why none can be found."""
        try:
            node = read_node(await self._kube.get_node(self._node))
        except (KubeError, NodeSpecError) as error:
            raise AllocationError(f"cannot read node {self._node}: {error}") from error
        lock = node.annotations.get(KEY_NODE_LOCK)
        owner = await self._lock_owner(lock) if lock else None
        return owner if owner is not None else await self._scan()

    async def _lock_owner(self, lock: str) -> PodView | None:
        try:
            held = parse_node_lock(lock)
        except ProtocolError as error:
            raise AllocationError(
                f"node {self._node} has a malformed {KEY_NODE_LOCK} ({error}); if no pod is being "
                f"bound, remove it: kubectl annotate node {self._node} {KEY_NODE_LOCK}-"
            ) from error
        if not held.name:
            return None  # legacy lock without an owner: HAMi scans too
        try:
            pod = read_pod(await self._kube.get_pod(held.namespace, held.name))
        except (KubeError, PodSpecError) as error:
            log.warning(
                "node lock owner %s/%s cannot be read (%s); scanning pods on %s",
                held.namespace,
                held.name,
                error,
                self._node,
            )
            return None
        if not _is_binding_here(pod, self._node) or _served(pod):
            log.warning(
                "node lock owner %s is not being bound to %s (or is served); scanning instead",
                pod.ref,
                self._node,
            )
            return None
        return pod

    async def _scan(self) -> PodView:
        try:
            listed = await self._kube.list_pods(field_selector=f"spec.nodeName={self._node}")
        except KubeError as error:
            raise AllocationError(f"cannot list pods on node {self._node}: {error}") from error
        pods = []
        for item in listed.items:
            try:
                pods.append(read_pod(item))
            except PodSpecError as error:
                log.warning("pod on %s left out of the scan: %s", self._node, error)
        # Pods whose containers were all served (bind-phase success, still Pending while they
        # start) are not candidates; HAMi could pick one of them and fail it.
        binding = sorted(
            (p for p in pods if _is_binding_here(p, self._node) and not _served(p)),
            key=lambda pod: (_bind_time(pod), pod.ref),
        )
        if not binding:
            raise AllocationError(
                f"no binding pod found on node {self._node}: no pod here has "
                f"{KEY_BIND_PHASE}=allocating. Was the pod scheduled by pyhami's scheduler? Pods "
                "that ask for nvidia.com/gpu must use its schedulerName (the webhook sets it)"
            )
        return binding[0]

    async def finish(self, pod: PodView, phase: BindPhase) -> None:
        """Mark the pod's bind-phase and release the node lock (errors are logged, not raised;
        a bind-phase that cannot be written now is written again in the background)."""
        namespace, name = pod.namespace, pod.name
        try:
            await self._write_phase(namespace, name, phase)
        except KubeError as error:
            log.error(
                "cannot set %s=%s on %s: %s; retrying in the background",
                KEY_BIND_PHASE,
                phase.value,
                pod.ref,
                error,
            )
            self._start_repair(namespace, name, phase)
        try:
            # HAMi's ReleaseNodeLock with the owner check: never removes another pod's lock.
            await self._locker.release(self._node, namespace, name)
        except (KubeError, NodeLockError) as error:
            log.error("cannot release the node lock of %s on %s: %s", pod.ref, self._node, error)

    async def _write_phase(self, namespace: str, name: str, phase: BindPhase) -> None:
        await self._kube.patch_pod(
            namespace, name, pod_annotations_patch({KEY_BIND_PHASE: phase.value})
        )

    def _start_repair(self, namespace: str, name: str, phase: BindPhase) -> None:
        key = (namespace, name)
        earlier = self._repairs.get(key)
        if earlier is not None:
            earlier.cancel()  # the newer phase wins
        task = guarded_task(
            self._repair(namespace, name, phase), f"bind-phase {namespace}/{name}", may_finish=True
        )
        self._repairs[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))

    def _forget(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self._repairs.get(key) is task:
            del self._repairs[key]

    async def _repair(self, namespace: str, name: str, phase: BindPhase) -> None:
        """Write `phase` until it lands or the pod is gone, backing off with jitter."""
        delay = REPAIR_FIRST_DELAY_S
        while True:
            await self._clock.sleep(delay * (0.5 + self._rng.random() / 2))
            try:
                await self._write_phase(namespace, name, phase)
            except NotFound:
                log.info("pod %s/%s is gone; its bind-phase needs no repair", namespace, name)
                return
            except KubeError as error:
                log.warning("bind-phase of %s/%s still not written: %s", namespace, name, error)
                delay = min(delay * 2, REPAIR_MAX_DELAY_S)
                continue
            log.info("bind-phase of %s/%s written after an earlier failure", namespace, name)
            return

    async def close(self) -> None:
        """Stop the background repairs (a restarted plugin does not know about them)."""
        await cancel_and_wait(*self._repairs.values())
