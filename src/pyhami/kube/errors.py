"""Our own Kubernetes errors, so callers catch meanings, not the HTTP library's exceptions.

`KubeError` carries the Status fields kube-apiserver sent (code, reason, message); the
subclasses are the answers callers branch on. Transport failures are `KubeUnavailable` with
the original exception chained as the cause. `Status` is the other side: the body
kube-apiserver sends (the fake API server answers with it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class KubeError(Exception):
    """Any failed API request; `code` is the HTTP status (0 when no answer came)."""

    def __init__(self, code: int, reason: str, message: str, status: dict[str, Any] | None = None):
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message
        self.status = status or {}


class BadRequest(KubeError):
    """400: the request itself is malformed (bad selector, bad patch document...)."""


class Unauthorized(KubeError):
    """401."""


class Forbidden(KubeError):
    """403: RBAC or an admission webhook said no."""


class NotFound(KubeError):
    """404: the object (or its namespace) does not exist."""


class Conflict(KubeError):
    """409: a stale resourceVersion, a failed precondition, or a bound pod's binding."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: create of a name that is taken."""


class Gone(KubeError):
    """410: the resourceVersion asked for is older than the server keeps; relist."""


class Invalid(KubeError):
    """422: validation failed; `status["details"]["causes"]` says which fields."""


class UnsupportedMediaType(KubeError):
    """415: e.g. a patch content type the server does not take."""


class TooManyRequests(KubeError):
    """429: throttled; retry later."""


class ServerError(KubeError):
    """5xx: the server failed; retrying may help."""


class KubeUnavailable(KubeError):
    """No answer: connection refused or reset, or timed out."""


_BY_CODE: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(code: int, status: dict[str, Any]) -> KubeError:
    """The error for a Status object (from a response body or a watch ERROR event)."""
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "")
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists(code, reason, message, status)
    if code == 410 or reason in ("Expired", "Gone"):
        return Gone(410, reason or "Expired", message, status)
    cls = _BY_CODE.get(code, ServerError if code >= 500 else KubeError)
    return cls(code, reason, message, status)


def error_from_body(code: int, body: bytes) -> KubeError:
    """The error for a non-2xx answer; a body that is not a Status still gives a clear error."""
    try:
        status = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        status = None
    if not isinstance(status, dict):
        text = body[:200].decode("utf-8", "replace")
        return error_from_status(code, {"reason": "Unknown", "message": text or f"HTTP {code}"})
    return error_from_status(code, status)


@dataclass(frozen=True, slots=True)
class StatusDetails:
    """metav1.StatusDetails as the fake API server fills it: name and kind are sent when given."""

    name: str | None = None
    group: str = ""
    kind: str | None = None
    # metav1.StatusCause as (field, reason, message), like field.Error; empty parts left out.
    causes: tuple[tuple[str, str, str], ...] = ()
    retry_after_s: int = 0

    def encode(self) -> dict[str, Any]:
        causes = [
            {k: v for k, v in (("reason", reason), ("message", message), ("field", path)) if v}
            for path, reason, message in self.causes
        ]
        parts = (
            ("name", self.name),
            ("group", self.group or None),
            ("kind", self.kind),
            ("causes", causes or None),
            ("retryAfterSeconds", self.retry_after_s or None),
        )
        return {key: value for key, value in parts if value is not None}


@dataclass(frozen=True, slots=True)
class Status:
    """A metav1.Status body as kube-apiserver sends it: Success for a code below 400 (the code
    alone), else Failure with message, reason and the details when there are some."""

    code: int
    reason: str = ""
    message: str = ""
    details: StatusDetails | None = None

    def encode(self) -> dict[str, Any]:
        head = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
        if self.code < 400:
            return {**head, "status": "Success", "code": self.code}
        details = {} if self.details is None else {"details": self.details.encode()}
        failure = {"status": "Failure", "message": self.message, "reason": self.reason}
        return {**head, **failure, "code": self.code, **details}
