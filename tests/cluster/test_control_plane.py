"""RealControlPlane itself: it starts, authenticates and authorizes as Kubernetes does, and
leaves nothing behind."""

import asyncio
import contextlib
import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import NODES, PODS, Forbidden
from pyhami.testing.real_cluster import RealControlPlane, port_is_open

T = TypeVar("T")


async def eventually_allowed(call: Callable[[], Awaitable[T]], timeout_s: float = 10) -> T:
    """The call's answer once RBAC allows it (a new binding reaches the authorizer's cache
    within moments)."""
    async with asyncio.timeout(timeout_s):
        while True:
            with contextlib.suppress(Forbidden):
                return await call()
            await asyncio.sleep(0.1)


def pod(name: str, node: str = "") -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


async def test_it_starts_judges_identities_and_stops_cleanly(kubernetes: BuiltBinaries) -> None:
    plane = RealControlPlane(kubernetes)
    async with plane:
        workdir = plane.workdir
        pids = plane.processes()
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        ports = [plane.ports.etcd_client, plane.ports.apiserver, plane.ports.controller_manager]
        assert all(port_is_open(port) for port in ports)

        admin = await plane.client(plane.admin_kubeconfig)
        await admin.create(PODS, pod("anywhere"), "default")

        # A node is judged by the Node authorizer and NodeRestriction: its own Node only.
        node = await plane.client(plane.node_kubeconfig("node-a"))
        await node.create(NODES, {"metadata": {"name": "node-a"}})
        with pytest.raises(Forbidden, match="node-b"):
            await node.create(NODES, {"metadata": {"name": "node-b"}})
        # ... and reads no pod that is not bound to it
        with pytest.raises(Forbidden):
            await node.get(PODS, "anywhere", "default")

        # A ServiceAccount token from the TokenRequest API: RBAC gives it nothing by default.
        account = await plane.client(
            await plane.service_account_kubeconfig("kube-system", "pyhami-scheduler")
        )
        with pytest.raises(Forbidden, match="system:serviceaccount:kube-system:pyhami-scheduler"):
            await account.list(PODS)
        # the audit log shows the refusal (the cluster tier holds our components to it)
        [refused] = plane.refused_requests({"system:serviceaccount:kube-system:pyhami-scheduler"})
        assert refused.startswith(
            "system:serviceaccount:kube-system:pyhami-scheduler list /api/v1/pods?limit=500 -> 403"
        )
        await plane.grant("view", "system:serviceaccount:kube-system:pyhami-scheduler")
        listed = await eventually_allowed(lambda: account.list(PODS))
        assert [p["metadata"]["name"] for p in listed.items] == ["anywhere"]

        # kubectl works with the admin kubeconfig
        done = subprocess.run(
            [str(plane.kubectl), f"--kubeconfig={plane.admin_kubeconfig}", "get", "pods", "-A"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "anywhere" in done.stdout

    assert not workdir.exists()
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists(), f"{name} (pid {pid}) still runs"
    assert not any(port_is_open(port) for port in ports)


def test_a_nodes_read_refused_for_graph_lag_counts_only_until_it_succeeds(
    kubernetes: BuiltBinaries, tmp_path: Path
) -> None:
    plane = RealControlPlane(kubernetes, tmp_path)
    claim = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c"
    lag = "node: no relationship found between node 'n1' and this object"

    def event(user: str, uri: str, code: int, message: str = "") -> str:
        status = {"code": code, "message": message}
        return json.dumps(
            {"user": {"username": user}, "verb": "get", "requestURI": uri, "responseStatus": status}
        )

    def refused(*lines: str) -> list[str]:
        plane.audit_log.write_text("".join(f"{line}\n" for line in lines))
        return plane.refused_requests({"system:node:n1", "alice"})

    assert refused(event("system:node:n1", claim, 403, lag)) != [], "never answered"
    assert (
        refused(event("system:node:n1", claim, 403, lag), event("system:node:n1", claim, 200)) == []
    )
    assert refused(event("system:node:n1", claim, 200), event("system:node:n1", claim, 403, lag))
    rbac = "cannot get resource"
    assert refused(event("system:node:n1", claim, 403, rbac), event("system:node:n1", claim, 200))
    assert refused(event("alice", claim, 403, lag), event("alice", claim, 200)), "not a node"
