"""Property: a list at version V plus the watch events after V rebuilds the state exactly —
the contract every informer relies on ("Efficient detection of changes"), with and without a
label selector that objects move in and out of."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.testing.fake_apiserver import ObjectStore
from pyhami.testing.fake_apiserver.resources import PODS
from pyhami.testing.fake_apiserver.selectors import Selector
from pyhami.testing.fake_apiserver.store import MERGE_PATCH
from pyhami.testing.fake_apiserver.watch import Watcher, WatchEvent

NAMES = ["a", "b", "c"]
operations = st.lists(
    st.tuples(
        st.sampled_from(["create", "label", "unlabel", "bind", "delete"]), st.sampled_from(NAMES)
    ),
    max_size=25,
)


def apply(store: ObjectStore, op: str, name: str) -> None:
    try:
        if op == "create":
            store.create(
                PODS,
                "default",
                {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            )
        elif op in ("label", "unlabel"):
            value = "x" if op == "label" else None
            store.patch(
                PODS, "default", name, MERGE_PATCH, {"metadata": {"labels": {"app": value}}}
            )
        elif op == "bind":
            store.bind("default", name, {"target": {"name": "n1"}})
        else:
            store.delete(PODS, "default", name)
    except Exception as err:  # 404/409 are part of the game; anything else is a bug
        assert getattr(err, "code", None) in (404, 409), err


def fold(state: dict[str, Any], events: list[WatchEvent]) -> dict[str, Any]:
    for event in events:
        if event.type == "DELETED":
            state.pop(event.obj.meta.name, None)
        else:
            state[event.obj.meta.name] = event.obj.body
    return state


def drain(watcher: Watcher) -> list[WatchEvent]:
    events = []
    while not watcher.queue.empty():
        events.append(watcher.queue.get_nowait())
    return events


@settings(max_examples=60, deadline=None)
@given(operations, operations, st.booleans())
def test_list_plus_watch_rebuilds_the_state(before, after, selected: bool) -> None:
    store = ObjectStore(seed=1)
    selector = Selector.parse(PODS, "app=x" if selected else "", "")
    for op, name in before:
        apply(store, op, name)
    snapshot = {p.meta.name: p.body for p in store.matching(PODS, "default", selector)}
    version = store.list_version()
    live = store.watch(PODS, "default", selector, version)  # opened now, fed as it happens
    for op, name in after:
        apply(store, op, name)
    replayed = store.watch(PODS, "default", selector, version)  # opened later, from history
    want = {p.meta.name: p.body for p in store.matching(PODS, "default", selector)}
    assert fold(dict(snapshot), drain(live)) == want
    assert fold(dict(snapshot), drain(replayed)) == want


@settings(max_examples=30, deadline=None)
@given(operations)
def test_versions_only_grow_and_noops_do_not_bump(ops) -> None:
    store = ObjectStore(seed=1)
    seen = int(store.list_version())
    for op, name in ops:
        apply(store, op, name)
        now = int(store.list_version())
        assert now >= seen
        seen = now
    for pod in store.matching(PODS):
        before = store.list_version()
        labels = dict(pod.meta.labels)
        store.patch(PODS, "default", pod.meta.name, MERGE_PATCH, {"metadata": {"labels": labels}})
        assert store.list_version() == before
