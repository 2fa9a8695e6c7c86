"""The scheduler as kube-scheduler and kube-apiserver see it, over real sockets.

A pod is created through the API double (which calls our webhook over HTTPS), the
KubeSchedulerHarness filters and binds it through our extender over HTTPS, and the pod ends
up bound with HAMi's annotations; bad input and API failures get HAMi's answers.
"""

import asyncio
import gc
import json
from pathlib import Path

from pyhami.engine import collapse_init_usage
from pyhami.kube.views import read_node, read_pod
from pyhami.protocol import (
    KEY_BIND_PHASE,
    KEY_NODE_LOCK,
    KEY_NODE_NVIDIA_REGISTER,
    KEY_NVIDIA_ALLOCATED,
    KEY_NVIDIA_TO_ALLOCATE,
    KEY_VGPU_NODE,
    decode_pod_single_device,
)
from pyhami.testing.scheduler_harness import Result

from .builders import card as gpu
from .cluster import (
    SCHEDULER_NAME,
    DevicePluginDouble,
    node_object,
    pod_object,
    running_cluster,
    wait_for,
)


async def test_pod_goes_webhook_filter_bind_to_bound_with_hami_annotations(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        await cluster.add_nodes(
            node_object("n1", [gpu("GPU-a", 0), gpu("GPU-b", 1)]),
            node_object("n2", [gpu("GPU-c", 0, mem=2000)]),
        )
        process = await cluster.scheduler()
        await wait_for(process.synced.is_set, what="caches synced")
        assert gc.get_freeze_count() > 0  # the synced caches are out of the collector's walks
        cluster.register_webhook(process)
        pod = pod_object("p", mem=3000, cores=None)
        pod["metadata"]["annotations"][KEY_NVIDIA_ALLOCATED] = "GPU-forged,NVIDIA,1,0:;"
        created = await cluster.create_pod(pod)
        # The webhook took the pod over and removed the forged allocation.
        assert created["spec"]["schedulerName"] == SCHEDULER_NAME
        assert KEY_NVIDIA_ALLOCATED not in created["metadata"].get("annotations", {})
        async with cluster.harness(process.main_port) as harness:
            outcome = await harness.wait_for("default", "p", timeout_s=10)
            assert outcome.result is Result.BOUND and outcome.node == "n1"
        stored = cluster.api.store.get("pods", "default", "p").body
        notes = stored["metadata"]["annotations"]
        assert stored["spec"]["nodeName"] == "n1"
        assert notes[KEY_VGPU_NODE] == "n1" and stored["metadata"]["labels"][KEY_VGPU_NODE] == "n1"
        assert notes[KEY_BIND_PHASE] == "allocating"
        assert notes[KEY_NVIDIA_TO_ALLOCATE] == notes[KEY_NVIDIA_ALLOCATED]
        devices = decode_pod_single_device(notes[KEY_NVIDIA_ALLOCATED])
        assert [(d.uuid, d.usedmem) for c in devices for d in c] in (
            [("GPU-a", 3000)],
            [("GPU-b", 3000)],
        )
        lock = cluster.api.store.get("nodes", None, "n1").body["metadata"]["annotations"][
            KEY_NODE_LOCK
        ]
        assert lock.endswith(",default,p")
        await process.events.drain()  # events are written in the background
        reasons = {e.body["reason"] for e in cluster.api.store.matching("events", "default")}
        assert {"FilteringSucceed", "BindingSucceed", "FilteringFailed"} <= reasons


async def test_bad_bodies_unknown_pods_and_api_errors_get_error_answers(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        broken = node_object("broken", [gpu("GPU-b")])
        broken["metadata"]["annotations"][KEY_NODE_NVIDIA_REGISTER] = "GPU-b,10"
        await cluster.add_nodes(node_object("n1", [gpu("GPU-a")]), broken)
        process = await cluster.scheduler()
        await wait_for(process.synced.is_set, what="caches synced")
        for body in (b"", b"{", b"[1]", b'{"Pod": 5}'):
            answer = await cluster.post(process, "/filter", body)
            assert set(answer) == {
                "Nodes",
                "NodeNames",
                "FailedNodes",
                "FailedAndUnresolvableNodes",
                "Error",
            }
            assert answer["Error"]
        assert (await cluster.post(process, "/filter", {"NodeNames": ["n1"]}))[
            "Error"
        ] == "extender args missing pod"
        bind = await cluster.post(
            process,
            "/bind",
            {"PodName": "ghost", "PodNamespace": "default", "PodUID": "u-1", "Node": "n1"},
        )
        assert "default/ghost (uid u-1) has no filter decision" in bind["Error"]
        assert "missing PodName" in (await cluster.post(process, "/bind", {}))["Error"]
        webhook = await cluster.post(process, "/webhook", b"")
        assert webhook["response"]["status"]["code"] == 400
        # An API failure on the decision patch (sent after the answer) fails the bind and
        # leaves nothing reserved.
        created = await cluster.create_pod(pod_object("p"))
        cluster.api.faults.fail("patch", "pods", status=500)
        answer = await cluster.post(
            process, "/filter", {"Pod": created, "NodeNames": ["n1", "broken"]}
        )
        assert answer["NodeNames"] == ["n1"]
        uid = created["metadata"]["uid"]
        bind_args = {"PodName": "p", "PodNamespace": "default", "PodUID": uid, "Node": "n1"}
        bind = await cluster.post(process, "/bind", bind_args)
        assert "failed to record the decision" in bind["Error"]
        assert process.state.ledger.pod(uid) is None
        status, _ = await cluster.get(process, "/healthz")
        assert status == 200
        status, text = await cluster.get(process, "/explain?pod=default/p")
        assert status == 200
        explained = json.loads(text)
        assert explained["node"] == "n1"
        # A node whose registration cannot be read is left out, and /explain says why.
        verdicts = {verdict["node"]: verdict for verdict in explained["nodes"]}
        assert verdicts["broken"]["reason"] == "node unregistered"
        assert verdicts["broken"]["registrationError"].startswith("node broken: ")
        assert "registrationError" not in verdicts["n1"]
        status, _ = await cluster.get(process, "/explain?pod=nonsense")
        assert status == 400
        status, metrics = await cluster.get(process, "/metrics", port=process.metrics_port)
        assert status == 200 and 'hami_gpu_memory_limit_bytes{device_index="0"' in metrics
        assert "pyhami_scheduler_filter_duration_seconds_count" in metrics
        assert 'pyhami_scheduler_node_registration_unreadable{node="broken"} 1.0' in metrics


async def test_two_hundred_pods_on_twenty_nodes_no_card_overcommitted(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        nodes = [
            node_object(f"n{i:02d}", [gpu(f"GPU-{i}-{c}", c, mem=8000, count=4) for c in range(2)])
            for i in range(20)
        ]
        await cluster.add_nodes(*nodes)
        # Spread keeps 20 binds in flight at once (binpack would queue them on one node's lock).
        process = await cluster.scheduler(node_scheduler_policy="spread")
        await wait_for(process.synced.is_set, what="caches synced")
        cluster.register_webhook(process)
        plugin = DevicePluginDouble(cluster)
        plugin.start()
        try:
            async with cluster.harness(process.main_port) as harness:
                # 200 pods x 1500 MiB = 300,000 MiB asked; 20 x 2 x 8000 = 320,000 MiB there,
                # but 4 slots per card cap it at 160 pods: the other 40 must stay pending.
                await asyncio.gather(
                    *(
                        cluster.create_pod(pod_object(f"p{i:03d}", mem=1500, cores=5))
                        for i in range(200)
                    )
                )
                await harness.wait_bound_count(160, timeout_s=120)
                await asyncio.sleep(0.3)
                assert harness.metrics.results[Result.BOUND] == 160
        finally:
            await plugin.stop()
        pods = [p.body for p in cluster.api.store.matching("pods", "default")]
        assert len(pods) == 200  # no pod lost
        per_card: dict[str, tuple[int, int]] = {}
        for pod in pods:
            notes = pod["metadata"].get("annotations") or {}
            if not pod["spec"].get("nodeName"):
                continue
            assert notes[KEY_VGPU_NODE] == pod["spec"]["nodeName"]
            for container in decode_pod_single_device(notes[KEY_NVIDIA_ALLOCATED]):
                for device in container:
                    mem, slots = per_card.get(device.uuid, (0, 0))
                    per_card[device.uuid] = (mem + device.usedmem, slots + 1)
        assert len(per_card) == 40
        assert all(mem <= 8000 and slots <= 4 for mem, slots in per_card.values()), per_card


def _ledger_view(process) -> dict:
    ledger = process.state.ledger
    pods = {}
    for key in ledger.pod_keys():
        allocation = ledger.pod(key)
        usage = collapse_init_usage(allocation.containers, allocation.init_count, "NVIDIA")
        pods[key] = (allocation.node, usage)
    cards = {name: ledger.device_usage(name) for name in ledger.node_names()}
    return {"cards": cards, "pods": pods}


async def test_restart_mid_run_rebuilds_the_same_ledger(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        await cluster.add_nodes(
            *(node_object(f"n{i}", [gpu(f"GPU-{i}-{c}", c) for c in range(2)]) for i in range(4))
        )
        first = await cluster.scheduler(node_scheduler_policy="spread")
        await wait_for(first.synced.is_set, what="caches synced")
        cluster.register_webhook(first)
        port = first.main_port
        plugin = DevicePluginDouble(cluster)
        plugin.start()
        harness = cluster.harness(port)
        await harness.start()
        await asyncio.gather(
            *(cluster.create_pod(pod_object(f"p{i:02d}", mem=2000)) for i in range(30))
        )
        await harness.wait_bound_count(10, timeout_s=30)
        await harness.stop()  # mid-run: some pods bound, some filtered, the rest pending
        before = await _settled(cluster, first)
        await first.stop()
        cluster.processes.remove(first)
        second = await cluster.scheduler(
            http_bind=f"127.0.0.1:{port}", node_scheduler_policy="spread"
        )
        await wait_for(second.synced.is_set, what="caches synced after restart")
        assert _ledger_view(second) == before
        assert before["pods"], "the run was not mid-way"
        harness = cluster.harness(port)
        async with harness:
            await wait_for(
                lambda: all(
                    p.fields["spec.nodeName"] for p in cluster.api.store.matching("pods", "default")
                ),
                timeout=60,
                what="every pod bound",
            )
        await plugin.stop()


async def _settled(cluster, process) -> dict:
    """The ledger once binds the stopped harness left in flight have finished, and the
    informer has seen every write (equal to a rebuild from the API, unchanged for 0.5 s)."""
    stable_since, last = 0.0, None
    loop = asyncio.get_running_loop()
    until = loop.time() + 20
    while loop.time() < until:
        view = _ledger_view(process)
        if view != last or view != _rebuilt(cluster, process):
            stable_since, last = loop.time(), view
        elif loop.time() - stable_since > 0.5:
            return view
        await asyncio.sleep(0.05)
    raise AssertionError("the ledger never settled")


def _rebuilt(cluster, process) -> dict:
    """The ledger a fresh replica would build from what the API holds now."""
    from pyhami.scheduler.ownership import registered_inventory
    from pyhami.scheduler.state import ClusterState

    fresh = ClusterState(process.state.config, registered_inventory)
    for node in cluster.api.store.matching("nodes"):
        fresh.on_node(read_node(node.body))
    for pod in cluster.api.store.matching("pods"):
        fresh.on_pod(read_pod(pod.body))

    class View:
        state = fresh

    return _ledger_view(View)


async def test_a_failed_binding_releases_the_reservation_and_the_lock(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        await cluster.add_nodes(node_object("n1", [gpu("GPU-a")]))
        process = await cluster.scheduler()
        await wait_for(process.synced.is_set, what="caches synced")
        cluster.register_webhook(process)
        cluster.api.faults.fail("create", "pods/binding", status=500)
        async with cluster.harness(process.main_port) as harness:
            await cluster.create_pod(pod_object("p", mem=4000))
            await harness.wait_bound_count(1, timeout_s=10)
        first, *_, last = harness.outcomes_for("default", "p")
        assert first.result is Result.BIND_ERROR and "injected failure" in first.error
        assert last.result is Result.BOUND
        # The failed attempt left nothing behind: one lock (the retry's), usage counted once.
        lock = cluster.api.store.get("nodes", None, "n1").body["metadata"]["annotations"][
            KEY_NODE_LOCK
        ]
        assert lock.endswith(",default,p")
        await process.events.drain()  # events are written in the background
        events = [e.body["reason"] for e in cluster.api.store.matching("events", "default")]
        assert "BindingFailed" in events and "BindingSucceed" in events
        stored = cluster.api.store.get("pods", "default", "p").body
        assert stored["spec"]["nodeName"] == "n1"
        ledger = process.state.ledger
        assert [card.usedmem for card in ledger.device_usage("n1")] == [4000]
