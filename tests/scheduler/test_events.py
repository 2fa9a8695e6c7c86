import asyncio

from pyhami.kube.views import read_pod
from pyhami.scheduler.events import WARNING, EventRecorder, reason_events
from pyhami.testing import ManualClock

POD = read_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}})


def test_reason_events_group_nodes_per_reason_word() -> None:
    failed = {
        "n2": ["CardInsufficientMemory", "CardUuidMismatch"],
        "n1": ["CardInsufficientMemory"],
        "n3": ["node unregistered"],
    }
    assert reason_events(failed) == [
        "2 nodes CardInsufficientMemory(n1, n2)",
        "1 nodes CardUuidMismatch(n2)",
        "1 nodes node unregistered(n3)",
    ]


async def test_events_are_written_in_the_background_and_failures_do_not_leak() -> None:
    written: list[tuple[str, dict]] = []

    async def create(namespace: str, body: dict) -> None:
        await asyncio.sleep(0)
        if body["reason"] == "Broken":
            raise ConnectionError("events API down")
        written.append((namespace, body))

    recorder = EventRecorder(create, "hami-scheduler", ManualClock())
    recorder.emit(POD, WARNING, "FilteringFailed", "2 nodes CardInsufficientMemory(n1, n2)")
    recorder.emit(POD, WARNING, "Broken", "x")
    await recorder.drain()
    assert len(written) == 1
    namespace, body = written[0]
    assert namespace == "ns"
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
    }
    assert body["source"] == {"component": "hami-scheduler"}
    assert body["firstTimestamp"] == "2026-01-01T00:00:00Z"
    assert (body["type"], body["reason"]) == ("Warning", "FilteringFailed")
