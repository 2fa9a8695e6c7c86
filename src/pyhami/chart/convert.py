"""HAMi v2.10 chart values → pyhami chart values, with a verdict for every HAMi key.

Every key of HAMi v2.10's `values.yaml` has a rule here, with HAMi's default: `mapped` (same
meaning under the pyhami key named), `changed` (carried over in another shape, which the note
says) or `dropped` (why). Only values that differ from HAMi's default are written, so pyhami's
own defaults apply to the rest. Keys HAMi's chart does not have are dropped and named.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    MAPPED = "mapped"
    CHANGED = "changed"
    DROPPED = "dropped"


@dataclass(frozen=True, slots=True)
class Rule:
    verdict: Verdict
    default: Any  # HAMi v2.10's default (None: absent or null)
    target: str | None = None  # the pyhami key (changed; a mapped key keeps its name)
    note: str = ""  # what changes, or why it is dropped
    transform: Callable[[Any], Any] | None = None


@dataclass(frozen=True, slots=True)
class Line:
    """One HAMi key's outcome, as the report prints it."""

    key: str
    verdict: Verdict
    target: str | None
    note: str
    differs: bool  # the value is not HAMi's default: written, or lost when dropped

    @property
    def written(self) -> bool:
        return self.differs and self.target is not None

    def __str__(self) -> str:
        where = f" -> {self.target}" if self.target and self.target != self.key else ""
        note = f": {self.note}" if self.note else ""
        if self.target is not None:
            extra = "" if self.differs else " (HAMi's default: not written)"
        else:
            extra = " (your value is not carried over)" if self.differs else ""
        return f"{self.verdict.value:<8} {self.key}{where}{note}{extra}"


def _same(default: Any) -> Rule:
    return Rule(Verdict.MAPPED, default)


def _drop(why: str, default: Any = None) -> Rule:
    return Rule(Verdict.DROPPED, default, note=why)


def _env_list(value: Any) -> Any:
    """HAMi's extraEnvs default is a map, but its template pastes it where a list belongs."""
    if isinstance(value, Mapping):
        return [{"name": str(name), "value": str(item)} for name, item in value.items()]
    return value


ONE_IMAGE = (
    "pyhami runs one image (image.repository, image.tag) for the extender, the device plugin "
    "and the monitor; HAMi's images do not run pyhami"
)
PULL_SECRETS = "use global.imagePullSecrets (added to every pod)"
NVIDIA_ONLY = "pyhami's chart deploys and schedules NVIDIA GPUs only"
FIXED_SECURITY = "pyhami's chart sets each container's securityContext itself"
NO_TOOLKIT_WAIT = (
    "pyhami's DaemonSet does not wait for the GPU operator's toolkit: install pyhami once the "
    "toolkit is ready"
)
FIXED_CERT_JOB = "pyhami's cert Jobs have fixed scheduling and run as non-root"
NO_SERVICE_METADATA = "pyhami's Services take no extra labels or annotations"
UNREAD_ENV = "HAMi only turns it into an env variable that no code reads"
OLD_KUBERNETES = "for Kubernetes before 1.22, which pyhami's chart does not support"

_IMAGE_KEYS = ("registry", "repository", "tag", "pullPolicy")


def _image_rules(
    prefix: str, defaults: Mapping[str, str], rule: Callable[[Any], Rule]
) -> dict[str, Rule]:
    rules = {f"{prefix}.{key}": rule(defaults.get(key)) for key in _IMAGE_KEYS}
    rules[f"{prefix}.pullSecrets"] = _drop(PULL_SECRETS, [])
    return rules


def _env_list_rule(target: str) -> Rule:
    note = "a map in HAMi (which its template cannot render), a list of {name, value} here"
    return Rule(Verdict.CHANGED, {}, target, note, _env_list)


def _vendor_keys() -> dict[str, Rule]:
    names = {
        "mluResourceName": "cambricon.com/vmlu",
        "mluResourceMem": "cambricon.com/mlu.smlu.vmemory",
        "mluResourceCores": "cambricon.com/mlu.smlu.vcore",
        "dcuResourceName": "hygon.com/dcunum",
        "dcuResourceMem": "hygon.com/dcumem",
        "dcuResourceCores": "hygon.com/dcucores",
        "metaxResourceName": "metax-tech.com/sgpu",
        "metaxResourceCore": "metax-tech.com/vcore",
        "metaxResourceMem": "metax-tech.com/vmemory",
        "metaxsGPUTopologyAware": "false",
        "enflameResourceNameDRSGCU": "enflame.com/drs-gcu",
        "enflameResourceNameGCUMemory": "enflame.com/gcu-memory",
        "enflameResourceNameGCUCore": "enflame.com/gcu-core",
        "kunlunResourceName": "kunlunxin.com/xpu",
        "kunlunResourceVCountName": "kunlunxin.com/vxpu",
        "kunlunResourceVMemoryName": "kunlunxin.com/vxpu-memory",
        "vastaiResourceName": "vastaitech.com/va",
        "birenResourceName": "birentech.com/gpu",
    }
    rules = {key: _drop(NVIDIA_ONLY, default) for key, default in names.items()}
    for vendor in ("amd", "awsneuron", "kunlun", "enflame", "mthreads", "vastai", "biren"):
        rules[f"devices.{vendor}"] = _drop(NVIDIA_ONLY)
    rules["devices.ascend"] = rules["devices.iluvatar"] = _drop(NVIDIA_ONLY)
    return rules


def _rules() -> dict[str, Rule]:
    hami_image = {"registry": "docker.io", "repository": "projecthami/hami", "tag": ""}
    rules: dict[str, Rule] = {
        "global.imageRegistry": _drop(ONE_IMAGE, ""),
        "global.imagePullSecrets": _same([]),
        "global.imageTag": _drop(ONE_IMAGE, "v2.10.0"),
        "global.gpuHookPath": _same("/usr/local"),
        "global.labels": _same({}),
        "global.annotations": _same({}),
        "global.managedNodeSelectorEnable": _drop(UNREAD_ENV, False),
        "global.managedNodeSelector": _drop(UNREAD_ENV, {"usage": "gpu"}),
        "nameOverride": _same(""),
        "fullnameOverride": _same(""),
        "namespaceOverride": _same(""),
        "resourceName": _same("nvidia.com/gpu"),
        "resourceMem": _same("nvidia.com/gpumem"),
        "resourceMemPercentage": _same("nvidia.com/gpumem-percentage"),
        "resourceCores": _same("nvidia.com/gpucores"),
        "resourcePriority": _same("nvidia.com/priority"),
        "schedulerName": _same("hami-scheduler"),
        "podSecurityPolicy.enabled": _drop(
            "PodSecurityPolicy was removed in Kubernetes 1.25; pyhami's Jobs need none", False
        ),
        "legacyMetrics": _same(False),
        "prometheus.enabled": _same(False),
        "device-config.content": _same(""),
        "scheduler.nodeName": _same(""),
        "scheduler.nodeSelector": _same(None),
        "scheduler.nodeLabelSelector": _same(None),
        "scheduler.overwriteEnv": _same("false"),
        "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy": _same("binpack"),
        "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy": _same("spread"),
        "scheduler.metricsBindAddress": _same(":9395"),
        "scheduler.forceOverwriteDefaultScheduler": _same(True),
        "scheduler.livenessProbe": _same(False),
        "scheduler.leaderElect": _same(True),
        "scheduler.replicas": _same(1),
        "scheduler.kubeScheduler.enabled": _same(True),
        "scheduler.kubeScheduler.resources": _same({}),
        "scheduler.kubeScheduler.extraNewArgs": _drop(
            "pyhami's chart writes kube-scheduler's configuration and flags itself",
            ["--config=/config/config.yaml", "-v=4"],
        ),
        "scheduler.kubeScheduler.extraArgs": _drop(
            OLD_KUBERNETES,
            ["--policy-config-file=/config/config.json", "-v=4"],
        ),
        "scheduler.extender.resources": _same({}),
        "scheduler.extender.extraArgs": _same(["--debug", "-v=4"]),
        "scheduler.nodeLockExpire": _same("5m"),
        "scheduler.podAnnotations": _same({}),
        "scheduler.tolerations": _same([]),
        "scheduler.admissionWebhook.enabled": _same(True),
        "scheduler.admissionWebhook.customURL.enabled": _same(False),
        "scheduler.admissionWebhook.customURL.host": _same("127.0.0.1"),
        "scheduler.admissionWebhook.customURL.port": _same(31998),
        "scheduler.admissionWebhook.customURL.path": _same("/webhook"),
        "scheduler.admissionWebhook.whitelistNamespaces": _same(None),
        "scheduler.admissionWebhook.manageNamespaceSelector": _same(True),
        "scheduler.admissionWebhook.namespaceSelector.matchLabels": _same(None),
        "scheduler.admissionWebhook.namespaceSelector.matchExpressions": _same([]),
        "scheduler.admissionWebhook.objectSelector.matchLabels": _same(None),
        "scheduler.admissionWebhook.objectSelector.matchExpressions": _same([]),
        "scheduler.admissionWebhook.reinvocationPolicy": _same("Never"),
        "scheduler.admissionWebhook.failurePolicy": _same("Ignore"),
        "scheduler.certManager.enabled": _same(False),
        "scheduler.patch.enabled": _drop(
            "pyhami's cert Job runs whenever scheduler.certManager.enabled is false", True
        ),
        "scheduler.patch.priorityClassName": _drop(FIXED_CERT_JOB, ""),
        "scheduler.patch.podAnnotations": _drop(FIXED_CERT_JOB, {}),
        "scheduler.patch.nodeSelector": _drop(FIXED_CERT_JOB, {}),
        "scheduler.patch.tolerations": _drop(FIXED_CERT_JOB, []),
        "scheduler.patch.runAsUser": _drop(FIXED_CERT_JOB, 2000),
        "scheduler.service.type": _same("NodePort"),
        "scheduler.service.httpPort": _same(443),
        "scheduler.service.httpTargetPort": _drop(
            "the extender listens on scheduler.extender.port (8443: not a privileged port); "
            "the Service maps httpPort to it",
            443,
        ),
        "scheduler.service.schedulerPort": _same(31998),
        "scheduler.service.monitorPort": _same(31993),
        "scheduler.service.monitorTargetPort": _drop(
            "it follows scheduler.metricsBindAddress", 9395
        ),
        "scheduler.service.labels": _drop(NO_SERVICE_METADATA, {}),
        "scheduler.service.annotations": _drop(NO_SERVICE_METADATA, {}),
        "devicePlugin.enabled": _same(True),
        "devicePlugin.gpuOperatorToolkitReady": _drop(NO_TOOLKIT_WAIT),
        "devicePlugin.monitor.ctrPath": _same("/usr/local/vgpu/containers"),
        "devicePlugin.monitor.resyncInterval": _same("5m"),
        "devicePlugin.monitor.extraArgs": _same(["-v=4"]),
        "devicePlugin.monitor.extraEnvs": _env_list_rule("devicePlugin.monitor.extraEnvs"),
        "devicePlugin.monitor.securityContext": _drop(FIXED_SECURITY),
        "devicePlugin.monitor.resources": _same({}),
        "devicePlugin.deviceSplitCount": _same(10),
        "devicePlugin.deviceMemoryScaling": _same(1),
        "devicePlugin.deviceCoreScaling": _same(1),
        "devicePlugin.enableNumaTopology": _same(False),
        "devicePlugin.preConfiguredDeviceMemory": _same(0),
        "devicePlugin.nodeConfiguration.config": _same(HAMI_NODE_CONFIG),
        "devicePlugin.nodeConfiguration.externalConfigName": _same(""),
        "devicePlugin.runtimeClassName": _drop(
            "pyhami sets no runtimeClassName, on its DaemonSet or on GPU pods", ""
        ),
        "devicePlugin.createRuntimeClass": _drop("pyhami creates no RuntimeClass", False),
        "devicePlugin.migStrategy": _same("none"),
        "devicePlugin.disablecorelimit": _same("false"),
        "devicePlugin.passDeviceSpecsEnabled": _drop(
            "pyhami's device plugin passes no device specs (HAMi's default)", False
        ),
        "devicePlugin.deviceListStrategy": _drop(
            "pyhami's device plugin lists devices through env only (HAMi's default, envvar)",
            "envvar",
        ),
        "devicePlugin.nvidiaHookPath": _drop("CDI is not supported by pyhami's device plugin"),
        "devicePlugin.nvidiaDriverRoot": _drop(
            "pyhami's chart mounts no driver root: the device plugin uses the host's /"
        ),
        "devicePlugin.gdrcopyEnabled": _same(None),
        "devicePlugin.gdsEnabled": _same(None),
        "devicePlugin.mofedEnabled": _same(None),
        "devicePlugin.extraArgs": _same(["-v=4"]),
        "devicePlugin.extraEnvs": _env_list_rule("devicePlugin.extraEnvs"),
        "devicePlugin.service.type": _same("NodePort"),
        "devicePlugin.service.httpPort": _same(31992),
        "devicePlugin.service.labels": _drop(NO_SERVICE_METADATA, {}),
        "devicePlugin.service.annotations": _drop(NO_SERVICE_METADATA, {}),
        "devicePlugin.pluginPath": _same("/var/lib/kubelet/device-plugins"),
        "devicePlugin.libPath": _drop(
            "libvgpu's host directory is <global.gpuHookPath>/vgpu", "/usr/local/vgpu"
        ),
        "devicePlugin.podAnnotations": _same({}),
        "devicePlugin.hostPID": _drop("set by pyhami's chart", True),
        "devicePlugin.hostNetwork": _drop("set by pyhami's chart", False),
        "devicePlugin.securityContext": _drop(FIXED_SECURITY),
        "devicePlugin.nvidiaNodeSelector": _same({"gpu": "on"}),
        "devicePlugin.tolerations": _same([]),
        "devicePlugin.updateStrategy.type": _same("RollingUpdate"),
        "devicePlugin.updateStrategy.rollingUpdate": _same({"maxUnavailable": 1}),
        "devicePlugin.resources": _same({}),
        "mockDevicePlugin": _drop("`pyhami demo` runs simulated GPU nodes instead"),
        "devices.nvidia.gpuCorePolicy": _same("default"),
        "devices.nvidia.libCudaLogLevel": _same(1),
        **_vendor_keys(),
    }
    for prefix in ("scheduler.extender.image", "devicePlugin.image", "devicePlugin.monitor.image"):
        rules.update(_image_rules(prefix, hami_image, lambda d: _drop(ONE_IMAGE, d)))
    rules.update(
        _image_rules(
            "scheduler.kubeScheduler.image",
            {
                "registry": "registry.cn-hangzhou.aliyuncs.com",
                "repository": "google_containers/kube-scheduler",
                "tag": "",
                "pullPolicy": "IfNotPresent",
            },
            _same,
        )
    )
    rules.update(
        _image_rules(
            "scheduler.patch.image",
            {
                "registry": "docker.io",
                "repository": "jettech/kube-webhook-certgen",
                "tag": "v1.5.2",
                "pullPolicy": "IfNotPresent",
            },
            lambda d: _drop(OLD_KUBERNETES, d),
        )
    )
    certgen = {
        "registry": "docker.io",
        "repository": "liangjw/kube-webhook-certgen",
        "tag": "v1.1.1",
        "pullPolicy": "IfNotPresent",
    }
    for key in _IMAGE_KEYS:
        rules[f"scheduler.patch.imageNew.{key}"] = Rule(
            Verdict.CHANGED, certgen[key], f"scheduler.patch.image.{key}", "the cert Job's image"
        )
    rules["scheduler.patch.imageNew.pullSecrets"] = _drop(PULL_SECRETS, [])
    return rules


HAMI_NODE_CONFIG = """{
    "nodeconfig": [
        {
            "name": "m5-cloudinfra-online02",
            "operatingmode": "hami-core",
            "devicememoryscaling": 1.8,
            "devicesplitcount": 10,
            "migstrategy": "none",
            "filterdevices": {
                "uuid": [],
                "index": []
            }
        }
    ]
}
"""

RULES = _rules()


def _leaves(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    else:
        yield path


def _is_default(value: Any, default: Any) -> bool:
    if value in (None, {}, []) and default in (None, {}, []):
        return True
    if isinstance(default, str) and isinstance(value, str):
        return value.strip() == default.strip()
    return bool(value == default)


def _put(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


def convert(hami: Mapping[str, Any]) -> tuple[dict[str, Any], list[Line]]:
    """pyhami values for HAMi's `hami` values, and one report line per HAMi key."""
    values: dict[str, Any] = {}
    lines: list[Line] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            rule = RULES.get(path)
            if rule is None and isinstance(value, Mapping) and value:
                walk(value, f"{path}.")
            elif rule is None:
                note = "not a key of HAMi v2.10's chart, nor of pyhami's"
                lines.append(Line(path, Verdict.DROPPED, None, note, False))
            elif rule.verdict is Verdict.DROPPED and isinstance(value, Mapping) and value:
                # a whole section without a counterpart: each of its keys, HAMi's default unknown
                lines.extend(
                    Line(leaf, Verdict.DROPPED, None, rule.note, False)
                    for leaf in _leaves(value, path)
                )
            else:
                differs = not _is_default(value, rule.default)
                target = path if rule.verdict is Verdict.MAPPED else rule.target
                if differs and target is not None:
                    converted = rule.transform(value) if rule.transform else value
                    _put(values, target, converted)
                lines.append(Line(path, rule.verdict, target, rule.note, differs))

    walk(hami, "")
    return values, lines
