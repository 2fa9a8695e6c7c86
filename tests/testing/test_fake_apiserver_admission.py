"""Mutating admission in the fake API server: AdmissionReview v1 over HTTPS, JSONPatch applied,
refusals and failurePolicy as kube-apiserver handles them (Dynamic Admission Control docs)."""

import base64
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from pyhami.kube import KubeClient, KubeError
from pyhami.kube.manifests import MatchCondition, webhook_configuration
from pyhami.sim.demo.cluster import WEBHOOKS, trusted_writers_condition
from pyhami.testing import FakeKubeAPIServer
from pyhami.testing.certs import ServingFiles, write_serving_certificate
from pyhami.testing.fake_apiserver import admission, service_account
from pyhami.testing.fake_apiserver.admission import Rule
from pyhami.testing.fake_apiserver.selectors import LabelSelector, parse_label_selector
from pyhami.testing.fake_apiserver.store import MERGE_PATCH

from .builders import Http, pod

PODS = "/api/v1/namespaces/default/pods"
Responder = Callable[[dict[str, Any]], dict[str, Any]]


def review_answer(review: dict[str, Any], **response: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], **response},
    }


def patch_response(ops: list[dict[str, Any]]) -> Responder:
    def answer(review: dict[str, Any]) -> dict[str, Any]:
        return review_answer(
            review,
            allowed=True,
            patchType="JSONPatch",
            patch=base64.b64encode(json.dumps(ops).encode()).decode(),
        )

    return answer


class Webhook:
    def __init__(self, cert: ServingFiles) -> None:
        self.cert = cert
        self.reviews: list[dict[str, Any]] = []
        self.peers: list[Any] = []  # the caller's address per review
        self.respond: Responder = patch_response([])
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        async def handle(request: web.Request) -> web.Response:
            review = await request.json()
            self.reviews.append(review)
            assert request.transport is not None
            self.peers.append(request.transport.get_extra_info("peername"))
            return web.json_response(self.respond(review))

        app = web.Application()
        app.router.add_post("/webhook", handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.cert.server_context())
        await site.start()
        self.port = self._runner.addresses[0][1]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/webhook"

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[Webhook]:
    names = ("localhost", "hami.kube-system.svc")
    hook = Webhook(write_serving_certificate(tmp_path, dns_names=names))
    await hook.start()
    yield hook
    await hook.stop()


async def test_webhook_mutates_pod_on_create(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register("vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem)
    webhook.respond = patch_response(
        [
            {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"},
            {"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}},
        ]
    )
    body = pod("")
    body["metadata"] = {"generateName": "gpu-"}
    status, created = await http.post(PODS, body)
    assert status == 201, created
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert created["metadata"]["annotations"] == {"mutated": "yes"}
    review = webhook.reviews[0]
    assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    request = review["request"]
    assert request["operation"] == "CREATE" and request["namespace"] == "default"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["name"] == ""  # generateName is resolved after admission
    assert request["object"]["kind"] == "Pod"
    assert request["object"]["spec"]["schedulerName"] == "default-scheduler"  # defaulted first
    assert "uid" not in request["object"]["metadata"]
    assert apiserver.admission.calls[0].patch[0]["path"] == "/spec/schedulerName"


async def test_reviews_reuse_one_tls_connection(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    """As kube-apiserver keeps its webhook connections: no TLS handshake per review."""
    apiserver.admission.register("vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem)
    for name in ("a", "b", "c"):
        assert (await http.post(PODS, pod(name)))[0] == 201
    assert len(webhook.peers) == 3 and len(set(webhook.peers)) == 1


async def test_webhook_refusal_is_returned_with_its_code(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register("vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem)
    webhook.respond = lambda review: review_answer(
        review,
        allowed=False,
        status={
            "code": 403,
            "reason": "Forbidden",
            "message": "privileged GPU pods are not allowed",
        },
    )
    status, body = await http.post(PODS, pod("a"))
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        'admission webhook "vgpu.hami.io" denied the request: privileged GPU pods are not allowed'
    )
    assert apiserver.store.matching("pods") == []


@pytest.mark.parametrize(
    ("policy", "created"),
    [pytest.param("Fail", False, id="fail"), pytest.param("Ignore", True, id="ignore")],
)
async def test_unreachable_webhook_and_failure_policy(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook, policy: str, created: bool
) -> None:
    apiserver.admission.register(
        "vgpu.hami.io",
        webhook.url,
        ca_bundle=webhook.cert.ca_pem,
        failure_policy=policy,
        timeout_s=2,
    )
    await webhook.stop()
    status, body = await http.post(PODS, pod("a"))
    if created:
        assert status == 201
    else:
        assert (status, body["reason"]) == (500, "InternalError")
        assert body["message"].startswith(
            'Internal error occurred: failed calling webhook "vgpu.hami.io"'
        )
    await webhook.start()  # so the fixture can stop it


async def test_untrusted_certificate_is_a_call_failure(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    apiserver.admission.register(
        "vgpu.hami.io", webhook.url, ca_bundle=write_serving_certificate(other).ca_pem
    )
    status, _ = await http.post(PODS, pod("a"))
    assert status == 500
    assert "CERTIFICATE_VERIFY_FAILED" in (apiserver.admission.calls[0].error or "")


async def test_mismatched_uid_is_a_call_failure(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register("vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem)
    webhook.respond = lambda review: {
        **review_answer(review),
        "response": {"uid": "someone-else", "allowed": True},
    }
    status, body = await http.post(PODS, pod("a"))
    assert status == 500 and "expected response.uid" in body["message"]


async def test_configuration_object_with_service_and_selectors(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    """The shape HAMi's chart installs: service clientConfig, caBundle, both selectors."""
    apiserver.admission.resolve_service("kube-system", "hami", 443, f"127.0.0.1:{webhook.port}")
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "hami-webhook"},
        "webhooks": [
            {
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1beta1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "clientConfig": {
                    "service": {
                        "namespace": "kube-system",
                        "name": "hami",
                        "path": "/webhook",
                        "port": 443,
                    },
                    "caBundle": base64.b64encode(webhook.cert.ca_pem).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "*",
                    }
                ],
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
                    ]
                },
                "objectSelector": {
                    "matchExpressions": [
                        {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
                    ]
                },
            }
        ],
    }
    assert (
        await http.post(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config
        )
    )[0] == 201
    webhook.respond = patch_response(
        [{"op": "add", "path": "/metadata/annotations", "value": {"seen": "1"}}]
    )
    _, mutated = await http.post(PODS, pod("a"))
    assert mutated["metadata"]["annotations"] == {"seen": "1"}
    _, skipped = await http.post(PODS, pod("b", labels={"hami.io/webhook": "ignore"}))
    assert "annotations" not in skipped["metadata"]
    await http.post(
        "/api/v1/namespaces",
        {"metadata": {"name": "quiet", "labels": {"hami.io/webhook": "ignore"}}},
    )
    _, in_quiet = await http.post("/api/v1/namespaces/quiet/pods", pod("c"))
    assert "annotations" not in in_quiet["metadata"]
    assert len(webhook.reviews) == 1


async def test_non_pod_creates_are_not_sent(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register("vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem)
    await http.post("/api/v1/nodes", {"metadata": {"name": "n1"}})
    assert webhook.reviews == []


def test_registration_insists_on_https(apiserver: FakeKubeAPIServer) -> None:
    with pytest.raises(ValueError, match="https"):
        apiserver.admission.register("x", "http://127.0.0.1:1/webhook")


async def test_v1beta1_only_webhook_gets_v1beta1_and_lenient_checks(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    """HAMi's chart registers admissionReviewVersions [v1beta1]; kube-apiserver then sends
    v1beta1 and does not insist on the answer's kind or uid."""
    apiserver.admission.register(
        "vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem, review_versions=("v1beta1",)
    )
    webhook.respond = lambda review: {"response": {"allowed": True}}
    status, _ = await http.post(PODS, pod("a"))
    assert status == 201
    assert webhook.reviews[0]["apiVersion"] == "admission.k8s.io/v1beta1"


async def test_webhook_with_no_known_review_version_fails(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register(
        "vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem, review_versions=("v2",)
    )
    status, body = await http.post(PODS, pod("a"))
    assert status == 500 and "accepts none of the AdmissionReview versions" in body["message"]
    assert webhook.reviews == []


async def test_v1_patch_without_patch_type_is_refused(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register("vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem)
    ops = base64.b64encode(b'[{"op":"add","path":"/metadata/labels","value":{}}]').decode()
    webhook.respond = lambda review: review_answer(review, allowed=True, patch=ops)
    status, body = await http.post(PODS, pod("a"))
    assert status == 500 and "response.patch but not response.patchType" in body["message"]


async def test_the_review_names_the_user_who_created_the_object(
    apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register("vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem)
    user = service_account("ci", "runner")
    async with KubeClient(apiserver.configuration(user)) as client:
        await client.create_pod("default", pod("p1"))
    assert webhook.reviews[0]["request"]["userInfo"] == {
        "username": user,
        "groups": ["system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"],
    }


POD_WRITE_RULES = (Rule.on_pods(["CREATE", "UPDATE"]),)


@pytest.fixture
async def update_webhook(http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook) -> Webhook:
    """`webhook`, registered for pod creates and updates, and pod `a` created through it."""
    apiserver.admission.register(
        "vgpu.hami.io", webhook.url, ca_bundle=webhook.cert.ca_pem, rules=POD_WRITE_RULES
    )
    await http.post(PODS, pod("a"))
    return webhook


async def test_a_patch_is_reviewed_as_update_with_the_stored_object_as_old(
    http: Http, apiserver: FakeKubeAPIServer, update_webhook: Webhook
) -> None:
    webhook = update_webhook
    webhook.respond = patch_response(
        [{"op": "add", "path": "/metadata/annotations/reviewed", "value": "yes"}]
    )
    status, patched = await http.patch(f"{PODS}/a", {"metadata": {"annotations": {"asked": "1"}}})
    assert status == 200, patched
    assert patched["metadata"]["annotations"] == {"asked": "1", "reviewed": "yes"}
    request = webhook.reviews[-1]["request"]
    assert (request["operation"], request["name"]) == ("UPDATE", "a")
    assert request["options"]["kind"] == "PatchOptions"
    assert request["object"]["metadata"]["annotations"] == {"asked": "1"}
    assert "annotations" not in request["oldObject"]["metadata"]
    assert request["oldObject"]["kind"] == "Pod"
    stored = apiserver.store.get("pods", "default", "a").body
    assert stored["metadata"]["annotations"] == {"asked": "1", "reviewed": "yes"}


async def test_a_put_is_reviewed_with_update_options_and_a_refusal_changes_nothing(
    http: Http, apiserver: FakeKubeAPIServer, update_webhook: Webhook
) -> None:
    webhook = update_webhook
    _, created = await http.get(f"{PODS}/a")
    webhook.respond = lambda review: review_answer(
        review, allowed=False, status={"message": "annotations x are written by the scheduler"}
    )
    created["metadata"]["annotations"] = {"x": "forged"}
    status, body = await http.put(f"{PODS}/a", created)
    assert (status, body["message"]) == (
        400,
        'admission webhook "vgpu.hami.io" denied the request: '
        "annotations x are written by the scheduler",
    )
    assert webhook.reviews[-1]["request"]["options"]["kind"] == "UpdateOptions"
    stored = apiserver.store.get("pods", "default", "a").body
    assert "annotations" not in stored["metadata"]
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_updates_go_only_to_webhooks_registered_for_update_and_not_for_status(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    apiserver.admission.register("create-only", webhook.url, ca_bundle=webhook.cert.ca_pem)
    await http.post(PODS, pod("a"))
    assert (await http.patch(f"{PODS}/a", {"metadata": {"labels": {"l": "1"}}}))[0] == 200
    assert [r["request"]["operation"] for r in webhook.reviews] == ["CREATE"]
    apiserver.admission.register(
        "writes", webhook.url, ca_bundle=webhook.cert.ca_pem, rules=POD_WRITE_RULES
    )
    status_patch = {"status": {"phase": "Running"}}
    assert (await http.patch(f"{PODS}/a/status", status_patch))[0] == 200
    assert [r["request"]["operation"] for r in webhook.reviews] == ["CREATE"]


async def test_an_update_that_drops_the_selected_label_is_still_reviewed(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    """objectSelector on UPDATE matches if the old or the new object matches."""
    apiserver.admission.register(
        "vgpu.hami.io",
        webhook.url,
        ca_bundle=webhook.cert.ca_pem,
        rules=POD_WRITE_RULES,
        object_selector=LabelSelector(parse_label_selector("gpu=yes")),
    )
    await http.post(PODS, pod("a", labels={"gpu": "yes"}))
    await http.patch(f"{PODS}/a", {"metadata": {"labels": {"gpu": None}}})
    await http.patch(f"{PODS}/a", {"metadata": {"labels": {"other": "1"}}})
    assert [r["request"]["operation"] for r in webhook.reviews] == ["CREATE", "UPDATE"]


async def test_a_write_landing_while_the_webhook_runs_redoes_the_patch_unless_pinned(
    http: Http, apiserver: FakeKubeAPIServer, update_webhook: Webhook
) -> None:
    webhook = update_webhook
    racing = ["other"]

    def answer_after_a_racing_write(review: dict[str, Any]) -> dict[str, Any]:
        if racing:
            label = racing.pop()
            racing_patch = {"metadata": {"labels": {label: "1"}}}
            apiserver.store.patch("pods", "default", "a", MERGE_PATCH, racing_patch)
        return review_answer(review, allowed=True)

    webhook.respond = answer_after_a_racing_write
    status, patched = await http.patch(f"{PODS}/a", {"metadata": {"labels": {"mine": "1"}}})
    assert status == 200
    assert patched["metadata"]["labels"] == {"other": "1", "mine": "1"}  # neither write lost
    assert len(webhook.reviews) == 3  # CREATE, then the patch twice

    racing.append("third")
    version = patched["metadata"]["resourceVersion"]
    pinned = {"metadata": {"resourceVersion": version, "labels": {"late": "1"}}}
    status, body = await http.patch(f"{PODS}/a", pinned)
    assert (status, body["reason"]) == (409, "Conflict")
    assert "late" not in apiserver.store.get("pods", "default", "a").meta.labels


DEVICE_PLUGIN = service_account("hami", "device-plugin")


async def test_match_conditions_skip_the_webhook_for_trusted_writers_updates(
    apiserver: FakeKubeAPIServer, webhook: Webhook
) -> None:
    """The chart's ownership condition: a trusted writer's update is never sent (so it passes
    while the webhook is down); creates and everyone else's updates are."""
    apiserver.admission.register(
        "ownership.pyhami.io",
        webhook.url,
        ca_bundle=webhook.cert.ca_pem,
        rules=POD_WRITE_RULES,
        match_conditions=[trusted_writers_condition([DEVICE_PLUGIN, "system:serviceaccount:ci:"])],
    )
    note = {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}}
    async with (
        KubeClient(apiserver.configuration(DEVICE_PLUGIN)) as plugin,
        KubeClient(apiserver.configuration(service_account("ci", "bot"))) as bot,
        KubeClient(apiserver.configuration("alice")) as alice,
    ):
        await plugin.create_pod("default", pod("a"))
        await plugin.patch_pod("default", "a", note)
        await bot.patch_pod("default", "a", note)
        assert [r["request"]["operation"] for r in webhook.reviews] == ["CREATE"]
        await alice.patch_pod("default", "a", note)
        assert [r["request"]["userInfo"]["username"] for r in webhook.reviews] == [
            DEVICE_PLUGIN,
            "alice",
        ]
        await webhook.stop()  # down, with failurePolicy Fail
        await plugin.patch_pod("default", "a", {"metadata": {"annotations": {"x": "1"}}})
        with pytest.raises(KubeError, match=r'failed calling webhook "ownership\.pyhami\.io"'):
            await alice.patch_pod("default", "a", {"metadata": {"annotations": {"x": "2"}}})


@pytest.mark.parametrize("policy, created", [("Fail", False), ("Ignore", True)])
async def test_a_condition_that_fails_to_evaluate_follows_the_failure_policy(
    http: Http, apiserver: FakeKubeAPIServer, webhook: Webhook, policy: str, created: bool
) -> None:
    apiserver.admission.register(
        "w",
        webhook.url,
        ca_bundle=webhook.cert.ca_pem,
        failure_policy=policy,
        match_conditions=[MatchCondition("typo", "request.userInfo.nmae == 'x'")],
    )
    status, body = await http.post(PODS, pod("a"))
    assert (status == 201) is created, body
    if not created:
        assert "matchCondition 'typo': no such key: nmae" in body["message"]
    assert webhook.reviews == []


def test_cel_this_double_cannot_evaluate_is_refused_at_registration(
    apiserver: FakeKubeAPIServer,
) -> None:
    with pytest.raises(ValueError, match=r"matchCondition 'groups'.*unsupported function exists"):
        apiserver.admission.register(
            "w",
            "https://127.0.0.1:1/webhook",
            match_conditions=[
                MatchCondition("groups", "request.userInfo.groups.exists(g, g == 'x')")
            ],
        )


def test_a_chart_webhook_registered_reads_as_its_configuration_object(
    apiserver: FakeKubeAPIServer,
) -> None:
    """The demo registers the chart's webhooks on the double and writes them as a
    MutatingWebhookConfiguration on a real cluster: both give the same webhooks."""

    def comparable(hook: admission.Webhook) -> tuple[admission.Webhook, list[tuple[str, str]]]:
        conditions = [(name, program.source) for name, program in hook.match_conditions]
        return dataclasses.replace(hook, match_conditions=()), conditions

    registered = [
        apiserver.admission.register_pod_webhook(hook, "https://hooks:1", b"pem")
        for hook in WEBHOOKS
    ]
    configuration = webhook_configuration("chart", WEBHOOKS, "https://hooks:1", b"pem")
    apiserver.store.create("mutatingwebhookconfigurations", None, configuration)
    configured = apiserver.admission._configured()
    assert [comparable(h) for h in configured] == [comparable(h) for h in registered]
    assert registered[0].object_selector.requirements  # the skip label is carried
    assert registered[1].match_conditions
