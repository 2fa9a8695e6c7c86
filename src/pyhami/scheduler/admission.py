"""AdmissionReview (admission.k8s.io v1 and v1beta1) in and out, and RFC 6902 patches.

Wire behaviour follows controller-runtime's admission webhook (HAMi's webhook library): the HTTP
status is always 200, the decision is in the body, a reply carries the request's apiVersion
and kind, and transport-level failures (empty body, wrong content type, undecodable body) are
answered without apiVersion and kind.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyhami.kube import JsonObject

# controller-runtime's admission body limit.
MAX_ADMISSION_BODY = 7 << 20
ADMISSION_VERSIONS = frozenset({"admission.k8s.io/v1", "admission.k8s.io/v1beta1"})


class AdmissionDecodeError(ValueError):
    """The body is not an AdmissionReview we can answer; `code` goes into the reply status."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of `AdmissionReview.request` the webhook reads."""

    api_version: str
    uid: str
    operation: str
    namespace: str
    object: JsonObject
    username: str = ""
    old_object: JsonObject | None = None

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
            review = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise AdmissionDecodeError(f"couldn't decode AdmissionReview: {err}") from err
        if not isinstance(review, dict):
            raise AdmissionDecodeError("couldn't decode AdmissionReview: not a JSON object")
        api_version = review.get("apiVersion")
        if api_version not in ADMISSION_VERSIONS or review.get("kind") != "AdmissionReview":
            kind = review.get("kind")
            raise AdmissionDecodeError(
                f"unsupported AdmissionReview apiVersion={api_version!r} kind={kind!r}"
            )
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
            object=obj,
            username=str(user.get("username") or "") if isinstance(user, dict) else "",
            old_object=old if isinstance(old, dict) else None,
        )


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """One admission decision; `to_review` renders it for the request it answers."""

    allowed: bool
    code: int = 200
    message: str = ""
    reason: str = ""
    patch: Sequence[Mapping[str, Any]] = ()
    warnings: Sequence[str] = field(default_factory=tuple)
    # ResourceClaimTemplates the patched pod names: created before the answer is sent
    claim_templates: Sequence[JsonObject] = ()

    @classmethod
    def allow(cls, message: str = "") -> AdmissionResponse:
        return cls(allowed=True, message=message)

    @classmethod
    def deny(cls, message: str) -> AdmissionResponse:
        return cls(allowed=False, code=403, reason="Forbidden", message=message)

    @classmethod
    def errored(cls, code: int, message: str) -> AdmissionResponse:
        return cls(allowed=False, code=code, message=message)

    def _response(self, uid: str) -> JsonObject:
        status: JsonObject = {"metadata": {}, "code": self.code}
        if self.message:
            status["message"] = self.message
        if self.reason:
            status["reason"] = self.reason
        response: JsonObject = {"uid": uid, "allowed": self.allowed, "status": status}
        if self.patch:
            encoded = json.dumps(list(self.patch), separators=(",", ":")).encode()
            response["patch"] = base64.b64encode(encoded).decode()
            response["patchType"] = "JSONPatch"
        if self.warnings:
            response["warnings"] = list(self.warnings)
        return response

    def to_review(self, request: AdmissionRequest) -> JsonObject:
        return {
            "apiVersion": request.api_version,
            "kind": "AdmissionReview",
            "response": self._response(request.uid),
        }

    def to_bare_review(self) -> JsonObject:
        """The reply to a body we could not decode: no apiVersion, no kind, no uid."""
        return {"response": self._response("")}


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
