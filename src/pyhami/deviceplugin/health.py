"""GPU health from NVML XID events, with recovery (HAMi never recovers).

A card becomes unhealthy on a fatal XID, when its events cannot be watched, or when the event
wait itself fails. It becomes healthy again once it has been quiet for `recovery_after` seconds
and an NVML probe of it succeeds; `recovery_after=None` keeps HAMi's never-recover behaviour.
Cards whose events cannot be watched at all stay unhealthy until the plugin restarts.
"""

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field

from pyhami.deviceplugin.inventory import Gpu
from pyhami.kube import Clock, SystemClock
from pyhami.kube.tasks import unless_stopped
from pyhami.nvml import Nvml, NvmlError, NvmlNotSupportedError, XidEvent, XidWatch

log = logging.getLogger(__name__)

# Application-caused XIDs that say nothing about the card (NVIDIA device plugin's list).
IGNORED_APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def _xid_list(text: str) -> tuple[bool, frozenset[int]]:
    """(`all` given, the integers) from a comma list; blanks and non-integers are ignored."""
    lowered = text.lower()
    numbers = {int(part) for part in lowered.split(",") if part.strip().isdigit()}
    return "all" in lowered or "xids" in lowered, frozenset(numbers)


@dataclass(frozen=True, slots=True)
class XidPolicy:
    """Which XIDs mark a card unhealthy (`DP_DISABLE_HEALTHCHECKS` / `DP_ENABLE_HEALTHCHECKS`)."""

    disabled_all: bool = False
    disabled: frozenset[int] = frozenset()
    enabled_all: bool = False
    enabled: frozenset[int] = frozenset()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "XidPolicy":
        """From `DP_DISABLE_HEALTHCHECKS` and `DP_ENABLE_HEALTHCHECKS`, as NVIDIA's plugin."""
        disabled_all, disabled = _xid_list(environ.get("DP_DISABLE_HEALTHCHECKS", ""))
        enabled_all, enabled = _xid_list(environ.get("DP_ENABLE_HEALTHCHECKS", ""))
        return cls(disabled_all, disabled, enabled_all, enabled)

    @property
    def active(self) -> bool:
        return not self.disabled_all or self.enabled_all or bool(self.enabled)

    def is_fatal(self, xid: int) -> bool:
        if self.enabled_all or xid in self.enabled:
            return True
        if self.disabled_all:
            return False
        return xid not in self.disabled and xid not in IGNORED_APPLICATION_XIDS


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """Which XIDs count, how long a card must be quiet to recover (None: never, as HAMi), and
    how long one NVML event wait lasts."""

    policy: XidPolicy = field(default_factory=XidPolicy)
    recovery_after: float | None = 300.0
    wait_ms: int = 1000


@dataclass(frozen=True, slots=True)
class Trouble:
    """Why a card is unhealthy, and since when (monotonic seconds)."""

    reason: str
    last_seen: float
    permanent: bool = False


class HealthBoard:
    """Health of every served card; ListAndWatch and the registration scan read it.

    Used from the event loop only; `version` counts the changes, each of which wakes every
    waiter.
    """

    def __init__(self, uuids: Iterable[str] = ()) -> None:
        self._known = set(uuids)
        self._trouble: dict[str, Trouble] = {}
        self.version = 0
        self._changed = asyncio.Event()

    def track(self, uuids: Iterable[str]) -> None:
        """Also follow these cards (the board outlives plugin restarts; health is kept)."""
        self._known.update(uuids)

    def healthy(self, uuid: str) -> bool:
        return uuid not in self._trouble

    def trouble(self, uuid: str) -> Trouble | None:
        return self._trouble.get(uuid)

    def mark(self, uuid: str, reason: str, now: float, *, permanent: bool = False) -> None:
        if uuid not in self._known:
            return
        previous = self._trouble.get(uuid)
        self._trouble[uuid] = Trouble(
            reason, now, permanent or bool(previous and previous.permanent)
        )
        if previous is None:
            log.warning("GPU %s is now unhealthy: %s", uuid, reason)
            self._bump()

    def recover(self, uuid: str) -> None:
        if self._trouble.pop(uuid, None) is not None:
            log.info("GPU %s is healthy again", uuid)
            self._bump()

    def quiet_since(self, cutoff: float) -> list[str]:
        """Unhealthy, recoverable cards with no trouble after `cutoff`."""
        return [
            uuid
            for uuid, trouble in sorted(self._trouble.items())
            if not trouble.permanent and trouble.last_seen <= cutoff
        ]

    def listing_changed(self) -> None:
        """Something else kubelet's device list is made of changed (a MIG card's instance
        count): wake ListAndWatch to send the list again, as a health change does."""
        self._bump()

    async def wait_for_change(self, seen_version: int) -> None:
        while self.version == seen_version:
            await self._changed.wait()

    async def until_change(
        self, seen_version: int, stop: asyncio.Event, timeout: float | None = None
    ) -> None:
        """Wait for a change since `seen_version`, for `stop`, or `timeout` seconds."""
        await unless_stopped(self.wait_for_change(seen_version), stop, timeout)

    def _bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()


def _probe(nvml: Nvml, gpu: Gpu) -> bool:
    """Does NVML answer sanely for this card again?"""
    try:
        if nvml.device_uuid(gpu.index) != gpu.uuid:
            return False
        nvml.device_memory(gpu.index)
    except NvmlNotSupportedError:
        return True
    except NvmlError:
        return False
    return True


@dataclass(eq=False)
class HealthWatcher:
    """Feeds a HealthBoard from NVML XID events; run `run(stop)` as a task."""

    nvml: Nvml
    gpus: tuple[Gpu, ...]
    board: HealthBoard
    settings: HealthSettings
    _: KW_ONLY
    clock: Clock = field(default_factory=SystemClock)

    def __post_init__(self) -> None:
        self._by_uuid = {gpu.uuid: gpu for gpu in self.gpus}

    async def run(self, stop: asyncio.Event) -> None:
        if not self.settings.policy.active:
            log.info("XID health checks disabled by DP_DISABLE_HEALTHCHECKS")
            return
        watch = await self._open_watch(stop)
        if watch is None:
            return
        waiting: asyncio.Future[XidEvent | None] | None = None
        try:
            while not stop.is_set():
                # Shielded: a cancelled to_thread leaves its thread blocked in the NVML wait,
                # and the event set must not be freed under it.
                waiting = asyncio.ensure_future(
                    asyncio.to_thread(watch.wait, self.settings.wait_ms)
                )
                try:
                    await self._step(await asyncio.shield(waiting))
                except NvmlError as error:
                    await self._wait_failed(error)
                await self._recover()
        finally:
            if waiting is not None and not waiting.done():
                await asyncio.wait([waiting])
            watch.close()

    async def _open_watch(self, stop: asyncio.Event) -> XidWatch | None:
        while not stop.is_set():
            try:
                watch = await asyncio.to_thread(self.nvml.watch_xids)
            except NvmlError as error:
                log.error("cannot watch XID events, retrying in 30 s: %s", error)
                await sleep_unless(stop, 30.0)
                continue
            now = self.clock.monotonic()
            for gpu in self._by_uuid.values():
                if gpu.index in watch.unwatched:
                    self.board.mark(
                        gpu.uuid, "its XID events cannot be watched", now, permanent=True
                    )
            return watch
        return None

    async def _wait_failed(self, error: NvmlError) -> None:
        now = self.clock.monotonic()
        for uuid in self._by_uuid:
            self.board.mark(uuid, f"NVML event wait failed: {error}", now)
        await asyncio.sleep(self.settings.wait_ms / 1000)  # do not spin on a persistent error

    async def _step(self, event: XidEvent | None) -> None:
        if event is None:
            return
        if event.uuid not in self._by_uuid:
            log.debug("XID %d on %s, a GPU this plugin does not serve", event.xid, event.uuid)
            return
        if not self.settings.policy.is_fatal(event.xid):
            log.info("XID %d on %s ignored (application error or disabled)", event.xid, event.uuid)
            return
        self.board.mark(event.uuid, f"XID {event.xid}", self.clock.monotonic())

    async def _recover(self) -> None:
        recovery_after = self.settings.recovery_after
        if recovery_after is None:
            return
        for uuid in self.board.quiet_since(self.clock.monotonic() - recovery_after):
            if await asyncio.to_thread(_probe, self.nvml, self._by_uuid[uuid]):
                self.board.recover(uuid)


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less when `stop` is set meanwhile."""
    await unless_stopped(asyncio.sleep(seconds), stop)
