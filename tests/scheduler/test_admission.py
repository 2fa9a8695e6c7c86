import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.kube.admission_review import (
    AdmissionDecodeError,
    AdmissionRequest,
    AdmissionResponse,
    json_patch,
)

from .patching import apply_patch


def _review(version: str = "admission.k8s.io/v1beta1") -> bytes:
    return json.dumps(
        {
            "apiVersion": version,
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "operation": "CREATE",
                "namespace": "ns",
                "object": {"metadata": {"name": "p"}},
                "userInfo": {"username": "alice"},
            },
        }
    ).encode()


def _reply(response: AdmissionResponse, request: AdmissionRequest) -> Any:
    return json.loads(response.encode_review(request))["response"]


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_reply_carries_the_request_version_and_uid(version: str) -> None:
    request = AdmissionRequest.from_http(_review(version), "application/json")
    assert (request.uid, request.username, request.namespace) == ("u-1", "alice", "ns")
    reply = json.loads(AdmissionResponse.allow("ok").encode_review(request))
    assert reply == {
        "apiVersion": version,
        "kind": "AdmissionReview",
        "response": {
            "uid": "u-1",
            "allowed": True,
            "status": {"metadata": {}, "code": 200, "message": "ok"},
        },
    }


def test_denied_and_errored_replies_match_controller_runtime() -> None:
    request = AdmissionRequest.from_http(_review(), "application/json")
    denied = _reply(AdmissionResponse.deny("pod has no containers"), request)
    assert denied["allowed"] is False
    assert denied["status"] == {
        "metadata": {},
        "code": 403,
        "reason": "Forbidden",
        "message": "pod has no containers",
    }
    errored = _reply(AdmissionResponse.errored(500, "bad"), request)
    assert errored["status"] == {"metadata": {}, "code": 500, "message": "bad"}


def test_patch_is_base64_json_patch() -> None:
    request = AdmissionRequest.from_http(_review(), "application/json")
    ops = [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]
    response = _reply(AdmissionResponse(allowed=True, patch=ops), request)
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops


@pytest.mark.parametrize(
    "body, content_type, code, words",
    [
        pytest.param(b"", "application/json", 400, "request body is empty", id="empty"),
        pytest.param(b"{}", "text/plain", 400, "contentType=text/plain", id="content-type"),
        pytest.param(b"{x", "application/json", 400, "couldn't decode", id="bad-json"),
        pytest.param(b"{}", "application/json", 400, "unsupported AdmissionReview", id="no-kind"),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
            "application/json",
            400,
            "no request",
            id="no-request",
        ),
        pytest.param(b" " * (7 << 20 | 1), "application/json", 413, "larger", id="too-large"),
    ],
)
def test_undecodable_bodies_get_coded_errors(
    body: bytes, content_type: str, code: int, words: str
) -> None:
    with pytest.raises(AdmissionDecodeError, match=words) as caught:
        AdmissionRequest.from_http(body, content_type)
    assert caught.value.code == code
    bare = json.loads(AdmissionResponse.errored(code, str(caught.value)).encode_bare_review())
    assert "apiVersion" not in bare and bare["response"]["allowed"] is False


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab~/", max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text("ab~/", max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    before=st.dictionaries(st.text("ab~/", max_size=3), _json, max_size=4),
    after=st.dictionaries(st.text("ab~/", max_size=3), _json, max_size=4),
)
def test_json_patch_turns_before_into_after(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert apply_patch(before, json_patch(before, after)) == after


def test_json_patch_escapes_annotation_keys() -> None:
    ops = json_patch({"a": {}}, {"a": {"hami.io/vgpu-node": "n"}})
    assert ops == [{"op": "add", "path": "/a/hami.io~1vgpu-node", "value": "n"}]
    assert json_patch({"x": 1}, {"x": 1}) == []
    assert json_patch({"x": 1}, {"x": True}) == [{"op": "replace", "path": "/x", "value": True}]


@pytest.mark.parametrize(
    "metadata, words",
    [
        pytest.param("x", "metadata must be an object", id="metadata"),
        pytest.param(
            {"annotations": {"a": 1}}, "metadata.annotations 'a' must be a string", id="annotation"
        ),
        pytest.param({"labels": ["a"]}, "metadata.labels must be an object", id="labels"),
    ],
)
def test_unreadable_marks_are_refused_at_decoding(metadata: Any, words: str) -> None:
    review = json.loads(_review())
    review["request"]["object"]["metadata"] = metadata
    with pytest.raises(AdmissionDecodeError, match=words) as caught:
        AdmissionRequest.from_http(json.dumps(review).encode(), "application/json")
    assert caught.value.code == 400


def test_a_pod_known_only_by_generate_name_is_read_in_the_request_namespace() -> None:
    review = json.loads(_review())
    review["request"]["object"] = {
        "metadata": {"generateName": "job-", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c"}], "nodeSelector": {"k": "v"}},
    }
    request = AdmissionRequest.from_http(json.dumps(review).encode(), "application/json")
    assert request.marks.labels == {"app": "x"}
    pod = request.pod()
    assert (pod.view.ref, pod.view.node_selector, pod.privileged) == ("ns/job-", {"k": "v"}, None)
