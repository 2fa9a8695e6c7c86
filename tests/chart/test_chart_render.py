"""The chart rendered by the real helm binary, for several value sets, and checked for real:
strict Kubernetes schemas, our own config loaders and CLI parsers, mounts, selectors, RBAC."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import typer
import yaml

from pyhami.devices.config import parse_device_config
from pyhami.kube.dra_manifests import device_class
from pyhami.sim.demo.cluster import WEBHOOKS, trusted_writers_condition
from pyhami.testing.fake_apiserver.cel import compile_expression
from pyhami.testing.scheduler_harness.config import ExtenderConfig

from .commands import parse_pyhami
from .render import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUE_SETS,
    Rendered,
    helm,
    render,
    set_flags,
    values,
)

# Chart.yaml's kubeVersion floor and the newest schemas kubernetes-validate bundles.
KUBE_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# The DRA driver's ValidatingAdmissionPolicy and its binding: admissionregistration.k8s.io/v1
# from 1.30.
NEWER_THAN_1_29 = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")

# The used fields of the CRD kinds the chart renders; anything else is rejected.
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["selector", "endpoints"],
        "additionalProperties": False,
        "properties": {
            "selector": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"matchLabels": {"type": "object"}},
            },
            "namespaceSelector": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
            },
            "endpoints": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["port"],
                    "additionalProperties": False,
                    "properties": {
                        "port": {"type": "string"},
                        "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                    },
                },
            },
        },
    },
    "Issuer": {
        "type": "object",
        "additionalProperties": False,
        "required": ["selfSigned"],
        "properties": {"selfSigned": {"type": "object", "maxProperties": 0}},
    },
    "Certificate": {
        "type": "object",
        "additionalProperties": False,
        "required": ["secretName", "dnsNames", "issuerRef"],
        "properties": {
            "secretName": {"type": "string", "minLength": 1},
            "dnsNames": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "issuerRef": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "kind"],
                "properties": {"name": {"type": "string"}, "kind": {"enum": ["Issuer"]}},
            },
        },
    },
}
CRD_API_VERSIONS = {
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "Issuer": "cert-manager.io/v1",
    "Certificate": "cert-manager.io/v1",
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}

ALL_SETS = sorted(VALUE_SETS)


def pyhami_argv(container: dict[str, Any]) -> list[str] | None:
    """The pyhami command line a container runs (through the plugin's `sh -c ... exec "$@"`)."""
    argv = [*container.get("command", ()), *container.get("args", ())]
    if argv[:2] == ["sh", "-c"]:
        assert argv[2].rstrip().endswith('exec "$@"'), f"{container['name']}: wrapper drops args"
        argv = argv[4:]  # argv[3] is the script's $0
    return argv if argv[:1] == ["pyhami"] else None


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", ()) if "value" in e}


def backed_by_mount(spec: dict[str, Any], container: dict[str, Any], path: str) -> bool:
    volumes = {v["name"] for v in spec.get("volumes", ())}
    target = PurePosixPath(path)
    return any(
        m["name"] in volumes
        and (
            target == PurePosixPath(m["mountPath"])
            or PurePosixPath(m["mountPath"]) in target.parents
        )
        for m in container.get("volumeMounts", ())
    )


# --- helm itself ------------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_helm_lint_strict(value_set: str) -> None:
    out = helm("lint", "--strict", str(CHART), *set_flags(VALUE_SETS[value_set]))
    assert "0 chart(s) failed" in out


def test_a_wrong_value_type_fails_to_render() -> None:
    with pytest.raises(AssertionError, match="failed"):
        helm("template", "x", str(CHART), "--set", "scheduler.replicas=many")


# --- schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("value_set", ALL_SETS)
def test_every_object_passes_the_strict_schema(value_set: str, kube_version: str) -> None:
    for obj in render(value_set).objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in NEWER_THAN_1_29 and kube_version == KUBE_VERSIONS[0]:
            continue  # rendered only with DRA on, which needs Kubernetes 1.34
        if obj["kind"] in CRD_SCHEMAS:
            assert obj["apiVersion"] == CRD_API_VERSIONS[obj["kind"]], name
            jsonschema.validate(obj["spec"], CRD_SCHEMAS[obj["kind"]])
        else:
            try:
                kubernetes_validate.validate(obj, kube_version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{name} invalid for Kubernetes {kube_version}: {error.message}")


def test_the_validators_reject_unknown_fields() -> None:
    """Guards the schema test itself: a misspelt field must not slip through."""
    deployment = render("defaults").one("Deployment")
    bad = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSIONS[0], strict=True)
    certificate = render("cert-manager").one("Certificate")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**certificate["spec"], "dnsName": ["x"]}, CRD_SCHEMAS["Certificate"])


# --- the scheduler ----------------------------------------------------------------------------


def kube_scheduler_config(rendered: Rendered) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        rendered.one("ConfigMap", "-newversion")["data"]["config.yaml"]
    )
    return config


def extender_container(rendered: Rendered) -> dict[str, Any]:
    spec = rendered.one("Deployment")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == "vgpu-scheduler-extender")


@pytest.mark.parametrize("value_set", ["defaults", "custom-names", "leader-3-replicas"])
def test_kube_scheduler_config_drives_the_extender_the_pod_serves(value_set: str) -> None:
    rendered = render(value_set)
    vals = values(value_set)
    config = kube_scheduler_config(rendered)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == [vals["schedulerName"]]
    assert config["leaderElection"]["leaderElect"] is vals["scheduler"]["leaderElect"]
    (entry,) = config["extenders"]
    extender = ExtenderConfig.from_kube_scheduler_config(entry)
    assert (extender.filter_verb, extender.bind_verb) == ("filter", "bind")
    assert extender.ignorable is False
    assert extender.node_cache_capable
    names = {
        vals[k]
        for k in (
            "resourceName",
            "resourceMem",
            "resourceMemPercentage",
            "resourceCores",
            "resourcePriority",
        )
    }
    assert {r.name for r in extender.managed_resources} == names
    assert all(r.ignored_by_scheduler for r in extender.managed_resources)
    # kube-scheduler shares the pod with the extender: the URL must hit the extender's bind port.
    params = parse_pyhami(pyhami_argv(extender_container(rendered)) or [])
    bind_port = params["http_bind"].rpartition(":")[2]
    assert extender.url_prefix == f"https://127.0.0.1:{bind_port}"
    assert params["scheduler_name"] == vals["schedulerName"]
    assert params["leader_elect"] is vals["scheduler"]["leaderElect"]
    if params["leader_elect"]:
        # The extender follows the Lease its pod's kube-scheduler campaigns for, and leads
        # while that kube-scheduler does: one Lease for both (a name nobody writes would
        # leave every replica a follower, refusing every /filter).
        assert not params["leader_elect_campaign"]
        election = config["leaderElection"]
        followed = (params["leader_elect_resource_name"], params["leader_elect_resource_namespace"])
        assert followed == (election["resourceName"], election["resourceNamespace"])


def test_service_and_webhook_reach_the_extender_port() -> None:
    rendered = render("defaults")
    ports = {p["name"]: p["containerPort"] for p in extender_container(rendered)["ports"]}
    params = parse_pyhami(pyhami_argv(extender_container(rendered)) or [])
    assert ports["http"] == int(params["http_bind"].rpartition(":")[2])
    assert ports["metrics"] == int(params["metrics_bind_address"].rpartition(":")[2])
    service = rendered.one("Service", "-scheduler")
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    assert by_name["http"]["targetPort"] == "http"
    assert by_name["monitor"]["targetPort"] == "metrics"
    hooks = rendered.one("MutatingWebhookConfiguration")["webhooks"]
    assert [hook["name"] for hook in hooks] == ["vgpu.hami.io", "ownership.pyhami.io"]
    for hook in hooks:
        target = hook["clientConfig"]["service"]
        assert (target["name"], target["namespace"]) == (service["metadata"]["name"], NAMESPACE)
        assert target["port"] == by_name["http"]["port"]
        assert target["path"] in scheduler_routes()
        assert hook["rules"][0]["resources"] == ["pods"]


def scheduler_routes() -> set[str]:
    """The paths the scheduler's main server really registers (routes only; nothing is served)."""
    from pyhami.devices.config import NvidiaConfig
    from pyhami.scheduler.metrics import SchedulerMetrics
    from pyhami.scheduler.server import build_app
    from pyhami.scheduler.webhook import PodAdmission, WebhookConfig

    unused: Any = object()
    admission = PodAdmission(WebhookConfig(), NvidiaConfig(), lambda _: False)
    web_app = build_app(unused, admission, SchedulerMetrics(lambda: unused))
    return {resource.canonical for resource in web_app.router.resources()}


def skipped_namespaces(hook: dict[str, Any]) -> list[str]:
    (names,) = [
        e["values"]
        for e in hook["namespaceSelector"]["matchExpressions"]
        if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
    ] or [[]]
    return list(names)


def test_webhook_values_reach_the_webhook() -> None:
    hami, ownership = render("everything-on").one("MutatingWebhookConfiguration")["webhooks"]
    assert skipped_namespaces(hami) == ["kube-system", "monitoring"]
    # Our own pods (the release namespace) never wait for the ownership webhook.
    assert skipped_namespaces(ownership) == ["kube-system", "monitoring", NAMESPACE]
    custom = render_with(
        "scheduler.admissionWebhook.customURL.enabled=true",
        "scheduler.admissionWebhook.failurePolicy=Fail",
    )
    hami, ownership = custom.one("MutatingWebhookConfiguration")["webhooks"]
    assert hami["clientConfig"] == {"url": "https://127.0.0.1:31998/webhook"}
    assert ownership["clientConfig"] == {"url": "https://127.0.0.1:31998/webhook/ownership"}
    assert hami["failurePolicy"] == ownership["failurePolicy"] == "Fail"


def test_the_webhooks_are_the_demos() -> None:
    """The demo (and so the whole-system tests) registers what the chart installs with DRA on
    (the demo's DRA nodes run the chart's DRA driver, a trusted writer)."""
    rendered = render("dra-selected")
    hooks = rendered.one("MutatingWebhookConfiguration")["webhooks"]
    demos = [(d.path, d.encode("https://demo", b"")) for d in WEBHOOKS]
    assert [
        (h["name"], h["clientConfig"]["service"]["path"], h["rules"], h.get("objectSelector"))
        for h in hooks
    ] == [(d["name"], path, d["rules"], d.get("objectSelector")) for path, d in demos]
    # The same condition, built from the same list of trusted writers (the chart's own).
    writers = parse_pyhami(pyhami_argv(extender_container(rendered)) or [])["trusted_writers"]
    assert [h.get("matchConditions", []) for h in hooks] == [
        [],
        [trusted_writers_condition(writers).encode()],
    ]
    assert [len(d.get("matchConditions", [])) for _, d in demos] == [0, 1]


def test_ownership_webhook_and_its_trusted_writers() -> None:
    rendered = render_with("scheduler.admissionWebhook.trustedAnnotationWriters={ops-bot}")
    _, ownership = rendered.one("MutatingWebhookConfiguration")["webhooks"]
    assert ownership["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert "objectSelector" not in ownership, "a user can label a pod hami.io/webhook=ignore"
    accounts = [
        rendered.one(kind)["spec"]["template"]["spec"]["serviceAccountName"]
        for kind in ("Deployment", "DaemonSet")
    ]
    params = parse_pyhami(pyhami_argv(extender_container(rendered)) or [])
    assert params["trusted_writers"] == [
        *(f"system:serviceaccount:{NAMESPACE}:{account}" for account in accounts),
        "ops-bot",
    ]
    # Their updates skip the webhook (matchConditions), everyone else's and every create do not.
    (condition,) = ownership["matchConditions"]
    program = compile_expression(condition["expression"])

    def reviewed(operation: str, username: str) -> bool:
        request = {"operation": operation, "userInfo": {"username": username}}
        decision = program.evaluate({"request": request, "object": {}, "oldObject": {}})
        assert isinstance(decision, bool)
        return decision

    for writer in params["trusted_writers"]:
        assert not reviewed("UPDATE", writer)
        assert reviewed("CREATE", writer)
    assert reviewed("UPDATE", "system:serviceaccount:tools:janitor")
    prefixed = render_with(
        "scheduler.admissionWebhook.trustedAnnotationWriters={system:serviceaccount:tools:}"
    )
    (condition,) = prefixed.one("MutatingWebhookConfiguration")["webhooks"][1]["matchConditions"]
    program = compile_expression(condition["expression"])
    assert not reviewed("UPDATE", "system:serviceaccount:tools:janitor")
    for stranger in ("alice", "system:serviceaccount:tools", "ops-bot-2", ""):
        assert reviewed("UPDATE", stranger)
    off = render_with("scheduler.admissionWebhook.protectSchedulerAnnotations=false")
    assert [h["name"] for h in off.one("MutatingWebhookConfiguration")["webhooks"]] == [
        "vgpu.hami.io"
    ]


def render_with(*pairs: str) -> Rendered:
    out = helm("template", "gpu", str(CHART), "--namespace", NAMESPACE, *set_flags(pairs))
    return Rendered(tuple(doc for doc in yaml.safe_load_all(out) if doc))


# --- TLS: the cert Job or cert-manager ----------------------------------------------------------


def test_cert_job_creates_the_secret_the_extender_mounts_and_patches_the_webhook() -> None:
    rendered = render("defaults")
    secret = rendered.one("Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"][
        "secretName"
    ]
    job = rendered.one("Job")["spec"]["template"]["spec"]
    create, patch = job["initContainers"][0], job["containers"][0]
    assert (
        f"--secret-name={secret}" in create["args"] and f"--secret-name={secret}" in patch["args"]
    )
    webhook = rendered.one("MutatingWebhookConfiguration")["metadata"]["name"]
    assert f"--webhook-name={webhook}" in patch["args"]
    service = rendered.one("Service", "-scheduler")["metadata"]["name"]
    hosts = next(a for a in create["args"] if a.startswith("--host=")).split("=", 1)[1].split(",")
    assert f"{service}.{NAMESPACE}.svc" in hosts
    assert not rendered.of_kind("Certificate")
    # Without a webhook there is nothing to patch: the Job only creates the Secret.
    off = render("webhook-off")
    assert not off.of_kind("MutatingWebhookConfiguration")
    assert [c["args"][0] for c in off.one("Job")["spec"]["template"]["spec"]["containers"]] == [
        "create"
    ]


def test_cert_manager_replaces_the_job_and_injects_the_ca() -> None:
    rendered = render("cert-manager")
    assert not rendered.of_kind("Job")
    certificate = rendered.one("Certificate")
    issuer = rendered.one("Issuer")
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    webhook = rendered.one("MutatingWebhookConfiguration")
    inject = webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert inject == f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    volumes = rendered.one("Deployment")["spec"]["template"]["spec"]["volumes"]
    assert certificate["spec"]["secretName"] in {
        v.get("secret", {}).get("secretName") for v in volumes
    }
    service = rendered.one("Service", "-scheduler")["metadata"]["name"]
    assert f"{service}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]


# --- containers: arguments and the paths behind them -------------------------------------------


RUNS = {
    "defaults": {"scheduler", "device-plugin", "monitor"},
    "custom-names": {"scheduler", "device-plugin", "monitor"},
    "leader-3-replicas": {"scheduler", "device-plugin", "monitor"},
    "hami-values": {"scheduler", "device-plugin", "monitor"},
    "dra-selected": {"scheduler", "device-plugin", "dra-driver", "monitor"},
    "dra-all": {"scheduler", "dra-driver", "monitor"},
}


@pytest.mark.parametrize("value_set", sorted(RUNS))
def test_every_pyhami_container_parses_and_its_paths_are_mounted(value_set: str) -> None:
    rendered = render(value_set)
    seen = set()
    for spec, container in rendered.containers():
        argv = pyhami_argv(container)
        if argv is None:
            continue
        seen.add(argv[1])
        params = parse_pyhami(argv)
        env = env_of(container)
        paths = [
            str(params[key])
            for key in (
                "device_config_file",
                "cert_file",
                "key_file",
                "config_file",
                "node_config_file",
                "plugin_dir",
                "kubelet_plugins_dir",
                "kubelet_registry_dir",
                "cdi_dir",
            )
            if params.get(key)
        ]
        if argv[1] in ("device-plugin", "dra-driver"):
            paths += [f"{params['hook_path']}/vgpu", "/tmp/vgpulock"]
        if argv[1] == "monitor":
            paths += [f"{env['HOOK_PATH']}/containers", "/tmp/hami"]
        for path in paths:
            assert backed_by_mount(spec, container, path), (
                f"{container['name']}: {path} not mounted"
            )
    assert seen == RUNS[value_set]


def test_the_dra_driver_runs_on_dra_nodes_and_the_device_plugin_keeps_off_them() -> None:
    selected = render("dra-selected")
    driver = selected.one("DaemonSet", "-dra-driver")["spec"]["template"]["spec"]
    plugin = selected.one("DaemonSet", "-device-plugin")["spec"]["template"]["spec"]
    assert driver["nodeSelector"] == {"gpu.pyhami.io/mode": "dra"}
    [term] = plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {
        "matchExpressions": [{"key": "gpu.pyhami.io/mode", "operator": "NotIn", "values": ["dra"]}]
    }
    # one monitor, the same beside either component, and libvgpu installed the same way
    by_name = [{c["name"]: c for c in spec["containers"]} for spec in (driver, plugin)]
    assert by_name[0]["vgpu-monitor"] == by_name[1]["vgpu-monitor"]
    assert by_name[0]["dra-driver"]["command"][2] == by_name[1]["device-plugin"]["command"][2]
    # the driver labels the pods it prepares hami.io/vgpu-node: a trusted writer
    account = f"system:serviceaccount:{NAMESPACE}:{driver['serviceAccountName']}"
    writers = parse_pyhami(pyhami_argv(extender_container(selected)) or [])["trusted_writers"]
    assert account in writers
    assert (
        account
        not in parse_pyhami(pyhami_argv(extender_container(render("defaults"))) or [])[
            "trusted_writers"
        ]
    )
    [policy] = selected.of_kind("ValidatingAdmissionPolicy")
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == f'request.userInfo.username == "{account}"'
    assert (
        selected.one("ValidatingAdmissionPolicyBinding")["spec"]["policyName"]
        == (policy["metadata"]["name"])
    )
    assert (
        render_with("dra.mode=selected", "dra.driver.ownNodeSlicesOnly=false").of_kind(
            "ValidatingAdmissionPolicy"
        )
        == []
    )
    everywhere = render("dra-all")
    [only] = everywhere.of_kind("DaemonSet")
    assert only["metadata"]["name"].endswith("-dra-driver"), "no device plugin with dra.mode=all"
    gpu_nodes = values("dra-all")["devicePlugin"]["nvidiaNodeSelector"]
    assert only["spec"]["template"]["spec"]["nodeSelector"] == gpu_nodes
    assert [d["metadata"]["name"] for d in render("defaults").of_kind("DaemonSet")] == [
        f"{RELEASE}-pyhami-device-plugin"
    ]


def test_the_device_plugins_own_affinity_keeps_its_terms_with_dra_selected() -> None:
    rendered = render_with(
        "dra.mode=selected",
        "devicePlugin.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=zone",
        "devicePlugin.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    )
    spec = rendered.one("DaemonSet", "-device-plugin")["spec"]["template"]["spec"]
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "zone", "operator": "Exists"},
        {"key": "gpu.pyhami.io/mode", "operator": "NotIn", "values": ["dra"]},
    ]


def test_the_plugin_copies_libvgpu_where_it_mounts_it_from() -> None:
    rendered = render("custom-names")
    spec = rendered.one("DaemonSet")["spec"]["template"]["spec"]
    plugin = next(c for c in spec["containers"] if c["name"] == "device-plugin")
    params = parse_pyhami(pyhami_argv(plugin) or [])
    vgpu = f"{params['hook_path']}/vgpu"
    script = shlex.split(plugin["command"][2])
    assert script[:4] == [
        "cp",
        "-f",
        "/opt/pyhami/lib/libvgpu.so",
        f"{vgpu}/libvgpu.so.{params['libvgpu_version']}",
    ]
    assert f"{vgpu}/ld.so.preload" in script
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in plugin["volumeMounts"]}
    # The plugin hands kubelet its own paths as host paths: they must be the same directory.
    assert host[mounts[vgpu]] == vgpu
    assert host[mounts["/tmp"]] == "/tmp"
    monitor = next(c for c in spec["containers"] if c["name"] == "vgpu-monitor")
    assert env_of(monitor)["HOOK_PATH"] == vgpu


@pytest.mark.parametrize("value_set", ["defaults", "everything-on"])
def test_toolkit_feature_values_reach_the_plugin_as_hamis_env(value_set: str) -> None:
    """HAMi's gdrcopyEnabled/gdsEnabled/mofedEnabled: env only when set to a bool, read by
    the plugin's options (null keeps the plugin's default, off)."""
    spec = render(value_set).one("DaemonSet")["spec"]["template"]["spec"]
    plugin = next(c for c in spec["containers"] if c["name"] == "device-plugin")
    env = env_of(plugin)
    params = parse_pyhami(pyhami_argv(plugin) or [], env)
    vals = values(value_set)["devicePlugin"]
    for key, name in (("gdrcopy", "GDRCOPY"), ("gds", "GDS"), ("mofed", "MOFED")):
        setting = vals[f"{key}Enabled"]
        assert env.get(f"{name}_ENABLED") == (None if setting is None else str(setting).lower())
        assert params[f"{key}_enabled"] is bool(setting)


def test_limit_control_namespaces_reach_the_webhook_and_the_plugin() -> None:
    rendered = render_with(
        "scheduler.admissionWebhook.allowLimitControlNamespaces={gpu-lab,research}"
    )
    scheduler = parse_pyhami(pyhami_argv(extender_container(rendered)) or [])
    assert scheduler["limit_control_namespaces"] == ["gpu-lab", "research"]
    spec = rendered.one("DaemonSet")["spec"]["template"]["spec"]
    plugin = next(c for c in spec["containers"] if c["name"] == "device-plugin")
    params = parse_pyhami(pyhami_argv(plugin) or [], env_of(plugin))
    assert params["limit_control_namespaces"] == ["gpu-lab", "research"]
    with pytest.raises(AssertionError, match="allowLimitControlNamespaces"):
        render_with("scheduler.admissionWebhook.allowLimitControlNamespaces={Not_A_Namespace}")


def test_monitor_rejects_what_the_chart_must_not_pass() -> None:
    """Guards the argument test: a bad flag value is an error, not ignored."""
    with pytest.raises(typer.BadParameter):
        parse_pyhami(["pyhami", "device-plugin", "-v=lots"])


@pytest.mark.parametrize("command", ["scheduler", "device-plugin"])
@pytest.mark.parametrize(
    ("argv", "level"),
    [([], 0), (["-v=4"], 4), (["--v=5"], 5), (["-v", "3"], 3), (["-v4"], 4), (["--v", "2"], 2)],
)
def test_klog_verbosity_takes_every_spelling_hamis_charts_use(
    command: str, argv: list[str], level: int
) -> None:
    assert parse_pyhami(["pyhami", command, *argv])["verbosity"] == level


# --- ConfigMaps -------------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", ["defaults", "custom-names", "hami-values"])
def test_device_configmap_loads_with_our_loader(value_set: str) -> None:
    vals = values(value_set)
    config = parse_device_config(
        render(value_set).one("ConfigMap", "-device")["data"]["device-config.yaml"]
    )
    nvidia = config.nvidia
    assert nvidia.resource_count_name == vals["resourceName"]
    assert nvidia.resource_memory_name == vals["resourceMem"]
    assert nvidia.resource_memory_percentage_name == vals["resourceMemPercentage"]
    assert nvidia.resource_core_name == vals["resourceCores"]
    assert nvidia.resource_priority_name == vals["resourcePriority"]
    assert nvidia.device_split_count == vals["devicePlugin"]["deviceSplitCount"]
    assert nvidia.pre_configured_device_memory == vals["devicePlugin"]["preConfiguredDeviceMemory"]
    assert nvidia.enable_numa_topology is vals["devicePlugin"]["enableNumaTopology"]
    for key, field in (
        ("memoryFactor", "memory_factor"),
        ("gpuCorePolicy", "gpu_core_policy"),
        ("libCudaLogLevel", "lib_cuda_log_level"),
        ("defaultMemory", "default_memory"),
        ("defaultCores", "default_cores"),
        ("defaultGPUNum", "default_gpu_num"),
    ):
        assert getattr(nvidia, field) == vals["devices"]["nvidia"][key], key
    assert nvidia.mig_profile_allowlist, "HAMi's MIG allowlist ships by default"


def test_node_configmap_is_the_plugins_node_config_file() -> None:
    rendered = render("defaults")
    node_config = rendered.one("ConfigMap", "-device-plugin")
    spec = rendered.one("DaemonSet")["spec"]["template"]["spec"]
    volume = next(
        v
        for v in spec["volumes"]
        if v.get("configMap", {}).get("name") == node_config["metadata"]["name"]
    )
    plugin = next(c for c in spec["containers"] if c["name"] == "device-plugin")
    params = parse_pyhami(pyhami_argv(plugin) or [])
    mount = next(m for m in plugin["volumeMounts"] if m["name"] == volume["name"])
    assert (
        PurePosixPath(params["node_config_file"])
        == PurePosixPath(mount["mountPath"]) / "config.json"
    )
    assert yaml.safe_load(node_config["data"]["config.json"]) == {"nodeconfig": []}


# --- labels, selectors, switches ----------------------------------------------------------------


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_selectors_match_between_workloads_services_and_monitors(value_set: str) -> None:
    rendered = render(value_set)
    pod_labels = []
    for kind in ("Deployment", "DaemonSet"):
        for workload in rendered.of_kind(kind):
            labels = workload["spec"]["template"]["metadata"]["labels"]
            selector = workload["spec"]["selector"]["matchLabels"]
            assert selector.items() <= labels.items(), workload["metadata"]["name"]
            pod_labels.append(labels)
    for service in rendered.of_kind("Service"):
        matches = [
            labels for labels in pod_labels if service["spec"]["selector"].items() <= labels.items()
        ]
        assert len(matches) == 1, (
            f"Service {service['metadata']['name']} selects {len(matches)} workloads"
        )
    for monitor in rendered.of_kind("ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"].items()
        services = [
            s for s in rendered.of_kind("Service") if wanted <= s["metadata"]["labels"].items()
        ]
        assert len(services) == 1, monitor["metadata"]["name"]
        port_names = {p["name"] for p in services[0]["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    for pdb in rendered.of_kind("PodDisruptionBudget"):
        assert any(
            pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
            for labels in pod_labels
        )


def test_components_switch_off_one_at_a_time() -> None:
    kinds_off = {o["kind"] for o in render("scheduler-off").objects}
    assert not kinds_off & {"Deployment", "MutatingWebhookConfiguration", "Job"}
    assert "DaemonSet" in kinds_off
    plugin_off = render("device-plugin-off")
    assert not plugin_off.of_kind("DaemonSet")
    assert plugin_off.of_kind("Deployment")
    assert all("device-plugin" not in o["metadata"]["name"] for o in plugin_off.objects)
    both_off = render_with("scheduler.enabled=false", "devicePlugin.enabled=false")
    assert both_off.objects == ()


def test_disruption_budget_only_with_several_replicas() -> None:
    assert not render("defaults").of_kind("PodDisruptionBudget")
    assert render("leader-3-replicas").one("Deployment")["spec"]["replicas"] == 3
    assert render("leader-3-replicas").one("PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_namespace_override_and_global_metadata() -> None:
    for obj in render("custom-names").objects:
        if obj["metadata"]["name"].endswith("-authentication-reader"):
            # kube-scheduler's read of the cluster's authentication ConfigMap, where it lives
            assert obj["metadata"]["namespace"] == "kube-system"
        elif obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "gpu-system", obj["metadata"]["name"]
        for subject in obj.get("subjects", ()):
            assert subject["namespace"] == "gpu-system"
    everything = render("everything-on")
    cert_job = render_with("global.labels.team=gpu")
    for obj in (*everything.objects, *cert_job.objects):
        assert obj["metadata"]["labels"]["team"] == "gpu", obj["metadata"]["name"]
    for spec in everything.pod_specs():
        assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert everything.one("Deployment")["metadata"]["annotations"] == {"owner": "ops"}


def test_dra_values_render_the_device_class_the_flag_and_only_the_webhooks_dra_grants() -> None:
    """(Kubernetes' DRA kinds are newer than the offline schemas: the DeviceClass is the one
    the DRA tests on the real control plane create, and kube-apiserver validates that.)"""
    out = helm(
        "template",
        "pyhami",
        str(CHART),
        *set_flags(("dra.mode=selected", "dra.deviceClass.create=true")),
    )
    rendered = Rendered(tuple(doc for doc in yaml.safe_load_all(out) if doc))
    assert rendered.one("DeviceClass")["spec"] == device_class()["spec"]
    assert any(
        "--dra-mode=selected" in [*c.get("command", ()), *c.get("args", ())]
        for _, c in rendered.containers()
    )
    rules = [
        rule
        for role in rendered.of_kind("ClusterRole")
        if role["metadata"]["name"].endswith("-scheduler")
        for rule in role.get("rules") or ()
        if "resource.k8s.io" in rule["apiGroups"]
    ]
    # templates for translated pods; the slices' card sizes for gpumem-percentage
    assert rules == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaimtemplates"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "watch"],
        },
    ]
    defaults = render("defaults")
    assert defaults.of_kind("DeviceClass") == []
    assert not any("--dra-mode" in " ".join(c.get("args", ())) for _, c in defaults.containers())
