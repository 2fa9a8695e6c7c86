"""AdmissionReview (admission.k8s.io v1 and v1beta1) in and out, and the pod's RFC 6902 patch.

Both sides of the wire: the webhook's (`AdmissionRequest` in, `AdmissionResponse` out) and
kube-apiserver's (`ReviewRequest` out, `ReviewReply` in), which the fake API server speaks.

A review is decoded once: its pod becomes typed values (marks, an `AdmittedPod`), the webhook
decides on those and answers with typed `PodChanges`, which `AdmissionRequest.admit` turns into
the JSON Patch against the object as it came in.

Wire behaviour follows controller-runtime's admission webhook (HAMi's webhook library): the HTTP
status is always 200, the decision is in the body, a reply carries the request's apiVersion
and kind, and transport-level failures (empty body, wrong content type, undecodable body) are
answered without apiVersion and kind.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyhami.devices.nvidia.dra_claims import GpuShare
from pyhami.kube.client import JsonObject, json_object
from pyhami.kube.dra_manifests import ClaimTemplate
from pyhami.kube.errors import KubeError
from pyhami.kube.extender_wire import compact_json
from pyhami.kube.resources import Resource
from pyhami.kube.views import _object, _strings, read_pod
from pyhami.model import PodView

# controller-runtime's admission body limit.
MAX_ADMISSION_BODY = 7 << 20
ADMISSION_VERSIONS = frozenset({"admission.k8s.io/v1", "admission.k8s.io/v1beta1"})


class AdmissionDecodeError(ValueError):
    """The body is not an AdmissionReview we can answer; `code` goes into the reply status."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


class PodShapeError(ValueError):
    """The pod to admit has no spec, or containers that are no list of objects."""


@dataclass(frozen=True, slots=True)
class PodMarks:
    """A pod's annotations and labels."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


def _marks(pod: Mapping[str, Any]) -> PodMarks:
    where = "AdmissionReview request object: metadata"
    metadata = _object(pod.get("metadata"), where, AdmissionDecodeError)
    annotations, labels = (
        _strings(metadata.get(part), f"{where}.{part}", f"{where}.{part}", AdmissionDecodeError)
        for part in ("annotations", "labels")
    )
    return PodMarks(annotations, labels)


@dataclass(frozen=True, slots=True)
class AdmittedPod:
    """The pod of a CREATE review: its view and the spec fields only admission decides on."""

    view: PodView
    runtime_class_name: str = ""
    privileged: str | None = None  # the first container (init first) with privileged: true


@dataclass(frozen=True, slots=True)
class ContainerChanges:
    """What admission changes in one container."""

    env: tuple[tuple[str, str], ...] = ()  # appended, unless an equal entry is there
    limits: tuple[tuple[str, str], ...] = ()  # set in resources.limits
    claim: GpuShare | None = None  # GPU resources give way to a claim for this share


@dataclass(frozen=True, slots=True)
class PodChanges:
    """What admission changes in a pod; `containers` in order, init containers first."""

    remove_annotations: tuple[str, ...] = ()
    remove_labels: tuple[str, ...] = ()
    containers: tuple[ContainerChanges, ...] = ()
    runtime_class_name: str = ""
    scheduler_name: str = ""
    # the resources a container's claim replaces, removed from its limits and requests
    claimed_resources: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of `AdmissionReview.request` the webhook reads, and the object to patch."""

    api_version: str
    uid: str
    operation: str
    namespace: str
    marks: PodMarks
    username: str = ""
    old_marks: PodMarks = PodMarks()
    _object: JsonObject = field(default_factory=dict)

    @classmethod
    def from_http(cls, body: bytes, content_type: str) -> AdmissionRequest:
        if not body:
            raise AdmissionDecodeError("request body is empty")
        if len(body) > MAX_ADMISSION_BODY:
            raise AdmissionDecodeError(
                f"request entity is larger than limit {MAX_ADMISSION_BODY}", code=413
            )
        if content_type != "application/json":
            raise AdmissionDecodeError(f"contentType={content_type}, expected application/json")
        try:
            review = json_object(body)
        except ValueError as err:
            raise AdmissionDecodeError(f"couldn't decode AdmissionReview: {err}") from err
        api_version, kind = review.get("apiVersion"), review.get("kind")
        if api_version not in ADMISSION_VERSIONS or kind != "AdmissionReview":
            message = f"unsupported AdmissionReview apiVersion={api_version!r} kind={kind!r}"
            raise AdmissionDecodeError(message)
        request = review.get("request")
        if not isinstance(request, dict):
            raise AdmissionDecodeError("AdmissionReview has no request")
        obj = request.get("object")
        if not isinstance(obj, dict):
            raise AdmissionDecodeError("AdmissionReview request has no object")
        old = request.get("oldObject")
        user = request.get("userInfo")
        return cls(
            api_version=str(api_version),
            uid=str(request.get("uid") or ""),
            operation=str(request.get("operation") or ""),
            namespace=str(request.get("namespace") or ""),
            marks=_marks(obj),
            username=str(user.get("username") or "") if isinstance(user, dict) else "",
            old_marks=_marks(old if isinstance(old, dict) else {}),
            _object=obj,
        )

    def pod(self) -> AdmittedPod:
        """The pod being created, read; PodShapeError without a spec or a list of containers,
        PodSpecError when a field is unreadable. A pod may have only `generateName` yet: it is
        read under that name."""
        pod = self._object
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            raise PodShapeError("pod has no spec")
        containers: list[JsonObject] = []
        for key in ("initContainers", "containers"):
            value = spec.get(key) or []
            if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
                raise PodShapeError(f"spec.{key} must be a list of containers")
            containers.extend(value)
        metadata = pod.get("metadata") or {}
        name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
        named = {**metadata, "name": name, "namespace": self._pod_namespace()}
        view = read_pod({**pod, "metadata": named})
        privileged = (
            c for c in containers if (c.get("securityContext") or {}).get("privileged") is True
        )
        runtime_class = spec.get("runtimeClassName")
        return AdmittedPod(
            view=view,
            runtime_class_name=runtime_class if isinstance(runtime_class, str) else "",
            privileged=next((str(c.get("name", "")) for c in privileged), None),
        )

    def _pod_namespace(self) -> str:
        return self.namespace or (self._object.get("metadata") or {}).get("namespace") or "default"

    def admit(
        self, changes: PodChanges, message: str = "", warnings: Sequence[str] = ()
    ) -> AdmissionResponse:
        """Allowed, with the patch that makes `changes` and the claim templates they need."""
        before = self._object
        after = copy.deepcopy(before)
        templates = _apply(after, changes, self._pod_namespace())
        return AdmissionResponse(
            allowed=True,
            message=message,
            patch=json_patch(before, after),
            warnings=warnings,
            claim_templates=templates,
        )


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


def _apply(pod: JsonObject, changes: PodChanges, namespace: str) -> tuple[ClaimTemplate, ...]:
    """Make `changes` in `pod` (in place); the ResourceClaimTemplates its claims name."""
    metadata = pod.get("metadata") or {}
    for part, keys in (
        ("annotations", changes.remove_annotations),
        ("labels", changes.remove_labels),
    ):
        for key in keys:
            del metadata[part][key]
    if not (changes.containers or changes.runtime_class_name or changes.scheduler_name):
        return ()
    spec = pod["spec"]
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    templates: dict[str, ClaimTemplate] = {}
    for number, (container, change) in enumerate(zip(containers, changes.containers, strict=True)):
        for name, value in change.env:
            _append_env(container, name, value)
        for name, value in change.limits:
            _set_limit(container, name, value)
        if change.claim is not None:
            template = ClaimTemplate(namespace, {"gpu": change.claim})
            template_name = template.name
            templates.setdefault(template_name, template)
            resources = container.setdefault("resources", {})
            for part in ("limits", "requests"):
                for resource in changes.claimed_resources:
                    (resources.get(part) or {}).pop(resource, None)
            resources.setdefault("claims", []).append({"name": f"gpu-{number}"})
            spec.setdefault("resourceClaims", []).append(
                {"name": f"gpu-{number}", "resourceClaimTemplateName": template_name}
            )
    if changes.runtime_class_name:
        spec["runtimeClassName"] = changes.runtime_class_name
    if changes.scheduler_name:
        spec["schedulerName"] = changes.scheduler_name
    return tuple(templates.values())


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """One admission decision; `encode_review` renders it for the request it answers."""

    allowed: bool
    code: int = 200
    message: str = ""
    reason: str = ""
    patch: Sequence[JsonObject] = ()
    warnings: Sequence[str] = ()
    # ResourceClaimTemplates the patched pod names: created before the answer is sent
    claim_templates: Sequence[ClaimTemplate] = ()

    @classmethod
    def allow(cls, message: str = "") -> AdmissionResponse:
        return cls(allowed=True, message=message)

    @classmethod
    def deny(cls, message: str) -> AdmissionResponse:
        return cls(allowed=False, code=403, reason="Forbidden", message=message)

    @classmethod
    def errored(cls, code: int, message: str) -> AdmissionResponse:
        return cls(allowed=False, code=code, message=message)

    async def create_claim_templates(
        self, create: Callable[[ClaimTemplate], Awaitable[None]] | None
    ) -> AdmissionResponse:
        """Create the ResourceClaimTemplates this answer's pod names (one that exists already
        is kept: templates are named by their content); when one cannot be, the pod is refused
        naming why."""
        for template in self.claim_templates:
            name = template.name
            if create is None:
                return self.errored(
                    500, f"cannot create ResourceClaimTemplate {name}: no API client"
                )
            try:
                await create(template)
            except KubeError as err:
                return self.errored(500, f"cannot create ResourceClaimTemplate {name}: {err}")
        return self

    def _response(self, uid: str) -> JsonObject:
        status: JsonObject = {"metadata": {}, "code": self.code}
        if self.message:
            status["message"] = self.message
        if self.reason:
            status["reason"] = self.reason
        response: JsonObject = {"uid": uid, "allowed": self.allowed, "status": status}
        if self.patch:
            response["patch"] = base64.b64encode(compact_json(list(self.patch))).decode()
            response["patchType"] = "JSONPatch"
        if self.warnings:
            response["warnings"] = list(self.warnings)
        return response

    def encode_review(self, request: AdmissionRequest) -> bytes:
        response = self._response(request.uid)
        return compact_json(
            {"apiVersion": request.api_version, "kind": "AdmissionReview", "response": response}
        )

    def encode_bare_review(self) -> bytes:
        """The reply to a body we could not decode: no apiVersion, no kind, no uid."""
        return compact_json({"response": self._response("")})


def _pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def json_patch(before: Any, after: Any, path: tuple[str | int, ...] = ()) -> list[JsonObject]:
    """RFC 6902 operations that turn `before` into `after` (objects by key, lists by index)."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[JsonObject] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": _pointer((*path, key))})
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": _pointer((*path, key)), "value": value})
            else:
                ops.extend(json_patch(before[key], value, (*path, key)))
        return ops
    if isinstance(before, list) and isinstance(after, list):
        ops = []
        for index, (old, new) in enumerate(zip(before, after, strict=False)):
            ops.extend(json_patch(old, new, (*path, index)))
        for index in range(len(before), len(after)):
            ops.append({"op": "add", "path": _pointer((*path, index)), "value": after[index]})
        for index in reversed(range(len(after), len(before))):
            ops.append({"op": "remove", "path": _pointer((*path, index))})
        return ops
    if before == after and type(before) is type(after):
        return []
    return [{"op": "replace", "path": _pointer(path), "value": after}]


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    """An AdmissionReview request as kube-apiserver sends it to one webhook."""

    api_version: str  # admission.k8s.io/v1 or v1beta1, as the webhook accepts
    uid: str
    resource: Resource
    namespace: str
    operation: str  # CREATE, UPDATE
    username: str
    groups: tuple[str, ...]
    object: JsonObject  # without apiVersion and kind: the request adds the resource's
    old_object: JsonObject | None  # on UPDATE: the stored object, as the API answers it
    options_kind: str  # CreateOptions, UpdateOptions (a PUT), PatchOptions

    def request(self) -> JsonObject:
        """`AdmissionReview.request` (what matchConditions read as `request`)."""
        resource = self.resource
        kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        gvr = {"group": resource.group, "version": resource.version, "resource": resource.plural}
        return {
            "uid": self.uid,
            "kind": kind,
            "resource": gvr,
            "requestKind": kind,
            "requestResource": gvr,
            "name": self.object.get("metadata", {}).get("name", ""),
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": {"username": self.username, "groups": list(self.groups)},
            "object": {"apiVersion": resource.api_version, "kind": resource.kind, **self.object},
            "oldObject": self.old_object,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": self.options_kind},
        }

    def encode(self) -> JsonObject:
        return {
            "apiVersion": self.api_version,
            "kind": "AdmissionReview",
            "request": self.request(),
        }


@dataclass(frozen=True, slots=True)
class ReviewReply:
    """A webhook's answer to a `ReviewRequest`, as kube-apiserver reads it: the refusal's
    status, or the RFC 6902 operations of an allowed answer's patch (None: no patch)."""

    allowed: bool
    code: int = 0
    reason: str = ""
    message: str = ""
    patch: list[Any] | None = None

    @classmethod
    def decode(cls, answer: object, sent: ReviewRequest) -> ReviewReply:
        """AdmissionDecodeError names what kube-apiserver would refuse. It checks uid, kind and
        patchType of v1 answers only; v1beta1 ones are taken as they come, a patch being read
        as a JSON patch (VerifyAdmissionResponse)."""
        if not isinstance(answer, dict):
            raise AdmissionDecodeError("received invalid webhook response: not a JSON object")
        strict = sent.api_version == "admission.k8s.io/v1"
        response = answer.get("response")
        if not isinstance(response, dict):
            raise AdmissionDecodeError("webhook response was absent")
        if strict and response.get("uid") != sent.uid:
            uid = response.get("uid")
            raise AdmissionDecodeError(f"expected response.uid={sent.uid!r}, got {uid!r}")
        kind = (answer.get("apiVersion"), answer.get("kind"))
        if strict and kind != ("admission.k8s.io/v1", "AdmissionReview"):
            raise AdmissionDecodeError(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got "
                f"{kind[0]}, Kind={kind[1]}"
            )
        patch, patch_type = response.get("patch"), response.get("patchType")
        if strict and bool(patch) != bool(patch_type):
            raise AdmissionDecodeError(
                "webhook returned response.patch but not response.patchType"
                if patch
                else "webhook returned response.patchType but not response.patch"
            )
        if not response.get("allowed"):
            status = response.get("status")
            status = status if isinstance(status, dict) else {}
            return cls(
                False,
                int(status.get("code") or 0),
                str(status.get("reason") or ""),
                str(status.get("message") or ""),
            )
        if not patch:
            return cls(True)
        if strict and patch_type != "JSONPatch":
            raise AdmissionDecodeError(f"unsupported patch type {patch_type!r}")
        try:
            operations = json.loads(base64.b64decode(patch, validate=True))
        except (binascii.Error, ValueError) as err:
            raise AdmissionDecodeError(f"failed to apply the webhook's patch: {err}") from err
        if not isinstance(operations, list):
            raise AdmissionDecodeError(
                "failed to apply the webhook's patch: "
                "a JSON patch must be a JSON array of operations"
            )
        return cls(True, patch=operations)
