"""The checks and defaults kube-apiserver applies on create and update, for the parts we rely on."""

from __future__ import annotations

import re
from typing import Any

from pyhami.kube import JsonObject
from pyhami.testing.fake_apiserver.objects import StoredObject
from pyhami.testing.fake_apiserver.quantities import (
    QuantityFormatError,
    canonicalize_resource_lists,
)
from pyhami.testing.fake_apiserver.resources import NAMESPACES, PODS, ResourceType
from pyhami.testing.fake_apiserver.selectors import LABEL_KEY, LABEL_VALUE
from pyhami.testing.fake_apiserver.status import ApiError, bad_request, invalid

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
# What a pod update may change in spec (kube-apiserver's ValidatePodUpdate, simplified).
_POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def check_kind(resource: ResourceType, kind: object, api_version: object) -> None:
    """A body of another kind is refused, as the decoder refuses it."""
    if kind not in (None, "", resource.kind) or api_version not in (None, "", resource.api_version):
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({resource.api_version}) or kind ({kind}) does not match {resource.kind}"
        )


def check_name(resource: ResourceType, name: str) -> None:
    as_label = resource is NAMESPACES
    pattern, limit, help_text = (
        (_LABEL, 63, _LABEL_HELP) if as_label else (_SUBDOMAIN, 253, _SUBDOMAIN_HELP)
    )
    if not name:
        required = "Required value: name or generateName is required"
        raise invalid(resource, name, [("metadata.name", "FieldValueRequired", required)])
    if len(name) > limit or not pattern.match(name):
        why = f'Invalid value: "{name}": {help_text}'
        raise invalid(resource, name, [("metadata.name", "FieldValueInvalid", why)])


def _check_pod_spec(name: str, spec: Any) -> None:
    if not isinstance(spec, dict):
        raise invalid(PODS, name, [("spec", "FieldValueRequired", "Required value")])
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise invalid(PODS, name, [("spec.containers", "FieldValueRequired", "Required value")])
    causes = []
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            where = f"spec.{group}[{i}]"
            if not isinstance(container, dict):
                causes.append((where, "FieldValueInvalid", "Invalid value: must be an object"))
                continue
            if not container.get("name"):
                causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
            if not container.get("image"):
                causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
    if causes:
        raise invalid(PODS, name, causes)


def decode_quantities(resource: ResourceType, obj: JsonObject) -> None:
    """Resource quantities as the decoder leaves them (`quantities`): canonical, or a 400."""
    try:
        canonicalize_resource_lists(resource.kind, obj)
    except QuantityFormatError as err:
        raise bad_request(
            f'{resource.kind} in version "{resource.version}" cannot be handled as a '
            f"{resource.kind}: {err}"
        ) from err


def apply_defaults(resource: ResourceType, obj: JsonObject) -> None:
    """The defaults kube-apiserver fills while decoding, so admission webhooks see them."""
    decode_quantities(resource, obj)
    if resource is PODS:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            # A container's limit is its request for each resource it requests nothing of.
            for container in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
                resources = container.get("resources") if isinstance(container, dict) else None
                if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
                    continue
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, value in resources["limits"].items():
                        requests.setdefault(name, value)
                if not requests:
                    del resources["requests"]  # an empty map is as good as none
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif resource is NAMESPACES:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")


_OMIT_EMPTY_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")


def validate(resource: ResourceType, obj: JsonObject, old: StoredObject | None = None) -> None:
    """The checks a create (after admission and name generation) or an update of `old` must
    pass. Labels and annotations: string maps (else the decoder's 400), valid keys and label
    values (else 422), as ValidateObjectMeta checks them. Then ObjectMeta's maps and lists
    are dropped where empty: they are `omitempty`, an empty one is the same as none."""
    metadata = obj["metadata"]
    if old is None:
        check_name(resource, metadata.get("name", ""))
    name = str(metadata.get("name") or metadata.get("generateName") or "")
    causes = []
    for field in ("labels", "annotations"):
        values = metadata.get(field)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise bad_request(
                f'{resource.kind} in version "{resource.version}" cannot be handled as a '
                f"{resource.kind}: metadata.{field} must be a map of strings"
            )
        for key, value in values.items():
            prefix, _, local = key.rpartition("/")
            if len(local) > 63 or len(prefix) > 253 or not LABEL_KEY.match(key):
                causes.append(
                    (
                        f"metadata.{field}",
                        "FieldValueInvalid",
                        f'Invalid value: "{key}": name part must consist of '
                        "alphanumeric characters, '-', '_' or '.'",
                    )
                )
            elif field == "labels" and (len(value) > 63 or not LABEL_VALUE.match(value)):
                causes.append(
                    (
                        "metadata.labels",
                        "FieldValueInvalid",
                        f'Invalid value: "{value}": a valid label must be an empty '
                        "string or consist of alphanumeric characters, '-', '_' or '.'",
                    )
                )
    if causes:
        raise invalid(resource, name, causes)
    for field in _OMIT_EMPTY_METADATA:
        if field in metadata and not metadata[field]:
            del metadata[field]
    if resource is PODS:
        _check_pod_spec(name, obj.get("spec"))
        if old is not None and _pod_spec_without_mutable(
            old.body.get("spec")
        ) != _pod_spec_without_mutable(obj.get("spec")):
            raise invalid(
                PODS, name, [("spec", "FieldValueForbidden", f"Forbidden: {_POD_UPDATE_FORBIDDEN}")]
            )
    elif resource is NAMESPACES:
        metadata.setdefault("labels", {})["kubernetes.io/metadata.name"] = name


def _pod_spec_without_mutable(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    stripped = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "tolerations", "schedulingGates")
    }
    for group in ("containers", "initContainers"):
        if isinstance(stripped.get(group), list):
            stripped[group] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                for c in stripped[group]
            ]
    return stripped


def check_precondition(old: StoredObject, uid: str | None, resource_version: str | None) -> None:
    """DeleteOptions / Binding preconditions: 409 naming both values, as the registry words it."""
    meta, failed = old.meta, ""
    if uid and uid != meta.uid:
        failed = f"UID in precondition: {uid}, UID in object meta: {meta.uid}"
    elif resource_version and resource_version != meta.resource_version:
        failed = (
            f"ResourceVersion in precondition: {resource_version}, "
            f"ResourceVersion in object meta: {meta.resource_version}"
        )
    if failed:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {old.resource.qualified} "{meta.name}": '
            f"Precondition failed: {failed}",
        )
