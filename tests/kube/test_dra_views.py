"""ResourceClaims, ResourceSlices and pods' claim references read once into views."""

import pytest

from pyhami.devices.nvidia.dra_claims import consumed_capacity
from pyhami.kube.dra_views import read_claim, read_slice
from pyhami.kube.manifests import ClaimUse, read_pod_state
from pyhami.model.dra import ClaimSpecError, DeviceResultView

CLAIM = {
    "metadata": {"namespace": "ns", "name": "c", "uid": "u-1"},
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.pyhami.io",
                        "pool": "node-a",
                        "device": "gpu-0",
                        "shareID": "s-1",
                        "consumedCapacity": {"memory": "4Gi", "cores": "30"},
                    },
                    {"request": "nic", "driver": "other", "pool": "node-a", "device": "eth0"},
                ]
            }
        },
        "reservedFor": [
            {"resource": "pods", "name": "p", "uid": "pod-1"},
            {"resource": "jobs", "apiGroup": "batch", "name": "j", "uid": "job-1"},
        ],
    },
}


def test_a_claim_is_read_with_its_results_and_the_pods_it_is_reserved_for() -> None:
    claim = read_claim(CLAIM)
    assert (claim.namespace, claim.name, claim.uid, claim.allocated) == ("ns", "c", "u-1", True)
    assert claim.results[0] == DeviceResultView(
        request="gpu",
        driver="gpu.pyhami.io",
        pool="node-a",
        device="gpu-0",
        share_id="s-1",
        consumed={"memory": "4Gi", "cores": "30"},
    )
    assert claim.results[1].share_id is None and claim.results[1].consumed == {}
    assert claim.reserved_for == (("p", "pod-1"),), "only core pods count"
    assert consumed_capacity(claim) == [{"memory": 4 << 30, "cores": 30}, {}]


def test_an_unallocated_claim_has_no_results() -> None:
    claim = read_claim({"metadata": {"namespace": "ns", "name": "c"}})
    assert not claim.allocated and claim.results == () and claim.reserved_for == ()


def test_an_unreadable_claim_names_the_claim_and_the_field() -> None:
    bad = {
        "metadata": {"namespace": "ns", "name": "c"},
        "status": {"allocation": {"devices": {"results": {}}}},
    }
    with pytest.raises(
        ClaimSpecError, match=r"claim ns/c: allocation.devices.results must be a list"
    ):
        read_claim(bad)


def _pod(**status: object) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "uid": "pod-1"},
        "spec": {
            "resourceClaims": [
                {"name": "direct", "resourceClaimName": "shared"},
                {"name": "templated", "resourceClaimTemplateName": "t"},
            ],
            "initContainers": [{"name": "setup"}],
            "containers": [
                {"name": "a", "resources": {"claims": [{"name": "templated"}]}},
                {"name": "b", "resources": {"claims": [{"name": "direct", "request": "gpu"}]}},
            ],
        },
        "status": status,
    }


def test_a_pods_claims_are_named_by_its_spec_or_for_a_template_by_its_status() -> None:
    state = read_pod_state(
        _pod(resourceClaimStatuses=[{"name": "templated", "resourceClaimName": "gen-1"}])
    )
    assert state.claims == (ClaimUse("a", "gen-1"), ClaimUse("b", "shared", "gpu"))


def test_a_templated_claim_is_unknown_until_the_pod_status_names_it() -> None:
    assert read_pod_state(_pod()).claims == (ClaimUse("b", "shared", "gpu"),)


def test_a_slice_is_read_for_its_version_and_pool_generation() -> None:
    stored = {"metadata": {"resourceVersion": "7"}, "spec": {"pool": {"generation": 3}}}
    assert (read_slice(stored).resource_version, read_slice(stored).generation) == ("7", 3)
    assert read_slice({"metadata": {}}).generation == 0
