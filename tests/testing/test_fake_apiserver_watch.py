"""Watch semantics of the fake API server, over raw HTTP (Kubernetes API concepts, "Efficient
detection of changes", "Watch bookmarks", "410 Gone responses")."""

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from pyhami.testing import FakeKubeAPIServer

from .builders import Http, pod

PODS = "/api/v1/namespaces/default/pods"


async def read_events(
    session: aiohttp.ClientSession, query: str, count: int, path: str = PODS
) -> list[dict[str, Any]]:
    """Open a watch and read `count` event lines (or until the server ends the stream)."""
    events: list[dict[str, Any]] = []
    async with session.get(f"{path}?watch=1&{query}") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/json")
        while len(events) < count:
            line = await asyncio.wait_for(response.content.readline(), 5)
            if not line:
                break
            events.append(json.loads(line))
    return events


async def test_watch_from_version_sends_later_changes(http: Http) -> None:
    _, created = await http.post(PODS, pod("a"))
    version = created["metadata"]["resourceVersion"]
    watch = asyncio.create_task(read_events(http.session, f"resourceVersion={version}", 3))
    await asyncio.sleep(0.05)
    await http.patch(f"{PODS}/a", {"metadata": {"labels": {"x": "1"}}})
    await http.post(PODS, pod("b"))
    await http.delete(f"{PODS}/a")
    events = await watch
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    assert all(e["object"]["kind"] == "Pod" for e in events)
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(version)


async def test_watch_replays_history_after_a_version(http: Http) -> None:
    _, first = await http.post(PODS, pod("a"))
    await http.post(PODS, pod("b"))
    events = await read_events(
        http.session, f"resourceVersion={first['metadata']['resourceVersion']}&timeoutSeconds=1", 10
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]


async def test_watch_without_version_starts_with_current_state(http: Http) -> None:
    await http.post(PODS, pod("a"))
    await http.post(PODS, pod("b"))
    events = await read_events(http.session, "timeoutSeconds=1", 10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


async def test_expired_version_is_an_error_event_with_410(
    http: Http, apiserver: FakeKubeAPIServer
) -> None:
    _, created = await http.post(PODS, pod("a"))
    await http.post(PODS, pod("b"))
    apiserver.store.compact()
    events = await read_events(
        http.session, f"resourceVersion={created['metadata']['resourceVersion']}", 5
    )
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith("too old resource version:")


async def test_bounded_history_expires_old_versions() -> None:
    async with (
        FakeKubeAPIServer(history_limit=3) as server,
        aiohttp.ClientSession(server.url) as session,
    ):
        http = Http(session)
        _, first = await http.post(PODS, pod("a"))
        for name in "bcde":
            await http.post(PODS, pod(name))
        events = await read_events(
            session, f"resourceVersion={first['metadata']['resourceVersion']}", 1
        )
        assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
        _, latest = await http.get(PODS)
        recent = int(latest["metadata"]["resourceVersion"]) - 1
        events = await read_events(session, f"resourceVersion={recent}&timeoutSeconds=1", 5)
        assert [e["object"]["metadata"]["name"] for e in events] == ["e"]


async def test_bookmarks_only_when_asked(http: Http) -> None:
    _, listed = await http.get(PODS)
    version = listed["metadata"]["resourceVersion"]
    events = await read_events(
        http.session, f"resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds=1", 2
    )
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    bookmark = events[0]["object"]
    assert bookmark["kind"] == "Pod" and bookmark["apiVersion"] == "v1"
    assert bookmark["metadata"] == {"resourceVersion": version}
    plain = await read_events(http.session, f"resourceVersion={version}&timeoutSeconds=1", 2)
    assert plain == []


async def test_timeout_seconds_ends_the_stream(http: Http) -> None:
    # read_events gives up (TimeoutError) if the stream stays open 5 s without a line.
    assert await read_events(http.session, "resourceVersion=1&timeoutSeconds=1", 1) == []


async def test_selector_changes_read_as_added_and_deleted(http: Http) -> None:
    _, created = await http.post(PODS, pod("a", labels={"app": "x"}))
    version = created["metadata"]["resourceVersion"]
    watch = asyncio.create_task(
        read_events(http.session, f"resourceVersion={version}&labelSelector=app%3Dx", 2)
    )
    await asyncio.sleep(0.05)
    await http.patch(f"{PODS}/a", {"metadata": {"labels": {"app": "y"}}})
    await http.patch(f"{PODS}/a", {"metadata": {"labels": {"app": "x"}}})
    events = await watch
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]


async def test_field_selected_watch_sees_binding(http: Http) -> None:
    _, created = await http.post(PODS, pod("a"))
    version = created["metadata"]["resourceVersion"]
    watch = asyncio.create_task(
        read_events(
            http.session,
            f"resourceVersion={version}&fieldSelector=spec.nodeName%3Dn1",
            1,
            "/api/v1/pods",
        )
    )
    await asyncio.sleep(0.05)
    await http.post(f"{PODS}/a/binding", {"metadata": {"name": "a"}, "target": {"name": "n1"}})
    events = await watch
    assert events[0]["type"] == "ADDED" and events[0]["object"]["spec"]["nodeName"] == "n1"


async def test_dropped_watch_ends(http: Http, apiserver: FakeKubeAPIServer) -> None:
    watch = asyncio.create_task(read_events(http.session, "resourceVersion=1", 5))
    async with asyncio.timeout(5):
        while not apiserver.store.open_watchers("pods"):
            await asyncio.sleep(0.01)
    assert apiserver.drop_watches("pods") == 1
    assert await asyncio.wait_for(watch, 2) == []


async def test_wait_for_a_condition(http: Http, apiserver: FakeKubeAPIServer) -> None:
    await http.post(PODS, pod("a"))

    async def bind_soon() -> None:
        await asyncio.sleep(0.05)
        await http.post(f"{PODS}/a/binding", {"metadata": {"name": "a"}, "target": {"name": "n1"}})

    binder = asyncio.create_task(bind_soon())
    bound = await apiserver.wait_for(
        "pods", "default", "a", lambda p: bool(p.fields["spec.nodeName"]), timeout_s=5
    )
    await binder
    assert bound.body["spec"]["nodeName"] == "n1" and bound.meta.name == "a"
    with pytest.raises(TimeoutError):
        await apiserver.wait_for("pods", "default", "a", lambda p: False, timeout_s=0.1)
    deleting = asyncio.create_task(
        apiserver.wait_for("pods", "default", "a", lambda p: False, timeout_s=5)
    )
    await asyncio.sleep(0.05)
    await http.delete(f"{PODS}/a", {"gracePeriodSeconds": 0})
    with pytest.raises(LookupError, match="deleted"):
        await deleting
