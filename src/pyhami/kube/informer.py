"""An asyncio reflector + informer: list, then watch from the list's resourceVersion.

* Watch restarts resume from the last resourceVersion seen (events and bookmarks both move
  it); only a 410 Gone makes it list again, as client-go's reflector does.
* A relist is diffed against the cache, so handlers see the adds, updates and deletes that
  happened while the watch was down.
* `resync_period_s` redelivers every cached object to `on_update(obj, obj)`.
* Errors back off exponentially (capped) and are counted; a handler that raises is logged and
  counted and never stops the loop; `synced` is set after the first complete list.
* A `ViewInformer` keeps what its `read` makes of each object (a view), not the JSON, so a
  consumer that decides on views holds one copy of every object; `Informer` keeps the JSON.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Generic, TypedDict, TypeVar, Unpack

import structlog

from pyhami.kube.client import JsonObject, KubeClient, WatchEvent, resource_version
from pyhami.kube.clock import Clock, SystemClock
from pyhami.kube.errors import Gone
from pyhami.kube.resources import Resource
from pyhami.kube.tasks import cancel_and_wait, guarded_task

log = structlog.get_logger(__name__)

Key = tuple[str, str]  # (namespace or "", name)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EventHandlers(Generic[T]):
    """What to call on each change; any may be None. Sync or async callables both work."""

    on_add: Callable[[T], Awaitable[None] | None] | None = None
    on_update: Callable[[T, T], Awaitable[None] | None] | None = None
    on_delete: Callable[[T], Awaitable[None] | None] | None = None


@dataclass(frozen=True, slots=True)
class InformerSettings:
    resync_period_s: float | None = None
    watch_timeout_s: int = 300
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 10.0
    page_size: int = 500

    def __post_init__(self) -> None:
        if self.resync_period_s is not None and self.resync_period_s <= 0:
            raise ValueError(f"resync_period_s must be > 0 or None, got {self.resync_period_s}")
        if self.watch_timeout_s < 1:
            raise ValueError(f"watch_timeout_s must be >= 1, got {self.watch_timeout_s}")
        if not 0 < self.backoff_initial_s <= self.backoff_max_s:
            raise ValueError("backoff needs 0 < backoff_initial_s <= backoff_max_s")


@dataclass(slots=True)
class InformerStats:
    lists: int = 0
    watches: int = 0
    expired: int = 0  # 410s that forced a relist
    errors: int = 0
    handler_errors: int = 0
    unreadable: int = 0  # objects `read` refused: their events were ignored
    bookmarks: int = 0
    last_error: str = ""
    # The latest steps, oldest first: "list", "watch", "gone", "error".
    history: deque[str] = field(default_factory=lambda: deque(maxlen=64))


def object_key(obj: JsonObject) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class InformerOptions(TypedDict, total=False):
    namespace: str | None
    label_selector: str
    field_selector: str
    settings: InformerSettings | None
    clock: Clock | None
    name: str


class ViewInformer(Generic[T]):
    """Keeps a local cache of one resource current and tells handlers what changed. The cache
    keeps `read(object)`, whose resourceVersion `version` gives (by default its attribute
    `resource_version`, as pyhami's views carry it); an object that `read` refuses (ValueError)
    is logged and counted, and its event ignored: the cache keeps what it had."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        read: Callable[[JsonObject], T],
        *,
        version: Callable[[T], str] = attrgetter("resource_version"),
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        settings: InformerSettings | None = None,
        clock: Clock | None = None,
        name: str = "",
    ) -> None:
        self._client = client
        self.resource = resource
        self._read = read
        self._version = version
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self.settings = settings or InformerSettings()
        self._clock: Clock = clock or SystemClock()
        self.name = name or f"informer/{resource.plural}"
        self._cache: dict[Key, T] = {}
        self._handlers: list[EventHandlers[T]] = []
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.stats = InformerStats()
        self._tasks: list[asyncio.Task[None]] = []

    # --- reading the cache ----------------------------------------------------------------

    def get(self, name: str, namespace: str | None = None) -> T | None:
        return self._cache.get((namespace or "", name))

    def list(self) -> list[T]:
        return list(self._cache.values())

    def __len__(self) -> int:
        return len(self._cache)

    # --- lifecycle ------------------------------------------------------------------------

    def add_handlers(self, handlers: EventHandlers[T]) -> None:
        """Register handlers (before `start`, so they see every object from the first list)."""
        self._handlers.append(handlers)

    def start(self) -> None:
        if self._tasks:
            raise RuntimeError(f"{self.name} is already running")
        self._tasks.append(guarded_task(self._run(), self.name))
        if self.settings.resync_period_s is not None:
            self._tasks.append(guarded_task(self._resync_loop(), f"{self.name}/resync"))

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()

    async def wait_synced(self, timeout_s: float | None = None) -> None:
        await asyncio.wait_for(self.synced.wait(), timeout_s)

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.settings.backoff_initial_s
        must_list = True
        while True:
            try:
                if must_list:
                    await self._relist()
                    must_list = False
                started = self._clock.monotonic()
                if await self._watch() or self._clock.monotonic() - started >= 1.0:
                    backoff = self.settings.backoff_initial_s
                else:  # a server that ends every watch at once must not make us spin
                    await self._clock.sleep(backoff)
                    backoff = min(backoff * 2, self.settings.backoff_max_s)
            except Gone:
                self.stats.expired += 1
                self.stats.history.append("gone")
                log.info(
                    "watch expired; relisting",
                    informer=self.name,
                    resource_version=self.resource_version,
                )
                must_list = True
            except Exception as err:  # every other failure: back off, never die
                self.stats.errors += 1
                self.stats.last_error = repr(err)
                self.stats.history.append("error")
                log.warning(
                    "list/watch failed; backing off",
                    informer=self.name,
                    error=repr(err),
                    backoff_s=backoff,
                )
                await self._clock.sleep(backoff)
                backoff = min(backoff * 2, self.settings.backoff_max_s)

    async def _relist(self) -> None:
        """List a page at a time, so that only one page of JSON is held beside the cache."""
        fresh: set[Key] = set()
        version = ""
        async for page in self._client.list_pages(
            self.resource,
            self._namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            page_size=self.settings.page_size,
        ):
            for obj in page.items:
                key = object_key(obj)
                fresh.add(key)
                await self._apply(key, obj)
            version = page.resource_version
        self.stats.lists += 1
        self.stats.history.append("list")
        for key in [k for k in self._cache if k not in fresh]:
            await self._remove(key)
        self.resource_version = version
        self.synced.set()

    async def _watch(self) -> int:
        """One watch until the server ends it; returns how many events (bookmarks too) came."""
        self.stats.watches += 1
        self.stats.history.append("watch")
        events = self._client.watch(
            self.resource,
            self._namespace,
            resource_version=self.resource_version,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            timeout_s=self.settings.watch_timeout_s,
            bookmarks=True,
        )
        seen = 0
        async for event in events:
            seen += 1
            await self._handle(event)
        return seen

    async def _handle(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK":
            self.stats.bookmarks += 1
        else:
            key = object_key(event.object)
            if event.type == "DELETED":
                await self._remove(key)
            else:
                await self._apply(key, event.object)
        if event.resource_version:
            self.resource_version = event.resource_version

    async def _apply(self, key: Key, obj: JsonObject) -> None:
        old = self._cache.get(key)
        if old is not None and self._version(old) == resource_version(obj):
            return  # a relist's unchanged object
        try:
            item = self._read(obj)
        except ValueError as err:
            self.stats.unreadable += 1
            log.warning("object unreadable; event ignored", informer=self.name, error=str(err))
            return
        self._cache[key] = item
        if old is None:
            await self._dispatch("on_add", item)
        else:
            await self._dispatch("on_update", old, item)

    async def _remove(self, key: Key) -> None:
        """Drop the object; handlers get the last state cached (all a deletion needs)."""
        kept = self._cache.pop(key, None)
        if kept is not None:
            await self._dispatch("on_delete", kept)

    async def _dispatch(self, which: str, *args: T) -> None:
        for handlers in self._handlers:
            handler: Callable[..., Any] | None = getattr(handlers, which)
            if handler is None:
                continue
            try:
                result = handler(*args)
                if inspect.isawaitable(result):
                    await result
            except Exception as err:  # a handler bug must not stop the informer
                self.stats.handler_errors += 1
                log.exception(
                    "informer handler failed", informer=self.name, handler=which, error=repr(err)
                )

    async def _resync_loop(self) -> None:
        period = self.settings.resync_period_s
        assert period is not None
        await self.synced.wait()
        while True:
            await self._clock.sleep(period)
            for obj in list(self._cache.values()):
                await self._dispatch("on_update", obj, obj)


class Informer(ViewInformer[JsonObject]):
    """An informer whose cache keeps each object's JSON (less its managedFields)."""

    def __init__(
        self, client: KubeClient, resource: Resource, **options: Unpack[InformerOptions]
    ) -> None:
        super().__init__(
            client, resource, _drop_managed_fields, version=resource_version, **options
        )


def _drop_managed_fields(obj: JsonObject) -> JsonObject:
    """The API server's record of which manager set which field, often the largest part of a
    stored object: nothing here reads it, so the cache does not keep it (client-go's informers
    are commonly given the same transform). The object is the informer's own, fresh from the
    list or watch. A later update that omits it leaves the server's record as it was."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj
