"""Mutating admission: call webhooks over HTTPS with AdmissionReview v1, as kube-apiserver does.

Webhooks come from two places: `register(...)` (URL + CA bundle, handy in tests) and the
MutatingWebhookConfiguration objects in the store (url or service clientConfig; a service is
resolved through `resolve_service`, and its certificate is checked for
`<name>.<namespace>.svc`, as kube-apiserver checks it). They run, for the operations
their rules name (CREATE, and UPDATE with the stored object as `oldObject` on a PUT or PATCH
of the object itself), in order (configurations by name, webhooks in their order), each
seeing the previous one's result.
`failurePolicy: Fail` (the v1 default) turns a call failure into a 500; `Ignore` skips it.
Reinvocation is not done (`reinvocationPolicy: Never`, HAMi's setting).
`matchConditions` are evaluated (the CEL that `cel.py` supports; other CEL is refused when the
webhook is registered or read) after the rules and selectors: a false one skips the webhook,
an evaluation error counts as a call failure.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pyhami.kube import JsonObject
from pyhami.testing.fake_apiserver.cel import (
    CelEvaluationError,
    CelProgram,
    CelUnsupportedError,
    compile_expression,
)
from pyhami.testing.fake_apiserver.identity import UserInfo
from pyhami.testing.fake_apiserver.objects import StoredObject
from pyhami.testing.fake_apiserver.patches import PatchApplyError, PatchFormatError, json_patch
from pyhami.testing.fake_apiserver.resources import MUTATING_WEBHOOKS, NAMESPACES, ResourceType
from pyhami.testing.fake_apiserver.selectors import label_selector_matcher
from pyhami.testing.fake_apiserver.status import ApiError, internal
from pyhami.testing.fake_apiserver.store import ObjectStore

POD_CREATE_RULES: tuple[JsonObject, ...] = (
    {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
)


@dataclass(frozen=True, slots=True)
class Webhook:
    """One mutating webhook, resolved to a URL."""

    name: str
    url: str
    ca_bundle: bytes | None = None
    server_hostname: str | None = None
    failure_policy: str = "Fail"
    timeout_s: float = 10.0
    rules: tuple[JsonObject, ...] = POD_CREATE_RULES
    namespace_selector: JsonObject | None = None
    object_selector: JsonObject | None = None
    # admissionReviewVersions: kube-apiserver sends the first one it speaks (v1, v1beta1).
    review_versions: tuple[str, ...] = ("v1",)
    match_conditions: tuple[tuple[str, CelProgram], ...] = ()

    def matches(self, request: JsonObject) -> bool:
        """All matchConditions true for this AdmissionReview request (none: true)."""
        variables = {
            "request": request,
            "object": request.get("object"),
            "oldObject": request.get("oldObject"),
        }
        for name, program in self.match_conditions:
            try:
                value = program.evaluate(variables)
            except CelEvaluationError as err:
                raise _CallFailedError(f"matchCondition {name!r}: {err}") from err
            if not isinstance(value, bool):
                raise _CallFailedError(f"matchCondition {name!r} did not evaluate to a bool")
            if not value:
                return False
        return True

    def review_version(self) -> str:
        for version in self.review_versions:
            if version in ("v1", "v1beta1"):
                return f"admission.k8s.io/{version}"
        raise _CallFailedError(
            f"webhook {self.name!r} accepts none of the AdmissionReview versions this server "
            f"sends (v1, v1beta1): {list(self.review_versions)}"
        )

    def applies_to(self, resource: ResourceType, operation: str) -> bool:
        for rule in self.rules:
            if not (
                _listed(rule.get("operations"), operation)
                and _listed(rule.get("apiGroups"), resource.group)
                and _listed(rule.get("apiVersions"), resource.version)
                and _listed(rule.get("resources"), resource.plural)
            ):
                continue
            scope = rule.get("scope", "*")
            if scope == "*" or (scope == "Namespaced") == resource.namespaced:
                return True
        return False


def compile_conditions(
    webhook: str, conditions: Sequence[Mapping[str, Any]] | None
) -> tuple[tuple[str, CelProgram], ...]:
    """A webhook's matchConditions, compiled; ValueError names the one that is refused."""
    compiled = []
    for condition in conditions or ():
        name = str(condition.get("name", ""))
        try:
            compiled.append((name, compile_expression(str(condition.get("expression", "")))))
        except CelUnsupportedError as err:
            raise ValueError(f"webhook {webhook!r} matchCondition {name!r}: {err}") from err
    return tuple(compiled)


def _listed(values: Any, value: str) -> bool:
    return isinstance(values, list) and ("*" in values or value in values)


@dataclass(slots=True)
class AdmissionCall:
    """One webhook call as the server made it, kept for tests to read."""

    webhook: str
    request: JsonObject
    response: JsonObject | None = None
    error: str | None = None
    patch: list[Any] = field(default_factory=list)


class AdmissionChain:
    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._registered: list[Webhook] = []
        self._services: dict[tuple[str, str, int], str] = {}
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[bytes | None, ssl.SSLContext] = {}
        self.calls: list[AdmissionCall] = []

    def register(
        self,
        name: str,
        url: str,
        *,
        ca_bundle: bytes | str | None = None,
        failure_policy: str = "Fail",
        timeout_s: float = 10.0,
        namespace_selector: JsonObject | None = None,
        object_selector: JsonObject | None = None,
        rules: tuple[JsonObject, ...] | None = None,
        review_versions: tuple[str, ...] = ("v1",),
        match_conditions: Sequence[Mapping[str, Any]] | None = None,
    ) -> Webhook:
        """Add a webhook by URL (https only, like kube-apiserver) and CA bundle (PEM)."""
        if not url.startswith("https://"):
            raise ValueError(f"webhook {name!r}: the URL must use https, got {url!r}")
        if failure_policy not in ("Fail", "Ignore"):
            raise ValueError(f"webhook {name!r}: failurePolicy must be Fail or Ignore")
        bundle = ca_bundle.encode() if isinstance(ca_bundle, str) else ca_bundle
        hook = Webhook(
            name,
            url,
            bundle,
            None,
            failure_policy,
            timeout_s,
            rules or POD_CREATE_RULES,
            namespace_selector,
            object_selector,
            review_versions,
            compile_conditions(name, match_conditions),
        )
        self._registered.append(hook)
        return hook

    def resolve_service(self, namespace: str, name: str, port: int, address: str) -> None:
        """Route service `namespace/name:port` to `host:port` (there is no cluster DNS here)."""
        self._services[(namespace, name, port)] = address

    def _configured(self) -> list[Webhook]:
        hooks: list[Webhook] = []
        for config in self._store.items(MUTATING_WEBHOOKS):
            for entry in config.get("webhooks") or []:
                hooks.append(self._from_object(entry))
        return hooks

    def _from_object(self, entry: Mapping[str, Any]) -> Webhook:
        client = entry.get("clientConfig") or {}
        bundle = base64.b64decode(client["caBundle"]) if client.get("caBundle") else None
        server_hostname = None
        if client.get("url"):
            url = str(client["url"])
        else:
            service = client.get("service") or {}
            key = (
                service.get("namespace", ""),
                service.get("name", ""),
                int(service.get("port", 443)),
            )
            address = self._services.get(key, f"{key[1]}.{key[0]}.svc:{key[2]}")
            url = f"https://{address}{service.get('path', '/')}"
            server_hostname = f"{key[1]}.{key[0]}.svc"
        return Webhook(
            name=str(entry.get("name", "")),
            url=url,
            ca_bundle=bundle,
            server_hostname=server_hostname,
            failure_policy=str(entry.get("failurePolicy", "Fail")),
            timeout_s=float(entry.get("timeoutSeconds", 10)),
            rules=tuple(entry.get("rules") or ()),
            review_versions=tuple(entry.get("admissionReviewVersions") or ("v1",)),
            namespace_selector=entry.get("namespaceSelector"),
            object_selector=entry.get("objectSelector"),
            match_conditions=self._conditions(entry),
        )

    @staticmethod
    def _conditions(entry: Mapping[str, Any]) -> tuple[tuple[str, CelProgram], ...]:
        try:
            return compile_conditions(str(entry.get("name", "")), entry.get("matchConditions"))
        except ValueError as err:
            # kube-apiserver refuses such a configuration when it is written; this double
            # says so on the first admission that reads it.
            raise internal(str(err)) from err

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _selected(
        self, hook: Webhook, namespace: str | None, obj: JsonObject, old: StoredObject | None
    ) -> bool:
        # On UPDATE the object selector matches if the old or the new object matches.
        matches = label_selector_matcher(hook.object_selector)
        labels = [obj.get("metadata", {}).get("labels") or {}]
        if not any(matches(found) for found in labels + ([] if old is None else [old.meta.labels])):
            return False
        if namespace is None or not hook.namespace_selector:
            return True
        try:
            ns_labels = self._store.get(NAMESPACES, None, namespace)["metadata"].get("labels")
        except ApiError:
            ns_labels = {}
        return label_selector_matcher(hook.namespace_selector)(ns_labels or {})

    async def admit(
        self,
        resource: ResourceType,
        namespace: str | None,
        obj: JsonObject,
        operation: str = "CREATE",
        *,
        user: UserInfo,
        old_object: StoredObject | None = None,
        options_kind: str = "CreateOptions",
    ) -> JsonObject:
        """Run every matching webhook; returns the mutated object or raises the refusal.

        An UPDATE carries the stored object as `old_object`; `options_kind` is what the
        client's verb sends (CreateOptions, UpdateOptions for a PUT, PatchOptions).
        """
        request = _Request(resource, namespace, operation, user, old_object, options_kind)
        for hook in [*self._registered, *self._configured()]:
            if hook.applies_to(resource, operation) and self._selected(
                hook, namespace, obj, old_object
            ):
                obj = await self._call(hook, request, obj)
        return obj

    async def _call(self, hook: Webhook, request: _Request, obj: JsonObject) -> JsonObject:
        call = AdmissionCall(hook.name, {})
        try:
            review = self._review_of(hook, request, obj)
            if not hook.matches(review["request"]):
                return obj  # skipped: no call is made
        except _CallFailedError as err:
            self.calls.append(call)
            return self._failed(hook, call, err, obj)
        self.calls.append(call)
        try:
            return await self._review(hook, review, call)
        except _CallFailedError as err:
            return self._failed(hook, call, err, obj)

    @staticmethod
    def _failed(
        hook: Webhook, call: AdmissionCall, err: _CallFailedError, obj: JsonObject
    ) -> JsonObject:
        """failurePolicy: Ignore goes on with the object unchanged, Fail refuses."""
        call.error = str(err)
        if hook.failure_policy == "Ignore":
            return obj
        raise internal(f'failed calling webhook "{hook.name}": {err}') from err

    def _review_of(self, hook: Webhook, request: _Request, obj: JsonObject) -> JsonObject:
        version = hook.review_version()
        uid = self._store.new_uid()
        resource = request.resource
        kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        gvr = {"group": resource.group, "version": resource.version, "resource": resource.plural}
        old = request.old_object
        review: JsonObject = {
            "apiVersion": version,
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": kind,
                "resource": gvr,
                "requestKind": kind,
                "requestResource": gvr,
                "name": obj.get("metadata", {}).get("name", ""),
                "namespace": request.namespace or "",
                "operation": request.operation,
                "userInfo": request.user.as_json(),
                "object": _typed(resource, obj),
                "oldObject": None if old is None else old.encode(),
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": request.options_kind},
            },
        }
        return review

    async def _review(self, hook: Webhook, review: JsonObject, call: AdmissionCall) -> JsonObject:
        call.request = review
        answer = await self._post(hook, review)
        call.response = answer
        uid = review["request"]["uid"]
        return self._apply(hook, uid, answer, review["request"]["object"], call)

    async def _post(self, hook: Webhook, review: JsonObject) -> JsonObject:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        context = self._contexts.get(hook.ca_bundle)
        if context is None:
            # One context per CA bundle: a new one per call would also cost a TLS handshake
            # per call, since aiohttp keeps connections per context.
            context = ssl.create_default_context(
                cadata=hook.ca_bundle.decode() if hook.ca_bundle else None
            )
            self._contexts[hook.ca_bundle] = context
        try:
            async with self._session.post(
                hook.url,
                json=review,
                ssl=context,
                server_hostname=hook.server_hostname,
                timeout=aiohttp.ClientTimeout(total=hook.timeout_s),
            ) as response:
                if response.status != 200:
                    text = await response.text()
                    raise _CallFailedError(
                        f"failed to call webhook: the server responded with "
                        f"status {response.status}: {text[:200]}"
                    )
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError, ssl.SSLError) as err:
            raise _CallFailedError(f'failed to call webhook: Post "{hook.url}": {err!r}') from err
        if not isinstance(body, dict):
            raise _CallFailedError("received invalid webhook response: not a JSON object")
        return body

    @staticmethod
    def _apply(
        hook: Webhook, uid: str, answer: JsonObject, obj: JsonObject, call: AdmissionCall
    ) -> JsonObject:
        # kube-apiserver checks uid, kind and patchType of v1 answers only; v1beta1 ones are
        # taken as they come, a patch being read as a JSON patch (VerifyAdmissionResponse).
        strict = call.request["apiVersion"] == "admission.k8s.io/v1"
        response = answer.get("response")
        if not isinstance(response, dict):
            raise _CallFailedError("webhook response was absent")
        if strict and response.get("uid") != uid:
            raise _CallFailedError(f"expected response.uid={uid!r}, got {response.get('uid')!r}")
        kind = (answer.get("apiVersion"), answer.get("kind"))
        if strict and kind != ("admission.k8s.io/v1", "AdmissionReview"):
            raise _CallFailedError(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got "
                f"{kind[0]}, Kind={kind[1]}"
            )
        patch, patch_type = response.get("patch"), response.get("patchType")
        if strict and bool(patch) != bool(patch_type):
            raise _CallFailedError(
                "webhook returned response.patch but not response.patchType"
                if patch
                else "webhook returned response.patchType but not response.patch"
            )
        if not response.get("allowed"):
            raise _denied(hook.name, response.get("status") or {})
        if not patch:
            return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        if strict and patch_type != "JSONPatch":
            raise _CallFailedError(f"unsupported patch type {patch_type!r}")
        try:
            operations = json.loads(base64.b64decode(response["patch"], validate=True))
            call.patch = operations
            patched = json_patch(obj, operations)
        except (binascii.Error, ValueError, PatchFormatError, PatchApplyError) as err:
            raise _CallFailedError(f"failed to apply the webhook's patch: {err}") from err
        if not isinstance(patched, dict):
            raise _CallFailedError("the webhook's patch did not leave an object")
        patched.pop("apiVersion", None)
        patched.pop("kind", None)
        return patched


@dataclass(frozen=True, slots=True)
class _Request:
    """What every webhook of one admission sees besides the (changing) object."""

    resource: ResourceType
    namespace: str | None
    operation: str
    user: UserInfo
    old_object: StoredObject | None
    options_kind: str


def _typed(resource: ResourceType, obj: JsonObject) -> JsonObject:
    return {"apiVersion": resource.api_version, "kind": resource.kind, **obj}


class _CallFailedError(Exception):
    """The webhook could not be called or answered nonsense (failurePolicy decides)."""


def _denied(name: str, status: Mapping[str, Any]) -> ApiError:
    """kube-apiserver's wording and code rules for a webhook refusal (webhookerrors.ToStatusErr)."""
    code = int(status.get("code") or 0)
    code = max(code, 400)
    denied_by = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    return ApiError(code, str(status.get("reason") or ""), message)
