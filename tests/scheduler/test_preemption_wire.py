"""`/preempt`'s wire form: kube-scheduler's ExtenderPreemptionArgs in, ExtenderPreemptionResult
out, with the Go field names (k8s.io/kube-scheduler/extender/v1 has no JSON tags)."""

import json
import re

import pytest

from pyhami.engine.preempt import NodePreemption, Proposal
from pyhami.kube.extender_wire import (
    ClaimedPod,
    ExtenderDecodeError,
    PreemptionArgs,
    preemption_result,
)
from pyhami.model import NodeName

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u-p"}}


def test_meta_victims_as_kube_scheduler_sends_them_with_node_cache_capable() -> None:
    body = {
        "Pod": POD,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "u-a"}, {"UID": "u-b"}], "NumPDBViolations": 1},
            "n2": {"Pods": [{"UID": "u-c"}], "NumPDBViolations": 0},
        },
    }
    args = PreemptionArgs.from_json(json.dumps(body).encode())
    assert args.pod == ClaimedPod("default", "p", "u-p")
    assert args.proposals == {
        "n1": Proposal(frozenset({"u-a", "u-b"}), 1),
        "n2": Proposal(frozenset({"u-c"}), 0),
    }


def test_whole_victim_pods_without_node_cache_and_any_key_case() -> None:
    body = {
        "pod": POD,
        "nodeNameToVictims": {
            "n1": {"pods": [{"metadata": {"name": "a", "uid": "u-a"}}], "numPDBViolations": 2}
        },
    }
    args = PreemptionArgs.from_json(json.dumps(body).encode())
    assert args.proposals == {"n1": Proposal(frozenset({"u-a"}), 2)}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"NodeNameToMetaVictims": {}}, "field Pod must be a Pod object"),
        (
            {"Pod": {"metadata": {"uid": "u"}}},
            "ExtenderPreemptionArgs.Pod: pod has no metadata.name",
        ),
        ({"Pod": POD, "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims must be an object"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}}, "entry without a UID"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": "x"}}}, "needs Pods (a list)"),
    ],
)
def test_bad_requests_name_what_is_wrong(body: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ExtenderDecodeError, match=re.escape(message)):
        PreemptionArgs.from_json(json.dumps(body).encode())


def test_the_result_lists_only_kept_nodes_with_their_victims() -> None:
    answers = {
        NodeName("n1"): NodePreemption(NodeName("n1"), ("u-a", "u-b"), 1, "evict"),
        NodeName("n2"): NodePreemption(NodeName("n2"), (), 0, "dropped"),
    }
    assert json.loads(preemption_result(answers)) == {
        "NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "u-a"}, {"UID": "u-b"}], "NumPDBViolations": 1}
        }
    }
