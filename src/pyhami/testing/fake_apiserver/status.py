"""Errors as kube-apiserver shapes them: a `Status` object with code, reason, message, details."""

from __future__ import annotations

from pyhami.kube.errors import Status, StatusDetails
from pyhami.testing.fake_apiserver.resources import ResourceType

# The reason kube-apiserver puts beside each HTTP status it answers with (metav1.StatusReason).
REASON_FOR_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request kube-apiserver would refuse; `status` is the body it would send."""

    def __init__(
        self, code: int, reason: str, message: str, details: StatusDetails | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = Status(code, reason, message, details)


def _details(resource: ResourceType, name: str, kind: str = "") -> StatusDetails:
    return StatusDetails(name, resource.group, kind or resource.plural)


def not_found(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{resource.qualified} "{name}" not found', _details(resource, name)
    )


def already_exists(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{resource.qualified} "{name}" already exists',
        _details(resource, name),
    )


def conflict(resource: ResourceType, name: str, why: str, subresource: str = "") -> ApiError:
    """errors.NewConflict; the binding registry names the resource `pods/binding`."""
    what = resource.qualified if not subresource else f"{resource.qualified}/{subresource}"
    details = _details(resource, name, f"{resource.plural}/{subresource}" if subresource else "")
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}', details
    )


STALE_OBJECT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(resource: ResourceType, name: str) -> ApiError:
    return conflict(resource, name, STALE_OBJECT)


def invalid(resource: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 for failed validation; each cause is (field, reason, message) like field.Error."""
    summary = ", ".join(f"{path}: {message}" for path, _reason, message in causes)
    shown = summary if len(causes) == 1 else f"[{summary}]"
    details = StatusDetails(name, resource.group, resource.kind, tuple(causes))
    return ApiError(422, "Invalid", f'{resource.kind} "{name}" is invalid: {shown}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        StatusDetails(causes=(("", "", message),)),
    )


def injected(code: int, message: str) -> ApiError:
    """An error a test asked for; shaped like the real one with the same code."""
    return ApiError(code, REASON_FOR_CODE.get(code, "Unknown"), message)
