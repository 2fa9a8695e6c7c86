"""RBAC least privilege, checked two ways.

* Statically: the rendered rules grant exactly the (verb, resource) pairs our components' code
  asks the API server for, found in their source by walking the calls.
* At run time: the demo cluster runs each component as its own ServiceAccount, the API double
  records who asked for what (`FakeKubeAPIServer.requests_by_user`), and every request the
  scheduler, device plugin and monitor made must be allowed by the chart's rules for the
  ServiceAccount its workload runs as, in the namespace it was made in."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyhami.sim.demo.cluster import (
    COMPONENT_NAMESPACE,
    DEVICE_PLUGIN_USER,
    SCHEDULER_USER,
    DemoCluster,
)
from pyhami.sim.demo.pods import parse_pods
from pyhami.sim.demo.run import submit_all
from pyhami.sim.demo.settings import DemoSettings
from pyhami.testing.fake_apiserver import RequestKey

from .render import NAMESPACE, ROOT, Rendered, render

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
    "evict_pod": ("create", "pods/eviction"),
    "get_node": ("get", "nodes"),
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
        tree = ast.parse(path.read_text())
        # names bound to `partial(ViewInformer, client, ...)`: their first argument is the resource
        factories = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "partial"
            and any(isinstance(a, ast.Name) and "Informer" in a.id for a in node.value.args[:1])
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            # A helper counts when referenced at all: the scheduler hands `client.create_event`
            # to its EventRecorder rather than calling it in place.
            if isinstance(node, ast.Attribute) and node.attr in HELPERS:
                made.add(HELPERS[node.attr])
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            first = node.args[1] if len(node.args) > 1 else None
            informer = isinstance(func, ast.Name) and func.id in ("Informer", "ViewInformer")
            if isinstance(func, ast.Name) and func.id in factories:
                informer, first = True, node.args[0] if node.args else None
            if informer and isinstance(first, ast.Name):
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
    # the webhook writes ResourceClaimTemplates only for DRA nodes, and reads the DRA GPUs'
    # memory sizes from ResourceSlices: granted with DRA on
    for_dra = {
        ("create", "resourceclaimtemplates"),
        ("list", "resourceslices"),
        ("watch", "resourceslices"),
    }
    assert grants == used - for_dra
    assert granted("dra-selected", "-scheduler", ("ClusterRole", "Role")) == grants | for_dra


def test_device_plugin_role_grants_exactly_what_plugin_and_monitor_call() -> None:
    used = requests_made("deviceplugin") | requests_made("monitor")
    assert ("patch", "nodes") in used
    assert granted("defaults", "-device-plugin", ("ClusterRole",)) == used


def test_dra_driver_role_grants_exactly_what_driver_and_monitor_call() -> None:
    used = requests_made("dra") | requests_made("monitor")
    assert ("update", "resourceslices") in used and ("list", "pods") in used  # the walk works
    assert granted("dra-selected", "-dra-driver", ("ClusterRole",)) == used
    assert granted("dra-all", "-dra-driver", ("ClusterRole",)) == used
    assert granted("defaults", "-dra-driver", ("ClusterRole",)) == set(), "DRA is off"


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


# --- run time ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    rule: dict[str, Any]
    namespace: str | None  # None: every namespace (a ClusterRoleBinding)

    def allows(self, request: RequestKey) -> bool:
        rule = self.rule
        return (
            request.verb in rule["verbs"]
            and request.group in rule.get("apiGroups", ())
            and request.resource in rule["resources"]
            # Requests are recorded without the object's name: a rule narrowed by name is
            # not taken as allowing them.
            and not rule.get("resourceNames")
            and (self.namespace is None or self.namespace == request.namespace)
        )


def grants_for(rendered: Rendered, workload_kind: str, name_suffix: str) -> list[Grant]:
    """The chart's own rules bound to the ServiceAccount the workload runs as.

    Built-in roles the chart binds (system:kube-scheduler, for the kube-scheduler container
    that shares the scheduler's ServiceAccount) are left out: our code must not lean on them."""
    workload = rendered.one(workload_kind, name_suffix)
    account = workload["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = workload["metadata"]["namespace"]
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in rendered.objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    grants = []
    for binding in rendered.of_kind("ClusterRoleBinding") + rendered.of_kind("RoleBinding"):
        subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        if subject not in binding["subjects"]:
            continue
        scope = binding["metadata"].get("namespace")  # None for a ClusterRoleBinding
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"]))
        if role is not None:
            grants += [Grant(rule, scope) for rule in role["rules"]]
    return grants


def in_chart_namespace(request: RequestKey) -> RequestKey:
    """The demo's components live in COMPONENT_NAMESPACE; the chart's in the release's."""
    if request.namespace != COMPONENT_NAMESPACE:
        return request
    return RequestKey(request.username, request.verb, request.group, request.resource, NAMESPACE)


DEMO_PODS = """kind: Pod
metadata: {name: shared}
spec: {containers: [{name: c, image: cuda, resources: {limits: {nvidia.com/gpu: 1,
  nvidia.com/gpumem: 2000, nvidia.com/gpucores: 30}}}]}
---
kind: Pod
metadata: {name: two-cards}
spec: {containers: [{name: c, image: cuda, resources: {limits: {nvidia.com/gpu: 2}}}]}
---
kind: Pod
metadata: {name: too-big}
spec: {containers: [{name: c, image: cuda, resources: {limits: {nvidia.com/gpu: 1,
  nvidia.com/gpumem: 900000}}}]}
"""


async def test_every_request_our_components_make_is_allowed_by_the_charts_rbac() -> None:
    async with DemoCluster(DemoSettings(nodes=2, gpus=2)) as cluster:
        results = await submit_all(cluster, parse_pods(DEMO_PODS, "pods.yaml"))
        assert [r.ok for r in results] == [True, True, False], results
        await cluster.client.delete_pod("default", "shared")
        made = dict(cluster.api.requests_by_user)

    rendered = render("defaults")
    for user, workload in (
        (SCHEDULER_USER, ("Deployment", "-scheduler")),
        (DEVICE_PLUGIN_USER, ("DaemonSet", "-device-plugin")),
    ):
        grants = grants_for(rendered, *workload)
        requests = [in_chart_namespace(r) for r in made if r.username == user]
        assert len({(r.verb, r.resource) for r in requests}) >= 4, f"{user} barely ran"
        refused = [r for r in requests if not any(g.allows(r) for g in grants)]
        assert not refused, f"the chart's RBAC would refuse {user}: {refused}"


def test_a_grant_allows_only_its_verbs_resources_group_and_namespace() -> None:
    rule = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}
    lease = RequestKey("u", "get", "coordination.k8s.io", "leases", NAMESPACE)
    assert Grant(rule, None).allows(lease)
    assert Grant(rule, NAMESPACE).allows(lease)
    assert not Grant(rule, "elsewhere").allows(lease)
    update = RequestKey("u", "update", lease.group, lease.resource, lease.namespace)
    assert not Grant(rule, None).allows(update)
    assert not Grant(rule, None).allows(RequestKey("u", "get", "", "leases", NAMESPACE))
    assert not Grant({**rule, "resourceNames": ["one"]}, None).allows(lease)
    binding = RequestKey("u", "create", "", "pods/binding", "default")
    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    assert not Grant(pods, None).allows(binding), "a subresource is granted by its own name"
