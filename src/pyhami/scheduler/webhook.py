"""The mutating admission webhook's decisions.

Pure functions of the AdmissionRequest and the configuration; the HTTP handler only
decodes, calls `review` and encodes.

Security rule (pyhami, not HAMi): the annotations the scheduler writes
(`hami.io/vgpu-node`, `…-devices-to-allocate`, `…-devices-allocated`, `hami.io/bind-phase`,
the node label mirror, …) are the record the ledger and the device plugin trust. A user
must not be able to choose cards or hide usage by writing them. So:
* on CREATE they are **removed** from every pod (GPU or not, whichever scheduler it names),
  with an admission warning naming them. Removing, not rejecting, keeps manifests copied
  from a running pod (`kubectl get -o yaml | kubectl create -f -`) working;
* on UPDATE (when the webhook is also registered for UPDATE) a change to any of them by a
  user outside `trusted_writers` is **rejected**, because after creation only the scheduler
  and the device plugin may move a pod through its allocation states.

HAMi's webhook configuration skips pods labelled `hami.io/webhook: ignore` (so that with
`failurePolicy: Fail` our own pods can start while the webhook is down), and any user may put
that label on a pod. So the rule alone is served on a second path, `review_ownership`, for a
webhook the chart registers without that object selector (skipping the release namespace
instead, so that our own pods still start).

Two more refusals (pyhami, not HAMi), for the pods the webhook takes:
* a GPU resource value nobody can honour (`nvidia.com/gpucores: 4294967246`, `gpumem: 16Gi`):
  `check_resource_values`, the same check `/filter` runs;
* in a container that asks for GPUs, an `env` entry that controls libvgpu
  (`CUDA_DISABLE_CONTROL`, `CUDA_DEVICE_MEMORY_LIMIT_0`, …; `controls_libvgpu`), unless the
  operator allows it for the pod's namespace. Values the webhook itself writes
  (`CUDA_TASK_PRIORITY` from the priority resource, the configured core policy) pass, so a
  pod copied from a running one is admitted again. `envFrom` is not seen: libvgpu takes its
  limits from the file the device plugin writes, not from the environment.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.libvgpu_env import controls_libvgpu, derived_env
from pyhami.devices.nvidia.request import check_resource_values
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil
from pyhami.devices.vendor import ContainerSpecError
from pyhami.kube import JsonObject, KubeError
from pyhami.kube.views import read_container
from pyhami.model import ContainerView, PodSpecError
from pyhami.protocol import LABEL_VGPU_NODE
from pyhami.scheduler.admission import AdmissionRequest, AdmissionResponse, json_patch
from pyhami.scheduler.dra_admission import (
    DraMode,
    DraTranslationError,
    heads_to_dra,
    translate_to_claims,
)

DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """Scheduler flags that shape admission."""

    scheduler_name: str = ""
    force_overwrite_default_scheduler: bool = True
    # Usernames (exact, or prefixes ending in ':') allowed to change scheduler-owned keys.
    trusted_writers: tuple[str, ...] = ()
    # Every annotation key the scheduler or device plugin owns (all vendors).
    owned_annotations: frozenset[str] = frozenset()
    # Namespaces whose pods may set the env that controls libvgpu (--allow-limit-control-namespace).
    limit_control_namespaces: frozenset[str] = frozenset()
    # Which GPU pods ask for DRA claims instead of HAMi's resources (--dra-mode).
    dra_mode: DraMode = "off"


class AdmissionError(ValueError):
    """A container asks for something invalid; the webhook answers 500 (HAMi's choice)."""


def quantity_value(text: object, where: str) -> int:
    """Kubernetes `Quantity.Value()`: the value in units, fractions rounded up."""
    try:
        return value_ceil(parse_quantity(text))
    except QuantityError as err:
        raise AdmissionError(f"{where}: {err}") from err


def _lookup(container: Mapping[str, Any], name: str) -> object | None:
    """The container's value for a resource as the mutation left it: its limit, else its
    request (the container's view is the one from before the mutation)."""
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        values = resources.get(part) or {}
        if name and name in values:
            found: object = values[name]
            return found
    return None


def _has_limit(container: Mapping[str, Any], name: str) -> bool:
    limits = (container.get("resources") or {}).get("limits") or {}
    return bool(name) and name in limits


def _set_limit(container: JsonObject, name: str, value: str) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.get("limits")
    if not isinstance(limits, dict):
        limits = resources["limits"] = {}
    limits[name] = value


def _append_env(container: JsonObject, name: str, value: str) -> None:
    env = container.get("env")
    if not isinstance(env, list):
        env = container["env"] = []
    if {"name": name, "value": value} not in env:  # already there: a copied or re-admitted pod
        env.append({"name": name, "value": value})


def webhook_env(container: ContainerView, cfg: NvidiaConfig) -> dict[str, str]:
    """The libvgpu settings the webhook itself writes into a container's env."""
    try:
        return derived_env(
            container,
            priority_resource=cfg.resource_priority_name,
            core_policy=cfg.gpu_core_policy,
        )
    except QuantityError as err:
        where = f"container {container.name}: {cfg.resource_priority_name}"
        raise AdmissionError(f"{where}: {err}") from err


def limit_control_refusal(
    container: ContainerView, cfg: NvidiaConfig, namespace: str
) -> str | None:
    """Why the container may not carry its env (None: it may): a variable that controls
    libvgpu, other than a value the webhook writes itself."""
    own = webhook_env(container, cfg)
    for name, value in container.env:
        written_by_us = name in own and own[name] == value
        if controls_libvgpu(name) and not written_by_us:
            return (
                f"container {container.name!r}: env {name} controls libvgpu (the "
                "GPU memory and core limits) and may not be set by a pod; the operator may "
                f"allow it for namespace {namespace!r} (scheduler flag "
                "--allow-limit-control-namespace, chart value "
                "scheduler.admissionWebhook.allowLimitControlNamespaces)"
            )
    return None


def mutate_nvidia_container(
    container: JsonObject, view: ContainerView, pod: JsonObject, cfg: NvidiaConfig
) -> bool:
    """NVIDIA MutateAdmission for one container (`view`: the container as it came in); True
    when it asks for NVIDIA devices."""
    cname = str(container.get("name") or "")
    percentage = _lookup(container, cfg.resource_memory_percentage_name)
    percentage_value: int | None = None
    if percentage is not None:
        percentage_value = quantity_value(
            percentage, f"container {cname}: {cfg.resource_memory_percentage_name}"
        )
    for name, value in webhook_env(view, cfg).items():
        _append_env(container, name, value)

    has_resource = _has_limit(container, cfg.resource_count_name)
    wants_share = any(_has_limit(container, name) for name in _share_names(cfg))
    if not has_resource and cfg.default_gpu_num > 0 and wants_share:
        _set_limit(container, cfg.resource_count_name, str(cfg.default_gpu_num))
        has_resource = True

    count_given = _lookup(container, cfg.resource_count_name) is not None
    cores_given = _lookup(container, cfg.resource_core_name) is not None
    if count_given and cfg.resource_core_name and not cores_given:
        if percentage is not None:
            exclusive = percentage_value == 100
        else:
            memory_given = _lookup(container, cfg.resource_memory_name) is not None
            exclusive = not cfg.resource_memory_name or not memory_given
        if exclusive:
            _set_limit(container, cfg.resource_core_name, "100")
            has_resource = True

    spec = pod.setdefault("spec", {})
    if has_resource and not spec.get("runtimeClassName") and cfg.runtime_class_name:
        spec["runtimeClassName"] = cfg.runtime_class_name
    if not has_resource and cfg.overwrite_env:
        _append_env(container, "NVIDIA_VISIBLE_DEVICES", "none")
    return has_resource


def _containers(spec: Mapping[str, Any], key: str) -> list[JsonObject]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise AdmissionError(f"spec.{key} must be a list of containers")
    return value


def _owned_fields(pod: Mapping[str, Any], owned: frozenset[str]) -> dict[str, str]:
    """The scheduler-owned annotations and label, keyed as the refusal names them."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    fields = {f"annotation {k}": v for k, v in annotations.items() if k in owned}
    labels = metadata.get("labels") or {}
    if LABEL_VGPU_NODE in labels:
        fields[f"label {LABEL_VGPU_NODE}"] = labels[LABEL_VGPU_NODE]
    return fields


def _strip_owned(pod: JsonObject, owned: frozenset[str]) -> list[str]:
    metadata = pod.get("metadata") or {}
    removed: list[str] = []
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        for key in sorted(k for k in annotations if k in owned):
            del annotations[key]
            removed.append(f"annotation {key}")
    labels = metadata.get("labels")
    if isinstance(labels, dict) and LABEL_VGPU_NODE in labels:
        del labels[LABEL_VGPU_NODE]
        removed.append(f"label {LABEL_VGPU_NODE}")
    return removed


def _namespace_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "default")


def _trusted(username: str, trusted: Sequence[str]) -> bool:
    return any(username.startswith(t) if t.endswith(":") else username == t for t in trusted)


class PodAdmission:
    """Decides AdmissionReviews for pods."""

    def __init__(
        self,
        cfg: WebhookConfig,
        nvidia: NvidiaConfig,
        exceeds_quota: Callable[[JsonObject], bool],
        ensure_object: Callable[[JsonObject], Awaitable[None]] | None = None,
        dra_card_memories: Callable[[], Collection[int]] = frozenset,
    ) -> None:
        self.cfg = cfg
        self.nvidia = nvidia
        self._exceeds_quota = exceeds_quota
        self._ensure_object = ensure_object
        # the memory sizes (bytes) of the DRA driver's GPUs, for gpumem-percentage
        self._dra_card_memories = dra_card_memories

    async def create_claim_templates(self, response: AdmissionResponse) -> AdmissionResponse:
        """Create the ResourceClaimTemplates an allowed answer's pod names (one that exists
        already is kept: templates are named by their content), before the pod is created;
        when one cannot be, the pod is refused naming why."""
        for template in response.claim_templates:
            name = template["metadata"]["name"]
            if self._ensure_object is None:
                return AdmissionResponse.errored(
                    500, f"cannot create ResourceClaimTemplate {name}: no API client"
                )
            try:
                await self._ensure_object(template)
            except KubeError as err:
                return AdmissionResponse.errored(
                    500, f"cannot create ResourceClaimTemplate {name}: {err}"
                )
        return response

    def review(self, request: AdmissionRequest) -> AdmissionResponse:
        """HAMi's webhook: the ownership rule, then the GPU pod mutation on CREATE."""
        if request.operation == "UPDATE":
            return self._review_update(request)
        if request.operation != "CREATE":
            return AdmissionResponse.allow()
        before = request.object
        pod = copy.deepcopy(before)
        warnings = self._strip_owned(pod)
        try:
            decision = self._mutate(pod, request.namespace or _namespace_of(pod))
        except AdmissionError as err:
            return AdmissionResponse.errored(500, str(err))
        if decision is not None and not decision.allowed:
            return decision
        message = decision.message if decision is not None else ""
        return AdmissionResponse(
            allowed=True,
            message=message,
            patch=json_patch(before, pod),
            warnings=warnings,
            claim_templates=decision.claim_templates if decision is not None else (),
        )

    def review_ownership(self, request: AdmissionRequest) -> AdmissionResponse:
        """The ownership rule alone, for every pod whatever its labels; nothing else changes."""
        if request.operation == "UPDATE":
            return self._review_update(request)
        if request.operation != "CREATE":
            return AdmissionResponse.allow()
        pod = copy.deepcopy(request.object)
        warnings = self._strip_owned(pod)
        return AdmissionResponse(
            allowed=True, patch=json_patch(request.object, pod), warnings=warnings
        )

    def _strip_owned(self, pod: JsonObject) -> list[str]:
        removed = _strip_owned(pod, self.cfg.owned_annotations)
        return [f"removed scheduler-owned {what}" for what in removed]

    def _review_update(self, request: AdmissionRequest) -> AdmissionResponse:
        owned = self.cfg.owned_annotations
        old = _owned_fields(request.old_object or {}, owned)
        new = _owned_fields(request.object, owned)
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        if changed and not _trusted(request.username, self.cfg.trusted_writers):
            return AdmissionResponse.deny(
                f"{', '.join(changed)} may be changed by the scheduler and the device plugin "
                f"only; {request.username or 'this user'} is not a trusted annotation writer "
                "(scheduler flag --trusted-annotation-writer)"
            )
        return AdmissionResponse.allow()

    def _mutate(self, pod: JsonObject, namespace: str) -> AdmissionResponse | None:
        """HAMi's procedure on the (already stripped) pod; None means allowed with the patch."""
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            raise AdmissionError("pod has no spec")
        init = _containers(spec, "initContainers")
        app = _containers(spec, "containers")
        if not app:
            return AdmissionResponse.deny("pod has no containers")
        current = str(spec.get("schedulerName") or "")
        ours = self.cfg.scheduler_name
        takes_default = current == DEFAULT_SCHEDULER and self.cfg.force_overwrite_default_scheduler
        if current and not takes_default and current != ours:
            return AdmissionResponse.allow("pod already has different scheduler assigned")
        privileged = next(
            (
                c
                for c in (*init, *app)
                if ((c.get("securityContext") or {}).get("privileged")) is True
            ),
            None,
        )
        containers = (*init, *app)
        try:
            # Read before the mutation adds the webhook's own env and limits.
            views = [read_container(c, init=n < len(init)) for n, c in enumerate(containers)]
            for view in views:
                check_resource_values(view, self.nvidia)
        except (ContainerSpecError, PodSpecError) as err:
            return AdmissionResponse.deny(str(err))
        if self.cfg.dra_mode != "off" and heads_to_dra(pod, self.cfg.dra_mode):
            return self._admit_to_dra(pod, namespace, views, privileged)
        has_resource = False
        may_control = namespace in self.cfg.limit_control_namespaces
        for container, view in zip(containers, views, strict=True):
            refusal = limit_control_refusal(view, self.nvidia, namespace)
            if not mutate_nvidia_container(container, view, pod, self.nvidia):
                continue
            has_resource = True
            if refusal is not None and not may_control:
                return AdmissionResponse.deny(refusal)
        if privileged is not None and has_resource:
            return AdmissionResponse.deny(f"container {privileged.get('name', '')} is privileged")
        if has_resource and ours:
            spec["schedulerName"] = ours
            if spec.get("nodeName"):
                return AdmissionResponse.deny("pod has node assigned")
        if has_resource and self._exceeds_quota(pod):
            return AdmissionResponse.deny("exceeding resource quota")
        return None

    def _admit_to_dra(
        self,
        pod: JsonObject,
        namespace: str,
        containers: Sequence[ContainerView],
        privileged: Mapping[str, Any] | None,
    ) -> AdmissionResponse:
        """A pod headed to DRA nodes: its GPU shares become claims; kube-scheduler places it."""
        gpu_names = (self.nvidia.resource_count_name, *_share_names(self.nvidia))
        gpu_containers = [
            c for c in containers if any(n and c.quantity(n) is not None for n in gpu_names)
        ]
        refusals = (limit_control_refusal(c, self.nvidia, namespace) for c in gpu_containers)
        refusal = next(filter(None, refusals), None)
        if refusal is not None and namespace not in self.cfg.limit_control_namespaces:
            return AdmissionResponse.deny(refusal)
        try:
            templates = translate_to_claims(
                pod, containers, namespace, self.nvidia, self._dra_card_memories()
            )
        except DraTranslationError as err:
            return AdmissionResponse.deny(str(err))
        if privileged is not None and gpu_containers:
            return AdmissionResponse.deny(f"container {privileged.get('name', '')} is privileged")
        return AdmissionResponse(allowed=True, claim_templates=tuple(templates))


def _share_names(cfg: NvidiaConfig) -> tuple[str, ...]:
    return (cfg.resource_memory_name, cfg.resource_memory_percentage_name, cfg.resource_core_name)
