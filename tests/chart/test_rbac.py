"""RBAC least privilege: the rendered rules grant exactly the (verb, resource) pairs our
components' code asks the API server for, found in their source by walking the calls.

The API double (`pyhami.testing.FakeKubeAPIServer.requests`) counts (verb, resource) but not who
asked, so a recorded run would mix a test's own calls with the component's; the source walk
attributes every call to the package (and the `pyhami.kube` helpers it imports) that makes it."""

from __future__ import annotations

import ast
from pathlib import Path

from .render import ROOT, render

SRC = ROOT / "src" / "pyhami"

# KubeClient's typed helpers -> the (verb, resource) request each one sends.
HELPERS = {
    "get_pod": ("get", "pods"),
    "list_pods": ("list", "pods"),
    "create_pod": ("create", "pods"),
    "patch_pod": ("patch", "pods"),
    "patch_pod_status": ("patch", "pods/status"),
    "delete_pod": ("delete", "pods"),
    "bind_pod": ("create", "pods/binding"),
    "get_node": ("get", "nodes"),
    "list_nodes": ("list", "nodes"),
    "patch_node": ("patch", "nodes"),
    "patch_node_status": ("patch", "nodes/status"),
    "create_event": ("create", "events"),
}
# KubeClient's generic verbs, called with a Resource constant first.
GENERIC = {
    "get": "get",
    "list": "list",
    "watch": "watch",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}


def resource_plurals() -> dict[str, str]:
    tree = ast.parse((SRC / "kube" / "resources.py").read_text())
    plurals = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        target, args = node.targets[0], node.value.args
        if isinstance(target, ast.Name) and len(args) >= 3 and isinstance(args[2], ast.Constant):
            plurals[target.id] = str(args[2].value)
    return plurals


def kube_modules_defining() -> dict[str, Path]:
    found = {}
    for path in (SRC / "kube").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                found[node.name] = path
    return found


def sources_of(package: str) -> set[Path]:
    """The package's files plus the pyhami.kube helper modules they import (not the client)."""
    files = set((SRC / package).rglob("*.py"))
    defining = kube_modules_defining()
    for path in list(files):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyhami.kube"):
                for alias in node.names:
                    module = defining.get(alias.name)
                    if module is not None and module.name not in {"client.py", "resources.py"}:
                        files.add(module)
    return files


def requests_made(package: str) -> set[tuple[str, str]]:
    plurals = resource_plurals()
    made = set()
    for path in sources_of(package):
        for node in ast.walk(ast.parse(path.read_text())):
            # A helper counts when referenced at all: the scheduler hands `client.create_event`
            # to its EventRecorder rather than calling it in place.
            if isinstance(node, ast.Attribute) and node.attr in HELPERS:
                made.add(HELPERS[node.attr])
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            first = node.args[1] if len(node.args) > 1 else None
            if isinstance(func, ast.Name) and func.id == "Informer" and isinstance(first, ast.Name):
                made |= {("list", plurals[first.id]), ("watch", plurals[first.id])}
            if not isinstance(func, ast.Attribute):
                continue
            head = node.args[0] if node.args else None
            if func.attr in GENERIC and isinstance(head, ast.Name) and head.id in plurals:
                made.add((GENERIC[func.attr], plurals[head.id]))
    return made


def granted(value_set: str, role_suffix: str, kinds: tuple[str, ...]) -> set[tuple[str, str]]:
    rendered = render(value_set)
    pairs = set()
    for kind in kinds:
        for role in rendered.of_kind(kind):
            if role["metadata"]["name"].endswith(role_suffix):
                for rule in role["rules"]:
                    assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
                    pairs |= {(v, r) for v in rule["verbs"] for r in rule["resources"]}
    return pairs


def test_scheduler_roles_grant_exactly_what_the_scheduler_calls() -> None:
    used = requests_made("scheduler")
    assert ("create", "pods/binding") in used and ("update", "leases") in used  # the walk works
    grants = granted("leader-3-replicas", "-scheduler", ("ClusterRole", "Role"))
    assert grants == used


def test_device_plugin_role_grants_exactly_what_plugin_and_monitor_call() -> None:
    used = requests_made("deviceplugin") | requests_made("monitor")
    assert ("patch", "nodes") in used
    assert granted("defaults", "-device-plugin", ("ClusterRole",)) == used


def test_no_lease_role_without_leader_election() -> None:
    rendered = render("defaults")
    assert rendered.of_kind("Role")  # leaderElect defaults to true
    off = [o for o in render("scheduler-off").objects if o["kind"] in {"Role", "RoleBinding"}]
    assert off == []


def test_cert_job_reads_and_writes_secrets_only_in_the_release_namespace() -> None:
    rendered = render("defaults")
    cluster = granted("defaults", "-certgen", ("ClusterRole",))
    assert cluster == {
        ("get", "mutatingwebhookconfigurations"),
        ("update", "mutatingwebhookconfigurations"),
    }
    (role,) = [r for r in rendered.of_kind("Role") if r["metadata"]["name"].endswith("-certgen")]
    assert role["metadata"]["namespace"] == rendered.one("Job")["metadata"]["namespace"]
    assert granted("defaults", "-certgen", ("Role",)) == {("get", "secrets"), ("create", "secrets")}
