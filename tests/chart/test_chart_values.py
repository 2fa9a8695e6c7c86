"""The chart's values as HAMi names them: each one reaches what our code
reads (CLI flags and env parsed by the real commands, the device config by our loaders), keys the
chart does not know are refused by name, and config changes roll the pods (checksums)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyhami.deviceplugin.config import (
    ConfigError,
    VgpuConfig,
    apply_device_config,
    apply_node_config,
)
from pyhami.deviceplugin.mig import allowed_profiles
from pyhami.devices.config import DeviceConfig, parse_device_config
from pyhami.monitor.settings import MonitorSettings

from .commands import parse_pyhami, scheduler_settings
from .render import (
    CHART,
    VALUE_SETS,
    Rendered,
    helm,
    render,
    render_args,
    values,
)
from .test_chart_render import env_of, pyhami_argv, scheduler_routes

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def render_set(*pairs: str) -> Rendered:
    return render_args(*(flag for pair in pairs for flag in ("--set", pair)))


def container(rendered: Rendered, kind: str, name: str) -> dict[str, Any]:
    spec = rendered.one(kind)["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def pod_annotations(rendered: Rendered, kind: str) -> dict[str, str]:
    annotations: dict[str, str] = rendered.one(kind)["spec"]["template"]["metadata"]["annotations"]
    return annotations


def device_config(rendered: Rendered) -> tuple[str, DeviceConfig]:
    text = rendered.one("ConfigMap", "-device")["data"]["device-config.yaml"]
    return text, parse_device_config(text)


# --- 1. the device plugin sees the node's GPUs ---------------------------------------------------


@pytest.mark.parametrize("value_set", ["defaults", "custom-names", "hami-values"])
def test_the_nvidia_runtime_gives_plugin_and_monitor_nvml(value_set: str) -> None:
    """python:3.11-slim lacks nvidia/cuda's NVIDIA_VISIBLE_DEVICES; without it the NVIDIA
    runtime injects no libnvidia-ml into the container and the plugin finds no GPU."""
    rendered = render(value_set)
    for name in ("device-plugin", "vgpu-monitor"):
        assert env_of(container(rendered, "DaemonSet", name))["NVIDIA_VISIBLE_DEVICES"] == "all"


# --- 2. HAMi's names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "key"),
    [
        ("devicePlugin.disableCoreLimit=true", "disableCoreLimit"),
        ("devicePlugin.hookPath=/opt/hami", "hookPath"),
        ("devicePlugin.nodeSelector.gpu=on", "nodeSelector"),
        ("devicePlugin.monitor.legacyMetrics=true", "legacyMetrics"),
        ("scheduler.serviceMonitor.enabled=true", "serviceMonitor"),
        ("devicePlugin.serviceMonitor.enabled=true", "serviceMonitor"),
        ("imagePullSecrets[0].name=registry", "imagePullSecrets"),
        ("scheduler.kubeScheduler.imageTag=v1.30.0", "imageTag"),
        ("scheduler.patch.imageTag=v1.4.0", "imageTag"),
    ],
)
def test_the_old_pyhami_names_are_refused_by_name(old: str, key: str) -> None:
    with pytest.raises(AssertionError, match=f"Additional property {key} is not allowed"):
        render_set(old)


@pytest.mark.parametrize(
    ("args", "disabled"),
    [
        ((), False),
        (("--set", "devicePlugin.disablecorelimit=true"), True),
        (("--set", "devicePlugin.disablecorelimit=false"), False),
        (("--set-string", "devicePlugin.disablecorelimit=true"), True),
        (("--set-string", "devicePlugin.disablecorelimit=false"), False),
    ],
)
def test_disablecorelimit_takes_a_bool_or_hamis_string(
    args: tuple[str, ...], disabled: bool
) -> None:
    plugin = container(render_args(*args), "DaemonSet", "device-plugin")
    assert parse_pyhami(pyhami_argv(plugin) or [])["disable_core_limit"] is disabled


def test_a_string_other_than_true_or_false_is_refused() -> None:
    with pytest.raises(AssertionError, match="disablecorelimit"):
        render_args("--set-string", "devicePlugin.disablecorelimit=yes")


def test_gpu_hook_path_reaches_plugin_and_monitor() -> None:
    rendered = render("custom-names")
    hook = values("custom-names")["global"]["gpuHookPath"]
    plugin = container(rendered, "DaemonSet", "device-plugin")
    assert parse_pyhami(pyhami_argv(plugin) or [])["hook_path"] == hook
    assert env_of(container(rendered, "DaemonSet", "vgpu-monitor"))["HOOK_PATH"] == f"{hook}/vgpu"


def test_nvidia_node_selector_is_the_daemonsets() -> None:
    spec = render_set("devicePlugin.nvidiaNodeSelector.pool=a100").one("DaemonSet")["spec"]
    assert spec["template"]["spec"]["nodeSelector"] == {"gpu": "on", "pool": "a100"}
    assert render("defaults").one("DaemonSet")["spec"]["template"]["spec"]["nodeSelector"] == {
        "gpu": "on"
    }


@pytest.mark.parametrize("value_set", ["defaults", "hami-values"])
def test_legacy_metrics_reach_scheduler_and_monitor(value_set: str) -> None:
    rendered = render(value_set)
    wanted = values(value_set)["legacyMetrics"]
    extender = container(rendered, "Deployment", "vgpu-scheduler-extender")
    monitor = container(rendered, "DaemonSet", "vgpu-monitor")
    assert parse_pyhami(pyhami_argv(extender) or [])["legacy_metrics"] is wanted
    assert parse_pyhami(pyhami_argv(monitor) or [])["legacy_metrics"] is wanted


def test_prometheus_enabled_is_one_switch_for_both_service_monitors() -> None:
    assert not render("defaults").of_kind("ServiceMonitor")
    monitors = render_set("prometheus.enabled=true", "prometheus.labels.release=kps").of_kind(
        "ServiceMonitor"
    )
    assert len(monitors) == 2
    assert all(m["metadata"]["labels"]["release"] == "kps" for m in monitors)
    only_scheduler = render_set("prometheus.enabled=true", "devicePlugin.enabled=false")
    assert len(only_scheduler.of_kind("ServiceMonitor")) == 1


def test_kube_scheduler_image_defaults_to_the_cluster_version() -> None:
    image = container(
        render_args("--kube-version", "v1.31.1+k3s1"), "Deployment", "kube-scheduler"
    )["image"]
    assert image == "registry.k8s.io/kube-scheduler:v1.31.1"
    pinned = render_set(
        "scheduler.kubeScheduler.image.registry=",
        "scheduler.kubeScheduler.image.repository=mirror/kube-scheduler",
        "scheduler.kubeScheduler.image.tag=v1.30.2",
        "scheduler.kubeScheduler.image.pullPolicy=Always",
    )
    kube = container(pinned, "Deployment", "kube-scheduler")
    assert (kube["image"], kube["imagePullPolicy"]) == ("mirror/kube-scheduler:v1.30.2", "Always")


def test_cert_job_image_is_a_hami_style_map() -> None:
    rendered = render_set(
        "scheduler.patch.image.registry=docker.io",
        "scheduler.patch.image.repository=liangjw/kube-webhook-certgen",
        "scheduler.patch.image.tag=v1.1.1",
    )
    job = rendered.one("Job")["spec"]["template"]["spec"]
    images = {c["image"] for c in (*job["initContainers"], *job["containers"])}
    assert images == {"docker.io/liangjw/kube-webhook-certgen:v1.1.1"}
    with pytest.raises(AssertionError, match="tag"):
        render_set("scheduler.patch.image.tag=")


# --- 3. the schema is closed -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pair", "key"),
    [
        ("devicePlugin.runtimeClassName=nvidia", "runtimeClassName"),
        ("devicePlugin.createRuntimeClass=true", "createRuntimeClass"),
        ("global.imageRegistry=mirror.example.com", "imageRegistry"),
        ("scheduler.kubeQPS=50", "kubeQPS"),
        ("scheduler.patch.imageNew.tag=v1.1.1", "imageNew"),
        ("devices.ascend.enabled=true", "ascend"),
        ("devicePlugin.deviceSplitcount=4", "deviceSplitcount"),  # a misspelling
        ("mockDevicePlugin.enabled=true", "mockDevicePlugin"),
    ],
)
def test_a_key_the_chart_does_not_know_fails_naming_it(pair: str, key: str) -> None:
    for command in ("template", "lint"):
        with pytest.raises(AssertionError, match=f"Additional property {key} is not allowed"):
            helm(command, str(CHART), "--set", pair)


def schema_objects(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "properties" in node:
            yield where, node
        for key, child in node.items():
            yield from schema_objects(child, f"{where}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from schema_objects(child, f"{where}/{i}")


def test_every_object_the_chart_defines_is_closed() -> None:
    """Free-form maps (labels, selectors, resources, affinity) have no `properties`; every
    object that lists its keys refuses others."""
    found = list(schema_objects(SCHEMA))
    assert len(found) > 20
    open_ = [where for where, node in found if node.get("additionalProperties") is not False]
    # The patch image adds `required: tag` to the closed image definition (allOf).
    assert open_ == ["/properties/scheduler/properties/patch/properties/image/allOf/1"]


def schema_keys(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, declared in node.get("properties", {}).items():
        child = resolved(declared)
        nested = child.get("type") == "object" and "properties" in child
        yield from schema_keys(child, f"{prefix}{key}.") if nested else [f"{prefix}{key}"]


def resolved(node: dict[str, Any]) -> dict[str, Any]:
    """A property's schema with a `$ref` (also the first of an allOf) looked up."""
    if "allOf" in node:
        node = node["allOf"][0]
    if "$ref" in node:
        found: dict[str, Any] = SCHEMA["definitions"][node["$ref"].rpartition("/")[2]]
        return found
    return node


def test_values_yaml_sets_every_key_the_schema_allows() -> None:
    """values.yaml documents every value: none exists only in the schema."""
    missing = []
    for dotted in schema_keys(SCHEMA):
        node: Any = DEFAULTS
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(dotted)
                break
            node = node[part]
    assert not missing


# --- 4. the device config ---------------------------------------------------------------------


def test_hamis_device_keys_reach_the_parsed_config() -> None:
    vals = values("hami-values")
    _, config = device_config(render("hami-values"))
    nvidia = config.nvidia
    assert nvidia.overwrite_env is True
    assert nvidia.gpu_core_policy == vals["devices"]["nvidia"]["gpuCorePolicy"] == "force"
    assert nvidia.lib_cuda_log_level == 4
    assert nvidia.memory_factor == 2
    assert nvidia.enable_numa_topology is True
    assert nvidia.pre_configured_device_memory == 81920
    # The device plugin takes the knobs it uses from the same file.
    plugin = apply_device_config(VgpuConfig(), nvidia)
    assert plugin.enable_numa_topology is True
    assert plugin.preconfigured_device_memory == 81920
    assert plugin.lib_cuda_log_level == "4"


def test_hamis_default_mig_allowlist_enables_dynamic_mig() -> None:
    _, config = device_config(render("defaults"))
    allowlist = [
        {"models": list(e.models), "profiles": list(e.profiles)}
        for e in config.nvidia.mig_profile_allowlist
    ]
    assert allowlist == DEFAULTS["devices"]["nvidia"]["migProfileAllowlist"]
    # Each model's NVML name finds its own profiles (the first substring match wins).
    largest = {
        name: allowed_profiles(name, config.nvidia.mig_profile_allowlist)[-1]
        for name in (
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA A100 80GB PCIe",
            "NVIDIA A100-PCIE-40GB",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 NVL",
            "NVIDIA GH200 480GB",
            "NVIDIA H200",
            "NVIDIA H200 NVL",
            "NVIDIA H20",
            "NVIDIA B200",
        )
    }
    assert largest == {
        "NVIDIA A100-SXM4-80GB": "7g.79gb",
        "NVIDIA A100 80GB PCIe": "7g.79gb",
        "NVIDIA A100-PCIE-40GB": "7g.40gb",
        "NVIDIA H100 80GB HBM3": "7g.80gb",
        "NVIDIA H100 NVL": "7g.94gb",
        "NVIDIA GH200 480GB": "7g.96gb",
        "NVIDIA H200": "7g.141gb",
        "NVIDIA H200 NVL": "7g.141gb",
        "NVIDIA H20": "7g.96gb",
        "NVIDIA B200": "7g.180gb",
    }
    # A node switched to operating mode mig starts with it, and refuses to without one.
    mig_node = {"nodeconfig": [{"name": "gpu-1", "operatingmode": "mig"}]}
    plugin = apply_device_config(VgpuConfig(), config.nvidia)
    assert apply_node_config(plugin, mig_node, "gpu-1", "config.json").check("gpu-1")
    _, empty = device_config(render_set("devices.nvidia.migProfileAllowlist=null"))
    with pytest.raises(ConfigError, match="migProfileAllowlist"):
        apply_node_config(
            apply_device_config(VgpuConfig(), empty.nvidia), mig_node, "gpu-1", "config.json"
        ).check("gpu-1")


def test_a_custom_mig_allowlist_replaces_hamis_and_is_checked() -> None:
    _, config = device_config(
        render_set(
            "devices.nvidia.migProfileAllowlist[0].models={A100-SXM4-40GB}",
            "devices.nvidia.migProfileAllowlist[0].profiles={1g.5gb,7g.40gb}",
        )
    )
    (entry,) = config.nvidia.mig_profile_allowlist
    assert (entry.models, entry.profiles) == (("A100-SXM4-40GB",), ("1g.5gb", "7g.40gb"))
    with pytest.raises(AssertionError, match="migProfileAllowlist"):
        render_set(
            "devices.nvidia.migProfileAllowlist[0].models={A30}",
            "devices.nvidia.migProfileAllowlist[0].profiles={6gb}",
        )


CUSTOM_DEVICE_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  deviceSplitCount: 3
  memoryFactor: 4
  gpuCorePolicy: disable
  migProfileAllowlist:
    - models: ["A30"]
      profiles: ["1g.6gb"]
"""


def test_device_config_content_is_used_verbatim(tmp_path: Path) -> None:
    content = tmp_path / "device-config.yaml"
    content.write_text(CUSTOM_DEVICE_CONFIG)
    rendered = render_args(
        "--set-file",
        f"device-config.content={content}",
        "--set",
        "devicePlugin.deviceSplitCount=7",
    )
    text, config = device_config(rendered)
    assert text == CUSTOM_DEVICE_CONFIG
    assert (config.nvidia.device_split_count, config.nvidia.memory_factor) == (3, 4)
    assert config.nvidia.gpu_core_policy == "disable"
    defaults = pod_annotations(render("defaults"), "Deployment")
    assert (
        pod_annotations(rendered, "Deployment")["checksum/hami-scheduler-device-config"]
        != defaults["checksum/hami-scheduler-device-config"]
    )


# --- 5. checksums -----------------------------------------------------------------------------

DEVICE = "checksum/hami-scheduler-device-config"
SCHEDULER = "checksum/hami-scheduler-config"
NODE = "checksum/hami-device-plugin-config"


def checksums(rendered: Rendered) -> dict[str, str]:
    deployment = pod_annotations(rendered, "Deployment")
    daemonset = pod_annotations(rendered, "DaemonSet")
    assert deployment[DEVICE] == daemonset[DEVICE], "one device ConfigMap, one checksum"
    return {SCHEDULER: deployment[SCHEDULER], DEVICE: deployment[DEVICE], NODE: daemonset[NODE]}


@pytest.mark.parametrize(
    ("args", "changed"),
    [
        (("--set", "devicePlugin.deviceSplitCount=5"), {DEVICE}),
        (("--set", "devices.nvidia.gpuCorePolicy=force"), {DEVICE}),
        (("--set", "scheduler.overwriteEnv=true"), {DEVICE}),
        (("--set", "schedulerName=gpu-scheduler"), {SCHEDULER}),
        (("--set", "resourceMem=example.com/vram"), {SCHEDULER, DEVICE}),
        (
            ("--set-json", 'devicePlugin.nodeConfiguration.config="{\\"nodeconfig\\": [{}]}"'),
            {NODE},
        ),
        (("--set", "devicePlugin.nodeConfiguration.externalConfigName=gpu-node-config"), {NODE}),
        (("--set", "devicePlugin.extraArgs={-v=5}"), set()),
    ],
)
def test_a_config_change_changes_exactly_its_checksums(
    args: tuple[str, ...], changed: set[str]
) -> None:
    before = checksums(render("defaults"))
    after = checksums(render_args(*args))
    assert {key for key in before if before[key] != after[key]} == changed
    assert all(len(value) == 64 and int(value, 16) >= 0 for value in after.values())


def test_checksums_sit_beside_the_pod_annotations() -> None:
    rendered = render("hami-values")
    deployment = pod_annotations(rendered, "Deployment")
    daemonset = pod_annotations(rendered, "DaemonSet")
    assert deployment["team"] == "gpu" and SCHEDULER in deployment
    assert daemonset["owner"] == "ops" and NODE in daemonset
    # An external node config is not rendered: its name stands in for its content.
    assert daemonset[NODE] == hashlib.sha256(b"gpu-node-config").hexdigest()


# --- 6. HAMi's other values -------------------------------------------------------------------


@pytest.mark.parametrize("value_set", ["defaults", "hami-values"])
def test_scheduler_values_reach_the_scheduler_settings(value_set: str) -> None:
    rendered = render(value_set)
    vals = values(value_set)["scheduler"]
    extender = container(rendered, "Deployment", "vgpu-scheduler-extender")
    settings = scheduler_settings(pyhami_argv(extender) or [], env_of(extender))
    assert settings.node_label_selector == vals["nodeLabelSelector"]
    assert settings.metrics_bind_address == vals["metricsBindAddress"]
    ports = {p["name"]: p["containerPort"] for p in extender["ports"]}
    assert ports["metrics"] == int(vals["metricsBindAddress"].rpartition(":")[2])
    assert settings.force_overwrite_default_scheduler is vals["forceOverwriteDefaultScheduler"]
    minutes = {"5m": 5, "2m": 2}[vals["nodeLockExpire"]]
    assert settings.node_lock_timeout.total_seconds() == minutes * 60
    assert settings.gpu_scheduler_policy == vals["defaultSchedulerPolicy"]["gpuSchedulerPolicy"]
    spec = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert spec.get("nodeName", "") == vals["nodeName"]


def test_node_label_selector_takes_several_labels_in_one_flag() -> None:
    extender = container(render("hami-values"), "Deployment", "vgpu-scheduler-extender")
    flags = [a for a in extender["command"] if a.startswith("--node-label-selector")]
    assert flags == ["--node-label-selector=gpu=on,zone=a"]


def test_liveness_probes_hit_what_the_containers_serve() -> None:
    defaults = render("defaults")
    assert all("livenessProbe" not in c for _, c in defaults.containers())
    rendered = render("hami-values")
    extender = container(rendered, "Deployment", "vgpu-scheduler-extender")
    probe = extender["livenessProbe"]["httpGet"]
    assert probe["path"] in scheduler_routes()
    assert probe["port"] in {p["name"] for p in extender["ports"]}
    params = parse_pyhami(pyhami_argv(extender) or [])
    assert probe["scheme"] == ("HTTPS" if params["cert_file"] else "HTTP")
    kube = container(rendered, "Deployment", "kube-scheduler")["livenessProbe"]["httpGet"]
    assert (kube["port"], kube["scheme"], kube["path"]) == (10259, "HTTPS", "/healthz")


def test_update_strategy_is_the_daemonsets() -> None:
    default = render("defaults").one("DaemonSet")["spec"]["updateStrategy"]
    assert default == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    assert render("hami-values").one("DaemonSet")["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_extra_envs_reach_plugin_and_monitor() -> None:
    rendered = render("hami-values")
    plugin = container(rendered, "DaemonSet", "device-plugin")
    env = env_of(plugin)
    assert parse_pyhami(pyhami_argv(plugin) or [], env)["health_recovery_seconds"] == 60.0
    by_name = {e["name"]: e for e in plugin["env"]}
    assert by_name["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    monitor_env = {**env_of(container(rendered, "DaemonSet", "vgpu-monitor")), "NODE_NAME": "n"}
    settings, _ = MonitorSettings.from_environment(monitor_env)
    assert settings.kubeconfig == "/etc/kube/config"


def test_topology_aware_policy_turns_on_the_plugins_pair_scores() -> None:
    for value_set, wanted in (("defaults", ""), ("hami-values", "true")):
        plugin = container(render(value_set), "DaemonSet", "device-plugin")
        env = env_of(plugin)
        assert parse_pyhami(pyhami_argv(plugin) or [], env)["enable_topology_score"] == wanted


def test_external_node_config_replaces_the_rendered_one() -> None:
    rendered = render("hami-values")
    assert not [
        c for c in rendered.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-plugin")
    ]
    volumes = rendered.one("DaemonSet")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "node-config", "configMap": {"name": "gpu-node-config"}} in volumes


def test_webhook_selectors_append_the_users_terms() -> None:
    hami, ownership = render("hami-values").one("MutatingWebhookConfiguration")["webhooks"]
    for hook in (hami, ownership):
        selector = hook["namespaceSelector"]
        assert selector["matchLabels"] == {"gpu": "allowed"}
        keys = [e["key"] for e in selector["matchExpressions"]]
        assert keys[0] == "hami.io/webhook" and keys[-1] == "tier"
    objects = hami["objectSelector"]
    assert objects["matchLabels"] == {"gpu": "yes"}
    assert [e["key"] for e in objects["matchExpressions"]] == ["hami.io/webhook", "batch"]
    assert "objectSelector" not in ownership, "a user can label a pod hami.io/webhook=ignore"


def test_unmanaged_namespace_selector_is_left_out() -> None:
    hooks = render_set("scheduler.admissionWebhook.manageNamespaceSelector=false").one(
        "MutatingWebhookConfiguration"
    )["webhooks"]
    assert [h.get("namespaceSelector") for h in hooks] == [None, None]
    # Without it the ownership webhook would review our own pods: with Fail, a deadlock.
    with pytest.raises(AssertionError, match="manageNamespaceSelector=false"):
        render_set(
            "scheduler.admissionWebhook.manageNamespaceSelector=false",
            "scheduler.admissionWebhook.failurePolicy=Fail",
        )
    hooks = render_set(
        "scheduler.admissionWebhook.manageNamespaceSelector=false",
        "scheduler.admissionWebhook.failurePolicy=Fail",
        "scheduler.admissionWebhook.protectSchedulerAnnotations=false",
    ).one("MutatingWebhookConfiguration")["webhooks"]
    assert [h["name"] for h in hooks] == ["vgpu.hami.io"]


def test_the_hami_values_set_covers_the_hami_values_the_chart_takes() -> None:
    """Guards the value set: every HAMi value added here is exercised by the structural tests."""
    keys = {pair.split("=")[0].split("[")[0] for pair in VALUE_SETS["hami-values"]}
    for key in (
        "legacyMetrics",
        "scheduler.overwriteEnv",
        "scheduler.metricsBindAddress",
        "scheduler.forceOverwriteDefaultScheduler",
        "scheduler.livenessProbe",
        "scheduler.nodeLockExpire",
        "devicePlugin.disablecorelimit",
        "devicePlugin.enableNumaTopology",
        "devicePlugin.preConfiguredDeviceMemory",
        "devicePlugin.extraEnvs",
        "devicePlugin.monitor.extraEnvs",
        "devicePlugin.nodeConfiguration.externalConfigName",
        "devices.nvidia.gpuCorePolicy",
        "devices.nvidia.libCudaLogLevel",
        "devices.nvidia.memoryFactor",
    ):
        assert key in keys, key


# --- the scheduler knows its own pod -------------------------------------------------------------


def test_the_extender_gets_its_pod_name_and_namespace_and_our_pods_skip_the_webhook() -> None:
    """Leader election names itself by POD_NAME and labels that pod with its role in
    POD_NAMESPACE (the chart's ServiceAccount prefix is trusted from it); both come from the
    downward API, as in HAMi's chart. Our own pods carry `hami.io/webhook: ignore`."""
    rendered = render("leader-3-replicas")
    extender = container(rendered, "Deployment", "vgpu-scheduler-extender")
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in extender["env"]
        if "valueFrom" in e
    }
    assert fields == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    for kind in ("Deployment", "DaemonSet"):
        labels = rendered.one(kind)["spec"]["template"]["metadata"]["labels"]
        assert labels["hami.io/webhook"] == "ignore", kind
