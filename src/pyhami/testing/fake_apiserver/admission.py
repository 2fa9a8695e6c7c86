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
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from pyhami.kube import JsonObject
from pyhami.kube.admission_review import AdmissionDecodeError, ReviewReply, ReviewRequest
from pyhami.kube.manifests import MatchCondition, PodWebhook
from pyhami.model.views import SelectorRequirement
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
from pyhami.testing.fake_apiserver.selectors import SELECT_ALL, LabelSelector
from pyhami.testing.fake_apiserver.status import ApiError, internal
from pyhami.testing.fake_apiserver.store import ObjectStore

_RULE_LISTS = ("operations", "apiGroups", "apiVersions", "resources")


@dataclass(frozen=True, slots=True)
class Rule:
    """One RuleWithOperations of a webhook: what each of `_RULE_LISTS` lists (a field that is
    not a list matches nothing), and the scope."""

    lists: tuple[tuple[str, ...], ...]
    scope: str = "*"

    @classmethod
    def on_pods(cls, operations: Iterable[str]) -> Rule:
        """core/v1 pods, for these operations (CREATE, UPDATE)."""
        return cls((tuple(operations), ("",), ("v1",), ("pods",)))

    def applies_to(self, resource: ResourceType, operation: str) -> bool:
        wanted = (operation, resource.group, resource.version, resource.plural)
        listed = zip(self.lists, wanted, strict=True)
        return all("*" in values or value in values for values, value in listed) and (
            self.scope == "*" or (self.scope == "Namespaced") == resource.namespaced
        )


POD_CREATE_RULES = (Rule.on_pods(["CREATE"]),)


@dataclass(frozen=True, slots=True)
class Webhook:
    """One mutating webhook, resolved to a URL."""

    name: str
    url: str
    ca_bundle: bytes | None = None
    server_hostname: str | None = None
    failure_policy: str = "Fail"
    timeout_s: float = 10.0
    rules: tuple[Rule, ...] = POD_CREATE_RULES
    # Empty: every namespace (no namespace is read), every object.
    namespace_selector: LabelSelector = SELECT_ALL
    object_selector: LabelSelector = SELECT_ALL
    # admissionReviewVersions: kube-apiserver sends the first one it speaks (v1, v1beta1).
    review_versions: tuple[str, ...] = ("v1",)
    match_conditions: tuple[tuple[str, CelProgram], ...] = ()

    def matches(self, review: ReviewRequest) -> bool:
        """All matchConditions true for this AdmissionReview request (none: true)."""
        request = review.request()
        variables = {
            "request": request,
            "object": request["object"],
            "oldObject": request["oldObject"],
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
        return any(rule.applies_to(resource, operation) for rule in self.rules)


def compile_conditions(
    webhook: str, conditions: Iterable[MatchCondition]
) -> tuple[tuple[str, CelProgram], ...]:
    """A webhook's matchConditions, compiled; ValueError names the one that is refused."""
    compiled = []
    for condition in conditions:
        try:
            compiled.append((condition.name, compile_expression(condition.expression)))
        except CelUnsupportedError as err:
            raise ValueError(
                f"webhook {webhook!r} matchCondition {condition.name!r}: {err}"
            ) from err
    return tuple(compiled)


@dataclass(slots=True)
class AdmissionCall:
    """One webhook call as the server made it, kept for tests to read (the AdmissionReview
    itself is what the webhook's server received)."""

    webhook: str
    operation: str
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
        namespace_selector: LabelSelector = SELECT_ALL,
        object_selector: LabelSelector = SELECT_ALL,
        rules: Sequence[Rule] = POD_CREATE_RULES,
        review_versions: tuple[str, ...] = ("v1",),
        match_conditions: Sequence[MatchCondition] = (),
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
            tuple(rules),
            namespace_selector,
            object_selector,
            review_versions,
            compile_conditions(name, match_conditions),
        )
        self._registered.append(hook)
        return hook

    def register_pod_webhook(
        self, hook: PodWebhook, base_url: str, ca_bundle: bytes | None = None
    ) -> Webhook:
        """Add one of the chart's pod webhooks, its server at `base_url`."""
        skip = () if hook.skip_label is None else (hook.skip_label,)
        return self.register(
            hook.name,
            f"{base_url}{hook.path}",
            ca_bundle=ca_bundle,
            rules=(Rule.on_pods(hook.operations),),
            object_selector=LabelSelector(
                tuple(SelectorRequirement(key, "NotIn", frozenset({value})) for key, value in skip)
            ),
            match_conditions=hook.conditions,
        )

    def resolve_service(self, namespace: str, name: str, port: int, address: str) -> None:
        """Route service `namespace/name:port` to `host:port` (there is no cluster DNS here)."""
        self._services[(namespace, name, port)] = address

    def _configured(self) -> list[Webhook]:
        return [
            self._from_object(entry)
            for config in self._store.matching(MUTATING_WEBHOOKS)
            for entry in config.body.get("webhooks") or []
        ]

    def _from_object(self, entry: Mapping[str, Any]) -> Webhook:
        """A webhook of a MutatingWebhookConfiguration, decoded."""
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
        name = str(entry.get("name", ""))
        conditions = (
            MatchCondition(str(c.get("name", "")), str(c.get("expression", "")))
            for c in entry.get("matchConditions") or ()
        )
        try:
            compiled = compile_conditions(name, conditions)
        except ValueError as err:
            # kube-apiserver refuses such a configuration when it is written; this double
            # says so on the first admission that reads it.
            raise internal(str(err)) from err
        return Webhook(
            name=name,
            url=url,
            ca_bundle=bundle,
            server_hostname=server_hostname,
            failure_policy=str(entry.get("failurePolicy", "Fail")),
            timeout_s=float(entry.get("timeoutSeconds", 10)),
            rules=tuple(
                Rule(
                    tuple(tuple(v) if isinstance(v := r.get(k), list) else () for k in _RULE_LISTS),
                    r.get("scope", "*"),
                )
                for r in entry.get("rules") or ()
            ),
            review_versions=tuple(entry.get("admissionReviewVersions") or ("v1",)),
            namespace_selector=LabelSelector.decode(entry.get("namespaceSelector")),
            object_selector=LabelSelector.decode(entry.get("objectSelector")),
            match_conditions=compiled,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _selected(
        self,
        hook: Webhook,
        namespace: str | None,
        labels: Mapping[str, str],
        old: StoredObject | None,
    ) -> bool:
        # On UPDATE the object selector matches if the old or the new object matches.
        if not (
            hook.object_selector.matches(labels)
            or (old is not None and hook.object_selector.matches(old.meta.labels))
        ):
            return False
        if namespace is None or not hook.namespace_selector.requirements:
            return True
        try:
            namespace_labels = self._store.get(NAMESPACES, None, namespace).meta.labels
        except ApiError:
            namespace_labels = {}
        return hook.namespace_selector.matches(namespace_labels)

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
        """Run every matching webhook on the object to write; returns it mutated, or raises
        the refusal.

        An UPDATE carries the stored object as `old_object`; `options_kind` is what the
        client's verb sends (CreateOptions, UpdateOptions for a PUT, PatchOptions).
        """
        review = ReviewRequest(
            api_version="",  # each webhook's, and a uid per call: see _call
            uid="",
            resource=resource,
            namespace=namespace or "",
            operation=operation,
            username=user.username,
            groups=user.groups,
            object=obj,
            old_object=None if old_object is None else old_object.encode(),
            options_kind=options_kind,
        )
        for hook in [*self._registered, *self._configured()]:
            labels = review.object.get("metadata", {}).get("labels") or {}
            if hook.applies_to(resource, operation) and self._selected(
                hook, namespace, labels, old_object
            ):
                review = await self._call(hook, review)
        return review.object

    async def _call(self, hook: Webhook, review: ReviewRequest) -> ReviewRequest:
        """One webhook's turn: the review of the object it leaves (failurePolicy: Ignore leaves
        it unchanged when the call fails, Fail refuses the request)."""
        call, posted = AdmissionCall(hook.name, review.operation), False
        try:
            sent = replace(review, api_version=hook.review_version(), uid=self._store.new_uid())
            if not hook.matches(sent):
                return review  # skipped: no call is made
            self.calls.append(call)
            posted = True
            reply = ReviewReply.decode(await self._post(hook, sent), sent)
            if not reply.allowed:
                raise _denied(hook.name, reply.code, reply.reason, reply.message)
            if reply.patch is None:
                return review
            call.patch = reply.patch
            try:
                patched = json_patch(sent.request()["object"], reply.patch)
            except (PatchFormatError, PatchApplyError) as err:
                raise _CallFailedError(f"failed to apply the webhook's patch: {err}") from err
            if not isinstance(patched, dict):
                raise _CallFailedError("the webhook's patch did not leave an object")
            patched.pop("apiVersion", None)
            patched.pop("kind", None)
            return replace(review, object=patched)
        except (_CallFailedError, AdmissionDecodeError) as err:
            if not posted:  # failed before the call was made
                self.calls.append(call)
            call.error = str(err)
            if hook.failure_policy == "Ignore":
                return review
            raise internal(f'failed calling webhook "{hook.name}": {err}') from err

    async def _post(self, hook: Webhook, review: ReviewRequest) -> object:
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
                json=review.encode(),
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
                answer: object = await response.json(content_type=None)
                return answer
        except (aiohttp.ClientError, TimeoutError, ValueError, ssl.SSLError) as err:
            raise _CallFailedError(f'failed to call webhook: Post "{hook.url}": {err!r}') from err


class _CallFailedError(Exception):
    """The webhook could not be called or answered nonsense (failurePolicy decides)."""


def _denied(name: str, code: int, reason: str, message: str) -> ApiError:
    """kube-apiserver's wording and code rules for a webhook refusal (webhookerrors.ToStatusErr),
    from the refusal's status code, reason and message."""
    denied_by = f'admission webhook "{name}" denied the request'
    if message:
        text = f"{denied_by}: {message}"
    elif reason:
        text = f"{denied_by}: {reason}"
    else:
        text = f"{denied_by} without explanation"
    return ApiError(max(code, 400), reason, text)
