"""Resource quantities read back from the fake API server as kube-apiserver writes them
(its canonical form, kept-as-written texts and milli rounding included). The table holds what
Kubernetes v1.37's kube-apiserver answered; tests/cluster/test_quantities_on_real.py checks the
same values against the real one."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyhami.testing import FakeKubeAPIServer
from pyhami.testing.fake_apiserver.quantities import (
    FORMAT_MESSAGE,
    SUFFIX_MESSAGE,
    QuantityFormatError,
    canonical_quantity,
)

from .builders import Http, pod

READ_BACK = {
    "4000": "4k",
    "1024Mi": "1Gi",
    "0.5": "500m",
    "1.5Gi": "1536Mi",
    "100m": "100m",
    "1e3": "1e3",
    "10e2": "1e3",
    "1E3": "1E3",
    "1000000": "1M",
    "1Ki": "1Ki",
    "1024": "1024",
    "2048Ki": "2Mi",
    "8Ki": "8Ki",
    "1536": "1536",
    "0.1": "100m",
    "1.1": "1100m",
    "1500Ki": "1500Ki",
    "0.5Ki": "512",
    "1.1Ki": "1126400m",
    "1000m": "1",
    "1000000000n": "1",
    "0.0000000001": "1m",
    "123456789n": "124m",
    "0.000000001Ki": "1m",
    "1.500": "1.500",
    "01": "01",
    "+1": "+1",
    "+0.5": "500m",
    "1000E": "1",
    "1000P": "1E",
    "1000000000000000000": "1E",
    "999999999999999999": "999999999999999999",
    "12345678901234567890": "12345678901234567890",
    "9223372036854775807Ki": "9223372036854775807",
    "0": "0",
    "00": "0",
    "e3": "0",
    ".5": "500m",
    "1.": "1.",
    "1.G": "1.G",
    "1e-3": "1e-3",
    "1.25e-1": "1.25e-1",
    "3E-3": "3E-3",
    "5e+2": "500",
    "1e21": "1e21",
    "7Ki": "7Ki",
    " 7 ": "7",
    "4k": "4k",
}
REFUSED = {
    "abc": FORMAT_MESSAGE,
    "1x": FORMAT_MESSAGE,
    "1Kb": FORMAT_MESSAGE,
    "1e3e": FORMAT_MESSAGE,
    "1e": SUFFIX_MESSAGE,
    "--1": SUFFIX_MESSAGE,
    "1K": SUFFIX_MESSAGE,
}


@pytest.mark.parametrize(("written", "stored"), READ_BACK.items())
def test_a_quantity_reads_back_as_kube_apiserver_writes_it(written: str, stored: str) -> None:
    assert canonical_quantity(written) == stored


@pytest.mark.parametrize(("written", "message"), REFUSED.items())
def test_what_kube_apiserver_cannot_decode_is_refused_with_its_words(
    written: str, message: str
) -> None:
    with pytest.raises(QuantityFormatError) as refused:
        canonical_quantity(written)
    assert str(refused.value) == message


SUFFIXES = st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-3", "E6", "n"])


@given(
    whole=st.integers(0, 10**20),
    fraction=st.text("0123456789", max_size=4),
    suffix=SUFFIXES,
    negative=st.booleans(),
)
def test_the_stored_text_reads_back_unchanged(
    whole: int, fraction: str, suffix: str, negative: bool
) -> None:
    """What kube-apiserver stores, decoded again, stays as it is (a watch, a GET after a PUT)."""
    written = f"{'-' if negative else ''}{whole}{'.' + fraction if fraction else ''}{suffix}"
    stored = canonical_quantity(written)
    assert canonical_quantity(stored) == stored


async def test_pod_node_and_quota_lists_are_stored_canonical(
    apiserver: FakeKubeAPIServer, http: Http
) -> None:
    body = pod("quantities")
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpumem": "4000", "cpu": "0.5", "memory": "1024Mi"},
        "requests": {"cpu": "0.25"},
    }
    body["spec"]["overhead"] = {"memory": "1.5Gi"}
    status, created = await http.post("/api/v1/namespaces/default/pods", body)
    assert status == 201, created
    resources = created["spec"]["containers"][0]["resources"]
    assert resources == {
        "limits": {"nvidia.com/gpumem": "4k", "cpu": "500m", "memory": "1Gi"},
        # a limit is the request of what asks for none
        "requests": {"cpu": "250m", "nvidia.com/gpumem": "4k", "memory": "1Gi"},
    }
    assert created["spec"]["overhead"] == {"memory": "1536Mi"}
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "10"}}}
    assert (await http.post("/api/v1/nodes", node))[0] == 201
    status, patched = await http.patch(
        "/api/v1/nodes/n1/status", {"status": {"allocatable": {"memory": "2048Ki"}}}
    )
    assert status == 200, patched
    assert patched["status"]["allocatable"] == {"memory": "2Mi"}
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"nvidia.com/gpumem": "8000"}}}
    status, stored = await http.post("/api/v1/namespaces/default/resourcequotas", quota)
    assert stored["spec"]["hard"] == {"nvidia.com/gpumem": "8k"}


async def test_a_quantity_it_cannot_decode_is_a_bad_request(http: Http) -> None:
    body = pod("bad")
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpumem": "4 GB"}}
    status, answer = await http.post("/api/v1/namespaces/default/pods", body)
    assert status == 400
    assert answer["message"] == f'Pod in version "v1" cannot be handled as a Pod: {FORMAT_MESSAGE}'


async def test_a_resource_list_that_is_not_a_map_is_a_bad_request(http: Http) -> None:
    """kube-apiserver's decoder refuses it; stored, it would break whoever reads the pod."""
    body = pod("bad-list")
    body["spec"]["containers"][0]["resources"] = {"limits": "oops"}
    status, answer = await http.post("/api/v1/namespaces/default/pods", body)
    assert status == 400
    assert answer["message"] == (
        "Pod in version \"v1\" cannot be handled as a Pod: cannot unmarshal 'oops' into a "
        "v1.ResourceList"
    )
    status, _ = await http.get("/api/v1/namespaces/default/pods/bad-list")
    assert status == 404
