"""The asyncio informer against the fake API server: sync, handlers, 410 relist, bookmarks,
dropped watches, backoff, resync, handler failures."""

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from pyhami.kube import PODS, EventHandlers, Informer, InformerSettings, KubeClient
from pyhami.kube.informer import ViewInformer
from pyhami.kube.views import read_pod
from pyhami.model import PodView
from pyhami.testing import FakeKubeAPIServer

from .builders import pod

# Pages of two objects: a relist reads several pages.
FAST = InformerSettings(watch_timeout_s=5, backoff_initial_s=0.02, backoff_max_s=0.1, page_size=2)


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def handlers(self) -> EventHandlers:
        return EventHandlers(
            on_add=lambda o: self.seen.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: self.seen.append(("update", new["metadata"]["name"])),
            on_delete=lambda o: self.seen.append(("delete", o["metadata"]["name"])),
        )


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        if loop.time() > deadline:
            pytest.fail("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture
async def recorded(kube: KubeClient) -> AsyncIterator[tuple[Informer, Recorder]]:
    informer = Informer(kube, PODS, settings=FAST)
    recorder = Recorder()
    informer.add_handlers(recorder.handlers())
    yield informer, recorder
    await informer.stop()


async def test_sync_then_events(kube: KubeClient, recorded: tuple[Informer, Recorder]) -> None:
    informer, recorder = recorded
    await kube.create_pod("default", pod("a"))
    informer.start()
    await informer.wait_synced(5)
    assert recorder.seen == [("add", "a")]
    await kube.create_pod("default", pod("b"))
    await kube.patch_pod("default", "a", {"metadata": {"labels": {"x": "1"}}})
    await kube.delete_pod("default", "b")
    await eventually(lambda: len(recorder.seen) == 4)
    assert recorder.seen[1:] == [("add", "b"), ("update", "a"), ("delete", "b")]
    assert informer.get("a", "default")["metadata"]["labels"] == {"x": "1"}
    assert informer.get("b", "default") is None


async def test_the_cache_keeps_no_managed_fields(
    kube: KubeClient, recorded: tuple[Informer, Recorder]
) -> None:
    informer, _ = recorded
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    listed = pod("listed")
    listed["metadata"]["managedFields"] = managed
    await kube.create_pod("default", listed)
    informer.start()
    await informer.wait_synced(5)
    watched = pod("watched")
    watched["metadata"]["managedFields"] = managed
    await kube.create_pod("default", watched)
    await eventually(lambda: informer.get("watched", "default") is not None)
    stored = await kube.get_pod("default", "watched")
    assert stored["metadata"]["managedFields"] == managed, "the double keeps what it was given"
    for name in ("listed", "watched"):
        cached = informer.get(name, "default")
        assert cached is not None and "managedFields" not in cached["metadata"]


async def test_gone_relists_and_diffs_what_was_missed(
    kube: KubeClient, apiserver: FakeKubeAPIServer, recorded: tuple[Informer, Recorder]
) -> None:
    informer, recorder = recorded
    await kube.create_pod("default", pod("a"))
    await kube.create_pod("default", pod("b"))
    informer.start()
    await informer.wait_synced(5)
    await eventually(lambda: "watch" in informer.stats.history)
    # Cut the watch, change things behind the informer's back, and expire its version.
    apiserver.store.create("pods", "default", pod("c"))
    apiserver.store.delete("pods", "default", "b")
    apiserver.store.patch(
        "pods", "default", "a", "application/merge-patch+json", {"metadata": {"labels": {"y": "2"}}}
    )
    apiserver.store.compact()
    apiserver.drop_watches("pods")
    await eventually(lambda: informer.stats.lists == 2)
    await eventually(lambda: len(recorder.seen) == 5)
    assert informer.stats.expired == 1
    assert sorted(recorder.seen[2:]) == [("add", "c"), ("delete", "b"), ("update", "a")]
    assert sorted(p["metadata"]["name"] for p in informer.list()) == ["a", "c"]


async def test_dropped_watch_resumes_without_relist(
    kube: KubeClient, apiserver: FakeKubeAPIServer, recorded: tuple[Informer, Recorder]
) -> None:
    informer, recorder = recorded
    informer.start()
    await informer.wait_synced(5)
    await eventually(lambda: len(apiserver.store.open_watchers("pods")) == 1)
    apiserver.drop_watches("pods", abrupt=True)
    await kube.create_pod("default", pod("late"))
    await eventually(lambda: ("add", "late") in recorder.seen)
    assert informer.stats.lists == 1 and informer.stats.watches >= 2


async def test_bookmarks_advance_the_version(
    kube: KubeClient, apiserver: FakeKubeAPIServer, recorded: tuple[Informer, Recorder]
) -> None:
    informer, _ = recorded
    informer.start()
    await informer.wait_synced(5)
    apiserver.store.create("nodes", None, {"metadata": {"name": "n1"}})  # not a pod
    target = apiserver.store.list_version()
    await eventually(lambda: informer.resource_version == target)
    assert informer.stats.bookmarks >= 1


async def test_list_errors_back_off_then_sync(
    kube: KubeClient, apiserver: FakeKubeAPIServer, recorded: tuple[Informer, Recorder]
) -> None:
    informer, _ = recorded
    apiserver.faults.fail("list", "pods", status=500, times=3)
    informer.start()
    await informer.wait_synced(5)
    assert informer.stats.errors == 3
    assert "500" in informer.stats.last_error


async def test_failing_handler_does_not_stop_the_informer(kube: KubeClient) -> None:
    informer = Informer(kube, PODS, settings=FAST)
    good = Recorder()

    def explode(_obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    informer.add_handlers(EventHandlers(on_add=explode))
    informer.add_handlers(good.handlers())
    informer.start()
    try:
        await informer.wait_synced(5)
        await kube.create_pod("default", pod("a"))
        await eventually(lambda: good.seen == [("add", "a")])
        assert informer.stats.handler_errors == 1
    finally:
        await informer.stop()


async def test_a_view_informer_keeps_views_and_skips_what_it_cannot_read(
    kube: KubeClient,
) -> None:
    def read(obj: dict[str, Any]) -> PodView:
        view = read_pod(obj)
        if view.labels.get("x") == "unreadable":
            raise ValueError(f"pod {view.name}: label x is unreadable")
        return view

    informer = ViewInformer(kube, PODS, read, settings=FAST)
    seen: list[tuple[str, PodView]] = []
    informer.add_handlers(
        EventHandlers(
            on_add=lambda view: seen.append(("add", view)),
            on_update=lambda _old, view: seen.append(("update", view)),
            on_delete=lambda view: seen.append(("delete", view)),
        )
    )
    await kube.create_pod("default", pod("a", labels={"x": "1"}))
    informer.start()
    try:
        await informer.wait_synced(5)
        await kube.patch_pod("default", "a", {"metadata": {"labels": {"x": "unreadable"}}})
        await eventually(lambda: informer.stats.unreadable == 1)
        kept = informer.get("a", "default")
        assert kept is not None and kept.labels == {"x": "1"}, "the last view it could read"
        await kube.delete_pod("default", "a")
        await eventually(lambda: len(seen) == 2)
        assert [(what, dict(view.labels)) for what, view in seen] == [
            ("add", {"x": "1"}),
            ("delete", {"x": "1"}),
        ]
        assert informer.stats.unreadable == 1 and informer.stats.handler_errors == 0
    finally:
        await informer.stop()


async def test_async_handlers_and_selectors(kube: KubeClient) -> None:
    seen: list[str] = []

    async def on_add(obj: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        seen.append(obj["metadata"]["name"])

    informer = Informer(
        kube, PODS, namespace="default", field_selector="spec.nodeName=n1", settings=FAST
    )
    informer.add_handlers(EventHandlers(on_add=on_add))
    await kube.create_pod("default", pod("on-n1", node="n1"))
    await kube.create_pod("default", pod("elsewhere", node="n2"))
    informer.start()
    try:
        await informer.wait_synced(5)
        assert seen == ["on-n1"]
    finally:
        await informer.stop()


async def test_resync_redelivers_cached_objects(kube: KubeClient) -> None:
    informer = Informer(kube, PODS, settings=InformerSettings(resync_period_s=0.05))
    recorder = Recorder()
    informer.add_handlers(recorder.handlers())
    await kube.create_pod("default", pod("a"))
    informer.start()
    try:
        await eventually(lambda: recorder.seen.count(("update", "a")) >= 2)
    finally:
        await informer.stop()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="resync_period_s"):
        InformerSettings(resync_period_s=0)
    with pytest.raises(ValueError, match="backoff"):
        InformerSettings(backoff_initial_s=2, backoff_max_s=1)


class RecordingClock:
    """Real time, but sleeps are recorded and kept short, so backoff is asserted exactly."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0.001)


async def test_watches_that_end_at_once_are_backed_off(
    kube: KubeClient, apiserver: FakeKubeAPIServer
) -> None:
    apiserver.max_watch_timeout_s = 0  # every watch ends before its first event
    clock = RecordingClock()
    informer = Informer(kube, PODS, settings=FAST, clock=clock)
    informer.start()
    try:
        await eventually(lambda: len(clock.sleeps) >= 5)
    finally:
        await informer.stop()
    assert clock.sleeps[:5] == [0.02, 0.04, 0.08, 0.1, 0.1]  # doubling, capped


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_cache_converges_under_drops_and_compactions(
    kube: KubeClient, apiserver: FakeKubeAPIServer, seed: int
) -> None:
    """Random writes while watches are cut (cleanly or not) and history is compacted: once
    things settle, the informer's cache equals the server's state."""
    import random

    rng = random.Random(seed)
    informer = Informer(kube, PODS, settings=FAST)
    informer.start()
    store = apiserver.store
    try:
        await informer.wait_synced(5)
        for step in range(60):
            name = f"p{rng.randrange(6)}"
            action = rng.random()
            try:
                if action < 0.35:
                    store.create("pods", "default", pod(name))
                elif action < 0.7:
                    store.patch(
                        "pods",
                        "default",
                        name,
                        "application/merge-patch+json",
                        {"metadata": {"labels": {"step": str(step)}}},
                    )
                else:
                    store.delete("pods", "default", name)
            except Exception as err:
                assert getattr(err, "code", None) in (404, 409)
            chaos = rng.random()
            if chaos < 0.1:
                apiserver.drop_watches("pods", abrupt=rng.random() < 0.5)
            elif chaos < 0.15:
                store.compact()
                apiserver.drop_watches("pods")
            await asyncio.sleep(0.005)

        def converged() -> bool:
            want = {p.meta.name: p.meta.resource_version for p in store.matching("pods")}
            have = {
                p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in informer.list()
            }
            return want == have

        await eventually(converged, timeout_s=10)
        assert informer.stats.handler_errors == 0
    finally:
        await informer.stop()
