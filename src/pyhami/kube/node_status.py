"""What kubelet writes, encoded: the Node it registers, its heartbeat Lease, its pods' status.

The node agent (`pyhami.testing.node_agent`) decides; these turn its typed decisions into the
JSON the API server takes.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.kube.client import JsonObject


@dataclass(frozen=True, slots=True)
class ContainerState:
    """One container as kubelet reports it: running, or terminated with `exit_code`; ready
    while its pod runs (a completed init container too)."""

    name: str
    image: str
    exit_code: int | None = None  # None while it runs


@dataclass(frozen=True, slots=True)
class PodStatus:
    """A pod's status as kubelet reports it: Running since `at`, ended at `at` (Succeeded or
    Failed), or Failed for `reason` before any container started."""

    phase: str
    at: str = ""
    init_containers: tuple[ContainerState, ...] = ()  # reported while Running
    containers: tuple[ContainerState, ...] = ()
    reason: str = ""
    message: str = ""


def node_manifest(
    name: str, labels: Mapping[str, str], capacity: Mapping[str, str], now: str
) -> JsonObject:
    """The Node kubelet registers: its hostname and OS labels, Ready, `capacity` for pods."""
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels},
        },
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def node_resource_status(resource: str, capacity: int, allocatable: int) -> JsonObject:
    """The `nodes/status` patch setting one extended resource's capacity and allocatable."""
    return {
        "status": {
            "capacity": {resource: str(capacity)},
            "allocatable": {resource: str(allocatable)},
        }
    }


def _lease_spec(node: str, duration_s: int, renewed: str) -> JsonObject:
    return {"holderIdentity": node, "leaseDurationSeconds": duration_s, "renewTime": renewed}


def node_lease(
    node: str, node_uid: str, namespace: str, duration_s: int, renewed: str
) -> JsonObject:
    """A node's first Lease, owned by its Node (deleting the Node removes the Lease)."""
    owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
    return {
        "metadata": {"name": node, "namespace": namespace, "ownerReferences": [owner]},
        "spec": _lease_spec(node, duration_s, renewed),
    }


def renewed_lease(lease: JsonObject, node: str, duration_s: int, renewed: str) -> JsonObject:
    """`lease` as read, its holder, duration and renewTime set: the body of its update."""
    return {**lease, "spec": {**lease.get("spec", {}), **_lease_spec(node, duration_s, renewed)}}


def _conditions(ready: bool, now: str) -> list[JsonObject]:
    status = "True" if ready else "False"
    return [
        {"type": kind, "status": value, "lastTransitionTime": now}
        for kind, value in (
            ("PodScheduled", "True"),
            ("Initialized", "True"),
            ("ContainersReady", status),
            ("Ready", status),
        )
    ]


def _container_status(state: ContainerState, now: str, ready: bool) -> JsonObject:
    return {
        "name": state.name,
        "image": state.image,
        "ready": ready,
        "started": state.exit_code is None,
        "restartCount": 0,
        "state": (
            {"running": {"startedAt": now}}
            if state.exit_code is None
            else {
                "terminated": {
                    "exitCode": state.exit_code,
                    "reason": "Completed" if state.exit_code == 0 else "Error",
                    "finishedAt": now,
                }
            }
        ),
    }


def pod_status_patch(status: PodStatus) -> JsonObject:
    """The `pods/status` patch reporting `status`."""
    if status.reason:  # refused: no container started
        return {"status": {"phase": "Failed", "reason": status.reason, "message": status.message}}
    at, running = status.at, status.phase == "Running"
    body = {"phase": status.phase, "conditions": _conditions(running, at)}
    if running:
        body["startTime"] = at
        body["initContainerStatuses"] = [
            _container_status(c, at, running) for c in status.init_containers
        ]
    body["containerStatuses"] = [_container_status(c, at, running) for c in status.containers]
    return {"status": body}
