"""Watch plumbing: committed changes and the per-watch queues they are offered to."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pyhami.testing.fake_apiserver.objects import StoredObject
from pyhami.testing.fake_apiserver.resources import ResourceType
from pyhami.testing.fake_apiserver.selectors import Selector


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write, as the watch history keeps it."""

    resource_version: int
    resource: ResourceType
    type: str  # ADDED, MODIFIED, DELETED
    obj: StoredObject
    old: StoredObject | None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event as a watcher sees it (its type may differ from the change's)."""

    type: str  # ADDED, MODIFIED, DELETED
    obj: StoredObject


class Watcher:
    """One open watch: a queue of its events, filtered by namespace and selectors; None ends it."""

    def __init__(self, resource: ResourceType, namespace: str | None, selector: Selector):
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.abort = False  # drop by cutting the connection instead of ending the stream

    def _visible(self, obj: StoredObject | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj.meta.namespace != self.namespace:
            return False
        return self.selector.matches(obj)

    def send(self, kind: str, obj: StoredObject) -> None:
        self.queue.put_nowait(WatchEvent(kind, obj))

    def offer(self, change: Change) -> None:
        """Queue the change as this watcher sees it: leaving the selection reads as DELETED."""
        if change.resource is not self.resource:
            return
        now, before = self._visible(change.obj), self._visible(change.old)
        if change.type == "MODIFIED" and now != before:
            kind = "ADDED" if now else "DELETED"
        elif (change.type == "DELETED" and before) or (change.type != "DELETED" and now):
            kind = change.type
        else:
            return
        self.send(kind, change.obj)

    def close(self) -> None:
        self.queue.put_nowait(None)
