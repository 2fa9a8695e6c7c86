import json

import pytest

from pyhami.kube.extender_wire import (
    MAX_EXTENDER_BODY,
    ClaimedPod,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderDecodeError,
    ExtenderFilterResult,
)
from pyhami.scheduler.explanations import PodRef

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"schedulerName": "s"}}


def test_filter_args_accept_keys_in_any_case_and_read_the_pod_once() -> None:
    body = json.dumps({"pod": POD, "nodenames": ["a", "b"]}).encode()
    args = ExtenderArgs.from_json(body)
    assert args.pod == ClaimedPod("ns", "p", "u", "s")
    assert args.node_names == ("a", "b")
    assert args.nodes is None


def test_exact_key_wins_over_a_case_insensitive_one() -> None:
    body = json.dumps({"nodenames": ["x"], "NodeNames": ["y"], "Pod": POD}).encode()
    assert ExtenderArgs.from_json(body).node_names == ("y",)


def test_simulation_args_carry_node_views_and_send_the_objects_back() -> None:
    node = {"metadata": {"name": "n1", "labels": {"gpu": "on"}}, "extra": [1]}
    broken = {"metadata": {"name": "n2", "labels": {"gpu": 1}}}
    nodes = {"kind": "NodeList", "items": [node, broken]}
    args = ExtenderArgs.from_json(json.dumps({"Pod": POD, "Nodes": nodes}).encode())
    assert args.nodes is not None and args.nodes.pod.ref == "ns/p"
    [n1, n2] = args.nodes.nodes
    assert n1.view is not None and n1.view.labels == {"gpu": "on"}
    assert (n2.name, n2.view) == ("n2", None), "an unreadable node has no view"
    echoed = json.loads(ExtenderFilterResult(nodes=args.nodes).encode())["Nodes"]
    assert echoed == nodes
    chosen = json.loads(ExtenderFilterResult(nodes=args.nodes.only(n1)).encode())["Nodes"]
    assert chosen == {"apiVersion": "v1", "kind": "NodeList", "items": [node]}


@pytest.mark.parametrize(
    "body, words",
    [
        pytest.param(b"", "empty request body", id="empty"),
        pytest.param(b"{", "invalid JSON", id="truncated"),
        pytest.param(b"[]", "expected a JSON object", id="not-object"),
        pytest.param(b'{"Pod": 3}', "field Pod must be an object", id="pod-type"),
        pytest.param(b'{"NodeNames": "a"}', "NodeNames must be a list", id="names-type"),
        pytest.param(b'{"Pod": {}, "Nodes": {"items": [1]}}', "Nodes.items", id="items-type"),
        pytest.param(b'{"NodeNames": []}', "extender args missing pod", id="no-pod"),
        pytest.param(
            b'{"Pod": {"metadata": {}}}',
            "ExtenderArgs.Pod: pod has no metadata.name",
            id="pod-without-name",
        ),
        pytest.param(
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": 1}}, "Nodes": {}}',
            "ExtenderArgs.Pod: pod default/p: spec.containers must be a list",
            id="simulated-pod-unreadable",
        ),
        pytest.param(b"\xff\xfe", "invalid JSON", id="not-utf8"),
        pytest.param(b" " * (MAX_EXTENDER_BODY + 1), "exceeds", id="too-large"),
    ],
)
def test_bad_filter_bodies_name_what_is_wrong(body: bytes, words: str) -> None:
    with pytest.raises(ExtenderDecodeError, match=words):
        ExtenderArgs.from_json(body)


def test_filter_result_is_pascal_case_with_every_field() -> None:
    assert json.loads(ExtenderFilterResult(node_names=["node2"]).encode()) == {
        "Nodes": None,
        "NodeNames": ["node2"],
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    assert json.loads(ExtenderFilterResult(error="boom").encode())["Error"] == "boom"


def test_binding_args_round_trip_and_require_pod_and_node() -> None:
    body = b'{"podname":"p","PodNamespace":"ns","PodUID":"u","NODE":"n"}'
    assert ExtenderBindingArgs.from_json(body) == ExtenderBindingArgs("p", "ns", "u", "n")
    with pytest.raises(ExtenderDecodeError, match="missing PodName, Node"):
        ExtenderBindingArgs.from_json(b'{"PodNamespace":"ns"}')
    with pytest.raises(ExtenderDecodeError, match="PodUID must be a string"):
        ExtenderBindingArgs.from_json(b'{"PodName":"p","Node":"n","PodUID":5}')
    assert ExtenderBindingResult().encode() == b'{"Error":""}'


@pytest.mark.parametrize("text", ["", "ns", "/name", "ns/", "a/b/c"])
def test_pod_ref_rejects_malformed_references(text: str) -> None:
    with pytest.raises(ValueError, match="namespace/name"):
        PodRef.parse(text)


def test_pod_ref_parses() -> None:
    ref = PodRef.parse("team-a/job-1")
    assert (ref.namespace, ref.name, str(ref)) == ("team-a", "job-1", "team-a/job-1")
