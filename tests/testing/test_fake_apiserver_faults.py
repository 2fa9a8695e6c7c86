"""Fault hooks: injected errors, latency, dropped watches."""

import asyncio

import pytest

from pyhami.testing import FakeKubeAPIServer

from .builders import Http, pod

PODS = "/api/v1/namespaces/default/pods"


async def test_error_for_a_verb_and_resource_n_times(
    http: Http, apiserver: FakeKubeAPIServer
) -> None:
    await http.post(PODS, pod("a"))
    apiserver.faults.fail("create", "pods/binding", status=503, times=2)
    binding = {"metadata": {"name": "a"}, "target": {"name": "n1"}}
    for _ in range(2):
        status, body = await http.post(f"{PODS}/a/binding", binding)
        assert (status, body["reason"], body["kind"]) == (503, "ServiceUnavailable", "Status")
    assert (await http.get(f"{PODS}/a"))[0] == 200  # other verbs unaffected
    assert (await http.post(f"{PODS}/a/binding", binding))[0] == 201
    assert apiserver.faults.injected == 2


async def test_latency(http: Http, apiserver: FakeKubeAPIServer) -> None:
    apiserver.faults.delay(0.2, "get", "pods", times=1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await http.get(f"{PODS}/a")
    assert loop.time() - start >= 0.2  # held at least as long as asked
    assert apiserver.faults.active() == []  # and only once


async def test_fault_arguments_are_checked(apiserver: FakeKubeAPIServer) -> None:
    with pytest.raises(ValueError, match="verb"):
        apiserver.faults.fail("frobnicate", "pods")
    with pytest.raises(ValueError, match="4xx or 5xx"):
        apiserver.faults.fail("get", "pods", status=200)
    with pytest.raises(ValueError, match="latency"):
        apiserver.faults.delay(-1)


async def test_clear_removes_standing_faults(http: Http, apiserver: FakeKubeAPIServer) -> None:
    apiserver.faults.fail(None, None, status=500, times=None)
    assert (await http.get(PODS))[0] == 500
    apiserver.faults.clear()
    assert (await http.get(PODS))[0] == 200
