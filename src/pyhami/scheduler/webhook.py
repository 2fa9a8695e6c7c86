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

import dataclasses
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.libvgpu_env import controls_libvgpu, derived_env
from pyhami.devices.nvidia.request import check_resource_values
from pyhami.devices.quantity import QuantityError, parse_quantity, value_ceil
from pyhami.devices.vendor import ContainerSpecError
from pyhami.kube.admission_review import (
    AdmissionRequest,
    AdmissionResponse,
    AdmittedPod,
    ContainerChanges,
    PodChanges,
    PodMarks,
    PodShapeError,
)
from pyhami.kube.dra_manifests import ClaimTemplate
from pyhami.model import ContainerView, PodSpecError, PodView
from pyhami.protocol import LABEL_VGPU_NODE
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


def _given(container: ContainerView, name: str) -> object | None:
    """The container's limit for a resource, else its request (None when an empty name)."""
    return container.quantity(name) if name else None


def _has_limit(container: ContainerView, name: str) -> bool:
    return bool(name) and name in container.limits


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
    container: ContainerView, cfg: NvidiaConfig
) -> tuple[ContainerChanges, bool]:
    """NVIDIA MutateAdmission for one container: its changes, and whether it asks for NVIDIA
    devices once they are made."""
    percentage = _given(container, cfg.resource_memory_percentage_name)
    try:  # Kubernetes `Quantity.Value()`: the value in units, fractions rounded up
        whole = None if percentage is None else value_ceil(parse_quantity(percentage))
    except QuantityError as err:
        where = f"container {container.name}: {cfg.resource_memory_percentage_name}"
        raise AdmissionError(f"{where}: {err}") from err
    env = list(webhook_env(container, cfg).items())
    limits: list[tuple[str, str]] = []

    count = cfg.resource_count_name
    has_resource = _has_limit(container, count)
    wants_share = any(_has_limit(container, name) for name in _share_names(cfg))
    if not has_resource and cfg.default_gpu_num > 0 and wants_share:
        limits.append((count, str(cfg.default_gpu_num)))
        has_resource = True

    count_given = bool(count) and (bool(limits) or _given(container, count) is not None)
    cores_given = _given(container, cfg.resource_core_name) is not None
    if count_given and cfg.resource_core_name and not cores_given:
        if percentage is not None:
            exclusive = whole == 100
        else:
            memory_given = _given(container, cfg.resource_memory_name) is not None
            exclusive = not cfg.resource_memory_name or not memory_given
        if exclusive:
            limits.append((cfg.resource_core_name, "100"))
            has_resource = True

    if not has_resource and cfg.overwrite_env:
        env.append(("NVIDIA_VISIBLE_DEVICES", "none"))
    return ContainerChanges(env=tuple(env), limits=tuple(limits)), has_resource


def _with_limits(pod: PodView, changes: Sequence[ContainerChanges]) -> PodView:
    """The pod as its containers' new limits leave it."""
    containers = [
        dataclasses.replace(c, limits={**c.limits, **dict(change.limits)}) if change.limits else c
        for c, change in zip(pod.all_containers, changes, strict=True)
    ]
    init = len(pod.init_containers)
    return dataclasses.replace(
        pod, init_containers=tuple(containers[:init]), containers=tuple(containers[init:])
    )


def _owned_fields(marks: PodMarks, owned: frozenset[str]) -> dict[str, str]:
    """The scheduler-owned annotations and label, keyed as the refusal names them."""
    fields = {f"annotation {k}": v for k, v in marks.annotations.items() if k in owned}
    if LABEL_VGPU_NODE in marks.labels:
        fields[f"label {LABEL_VGPU_NODE}"] = marks.labels[LABEL_VGPU_NODE]
    return fields


def _trusted(username: str, trusted: Sequence[str]) -> bool:
    return any(username.startswith(t) if t.endswith(":") else username == t for t in trusted)


class PodAdmission:
    """Decides AdmissionReviews for pods."""

    def __init__(
        self,
        cfg: WebhookConfig,
        nvidia: NvidiaConfig,
        exceeds_quota: Callable[[PodView], bool],
        ensure_object: Callable[[ClaimTemplate], Awaitable[None]] | None = None,
        dra_card_memories: Callable[[], Collection[int]] = frozenset,
    ) -> None:
        self.cfg = cfg
        self.nvidia = nvidia
        self._exceeds_quota = exceeds_quota
        # creates the ResourceClaimTemplates an allowed answer's pod names, before the pod is
        self.ensure_object = ensure_object
        # the memory sizes (bytes) of the DRA driver's GPUs, for gpumem-percentage
        self._dra_card_memories = dra_card_memories

    def review(self, request: AdmissionRequest) -> AdmissionResponse:
        """HAMi's webhook: the ownership rule, then the GPU pod mutation on CREATE."""
        if request.operation != "CREATE":
            return self.review_ownership(request)
        stripped, warnings = self._strip_owned(request.marks)
        try:
            decision = self._mutate(request.pod())
        except (AdmissionError, PodShapeError) as err:
            return AdmissionResponse.errored(500, str(err))
        except PodSpecError as err:
            return AdmissionResponse.deny(str(err))
        if isinstance(decision, AdmissionResponse) and not decision.allowed:
            return decision
        if isinstance(decision, AdmissionResponse):  # left to another scheduler: only stripped
            return request.admit(stripped, decision.message, warnings)
        return request.admit(
            dataclasses.replace(
                decision,
                remove_annotations=stripped.remove_annotations,
                remove_labels=stripped.remove_labels,
            ),
            warnings=warnings,
        )

    def review_ownership(self, request: AdmissionRequest) -> AdmissionResponse:
        """The ownership rule alone, for every pod whatever its labels; nothing else changes."""
        if request.operation == "UPDATE":
            return self._review_update(request)
        if request.operation != "CREATE":
            return AdmissionResponse.allow()
        stripped, warnings = self._strip_owned(request.marks)
        return request.admit(stripped, warnings=warnings)

    def _strip_owned(self, marks: PodMarks) -> tuple[PodChanges, list[str]]:
        """The removal of the scheduler-owned annotations and label, and its warnings."""
        annotations = tuple(sorted(k for k in marks.annotations if k in self.cfg.owned_annotations))
        labels = (LABEL_VGPU_NODE,) if LABEL_VGPU_NODE in marks.labels else ()
        removed = [f"annotation {k}" for k in annotations] + [f"label {k}" for k in labels]
        warnings = [f"removed scheduler-owned {what}" for what in removed]
        return PodChanges(remove_annotations=annotations, remove_labels=labels), warnings

    def _review_update(self, request: AdmissionRequest) -> AdmissionResponse:
        owned = self.cfg.owned_annotations
        old = _owned_fields(request.old_marks, owned)
        new = _owned_fields(request.marks, owned)
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        if changed and not _trusted(request.username, self.cfg.trusted_writers):
            return AdmissionResponse.deny(
                f"{', '.join(changed)} may be changed by the scheduler and the device plugin "
                f"only; {request.username or 'this user'} is not a trusted annotation writer "
                "(scheduler flag --trusted-annotation-writer)"
            )
        return AdmissionResponse.allow()

    def _mutate(self, admitted: AdmittedPod) -> AdmissionResponse | PodChanges:
        """HAMi's procedure: the changes to make, or an answer (a refusal, or a pod left to
        another scheduler)."""
        pod = admitted.view
        if not pod.containers:
            return AdmissionResponse.deny("pod has no containers")
        current = pod.scheduler_name
        ours = self.cfg.scheduler_name
        takes_default = current == DEFAULT_SCHEDULER and self.cfg.force_overwrite_default_scheduler
        if current and not takes_default and current != ours:
            return AdmissionResponse.allow("pod already has different scheduler assigned")
        containers = pod.all_containers
        try:
            for view in containers:
                check_resource_values(view, self.nvidia)
        except ContainerSpecError as err:
            return AdmissionResponse.deny(str(err))
        if heads_to_dra(pod.node_selector, self.cfg.dra_mode):
            return self._admit_to_dra(admitted)
        namespace = pod.namespace
        has_resource = False
        may_control = namespace in self.cfg.limit_control_namespaces
        changes = []
        for view in containers:
            refusal = limit_control_refusal(view, self.nvidia, namespace)
            change, asks = mutate_nvidia_container(view, self.nvidia)
            changes.append(change)
            if not asks:
                continue
            has_resource = True
            if refusal is not None and not may_control:
                return AdmissionResponse.deny(refusal)
        if not has_resource:
            return PodChanges(containers=tuple(changes))
        if admitted.privileged is not None:
            return AdmissionResponse.deny(f"container {admitted.privileged} is privileged")
        if ours and pod.node_name:
            return AdmissionResponse.deny("pod has node assigned")
        if self._exceeds_quota(_with_limits(pod, changes)):
            return AdmissionResponse.deny("exceeding resource quota")
        runtime_class = "" if admitted.runtime_class_name else self.nvidia.runtime_class_name
        return PodChanges(
            containers=tuple(changes), runtime_class_name=runtime_class, scheduler_name=ours
        )

    def _admit_to_dra(self, admitted: AdmittedPod) -> AdmissionResponse | PodChanges:
        """A pod headed to DRA nodes: its GPU shares become claims; kube-scheduler places it."""
        nvidia = self.nvidia
        namespace = admitted.view.namespace
        containers = admitted.view.all_containers
        gpu_names = (nvidia.resource_count_name, *_share_names(nvidia))
        gpu_containers = [
            c for c in containers if any(n and c.quantity(n) is not None for n in gpu_names)
        ]
        refusals = (limit_control_refusal(c, nvidia, namespace) for c in gpu_containers)
        refusal = next(filter(None, refusals), None)
        if refusal is not None and namespace not in self.cfg.limit_control_namespaces:
            return AdmissionResponse.deny(refusal)
        try:
            changes = translate_to_claims(admitted.view, nvidia, self._dra_card_memories())
        except DraTranslationError as err:
            return AdmissionResponse.deny(str(err))
        if admitted.privileged is not None and gpu_containers:
            return AdmissionResponse.deny(f"container {admitted.privileged} is privileged")
        return PodChanges(containers=changes, claimed_resources=gpu_names)


def _share_names(cfg: NvidiaConfig) -> tuple[str, ...]:
    return (cfg.resource_memory_name, cfg.resource_memory_percentage_name, cfg.resource_core_name)
