"""pyhami.kube.KubeClient against the fake API server: verbs, patch types, our error classes."""

import asyncio

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio import watch as k8s_watch

from pyhami.kube import (
    NODES,
    PODS,
    AlreadyExists,
    BadRequest,
    Conflict,
    Gone,
    Invalid,
    KubeClient,
    KubeUnavailable,
    NotFound,
    PatchType,
    ServerError,
)
from pyhami.kube.client import proxy_from_environment
from pyhami.testing import FakeKubeAPIServer

from .builders import pod


async def test_create_get_patch_delete_round_trip(kube: KubeClient) -> None:
    created = await kube.create_pod("default", pod("a"))
    assert created["metadata"]["uid"]
    patched = await kube.patch_pod("default", "a", {"metadata": {"annotations": {"k": "v"}}})
    assert patched["metadata"]["annotations"] == {"k": "v"}
    got = await kube.get_pod("default", "a")
    assert got["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    await kube.delete_pod("default", "a")
    with pytest.raises(NotFound) as caught:
        await kube.get_pod("default", "a")
    assert caught.value.code == 404 and caught.value.reason == "NotFound"


@pytest.mark.parametrize(
    ("patch_type", "body"),
    [
        pytest.param(PatchType.MERGE, {"metadata": {"labels": {"x": "1"}}}, id="merge"),
        pytest.param(PatchType.STRATEGIC, {"metadata": {"labels": {"x": "1"}}}, id="strategic"),
        pytest.param(
            PatchType.JSON,
            [{"op": "add", "path": "/metadata/labels", "value": {"x": "1"}}],
            id="json",
        ),
    ],
)
async def test_every_patch_type(kube: KubeClient, patch_type: PatchType, body: object) -> None:
    await kube.create(NODES, {"metadata": {"name": "n1"}})
    patched = await kube.patch(NODES, "n1", body, patch_type=patch_type)
    assert patched["metadata"]["labels"] == {"x": "1"}


async def test_conflict_and_already_exists(kube: KubeClient) -> None:
    created = await kube.create(NODES, {"metadata": {"name": "n1"}})
    with pytest.raises(AlreadyExists):
        await kube.create(NODES, {"metadata": {"name": "n1"}})
    stale = {
        "metadata": {
            "resourceVersion": created["metadata"]["resourceVersion"],
            "annotations": {"a": "1"},
        }
    }
    await kube.patch_node("n1", stale)
    with pytest.raises(Conflict) as caught:
        await kube.patch_node("n1", stale)
    assert not isinstance(caught.value, AlreadyExists)
    assert "the object has been modified" in caught.value.message


async def test_bind_and_rebind(kube: KubeClient) -> None:
    created = await kube.create_pod("default", pod("a"))
    await kube.bind_pod("default", "a", "n1", uid=created["metadata"]["uid"])
    assert (await kube.get_pod("default", "a"))["spec"]["nodeName"] == "n1"
    with pytest.raises(Conflict):
        await kube.bind_pod("default", "a", "n2")


async def test_invalid_and_bad_request(kube: KubeClient) -> None:
    with pytest.raises(Invalid) as caught:
        await kube.create_pod("default", {"metadata": {"name": "a"}, "spec": {}})
    assert caught.value.status["details"]["causes"][0]["field"] == "spec.containers"
    with pytest.raises(BadRequest):
        await kube.list(PODS, field_selector="spec.nope=1")


async def test_list_follows_pages(kube: KubeClient) -> None:
    for i in range(7):
        await kube.create_pod("default", pod(f"p{i}"))
    listed = await kube.list(PODS, "default", page_size=3)
    assert [p["metadata"]["name"] for p in listed.items] == [f"p{i}" for i in range(7)]
    assert listed.resource_version.isdigit()


async def test_server_errors_and_unreachable_server(
    kube: KubeClient, apiserver: FakeKubeAPIServer
) -> None:
    apiserver.faults.fail("get", "nodes", status=503, times=1)
    with pytest.raises(ServerError) as caught:
        await kube.get_node("n1")
    assert caught.value.code == 503
    with pytest.raises(NotFound):  # the fault was used up
        await kube.get_node("n1")
    config = apiserver.configuration()
    await apiserver.stop()
    async with KubeClient(config, timeout_s=2) as offline:
        with pytest.raises(KubeUnavailable) as down:
            await offline.get_node("n1")
    assert down.value.__cause__ is not None


async def test_watch_events_and_gone(kube: KubeClient, apiserver: FakeKubeAPIServer) -> None:
    created = await kube.create_pod("default", pod("a"))
    version = created["metadata"]["resourceVersion"]
    await kube.patch_pod("default", "a", {"metadata": {"labels": {"x": "1"}}})
    seen = []
    async for event in kube.watch(
        PODS, "default", resource_version=version, timeout_s=1, bookmarks=False
    ):
        seen.append((event.type, event.object["metadata"]["name"]))
    assert seen == [("MODIFIED", "a")]
    apiserver.store.compact()
    with pytest.raises(Gone):
        async for _ in kube.watch(PODS, "default", resource_version=version, timeout_s=1):
            pass


async def test_kubernetes_asyncio_typed_api_works_against_the_fake(
    apiserver: FakeKubeAPIServer, tmp_path
) -> None:
    """Others may use kubernetes-asyncio directly (and a kubeconfig file): that works too."""
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(apiserver.write_kubeconfig(tmp_path / "kubeconfig")),
        client_configuration=configuration,
    )
    async with k8s.ApiClient(configuration) as api_client:
        core = k8s.CoreV1Api(api_client)
        created = await core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        )
        assert created.metadata.uid
        patched = await core.patch_namespaced_pod(
            "a",
            "default",
            {"metadata": {"annotations": {"k": "v"}}},
            _content_type="application/merge-patch+json",
        )
        assert patched.metadata.annotations == {"k": "v"}
        watcher = k8s_watch.Watch()
        stream = watcher.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=created.metadata.resource_version,
            timeout_seconds=1,
        )
        events = [e async for e in stream]
        assert [e["type"] for e in events] == ["MODIFIED"]
        with pytest.raises(k8s.ApiException) as caught:
            await core.read_namespaced_pod("missing", "default")
        assert caught.value.status == 404


async def test_concurrent_conflicting_writers_exactly_one_wins(kube: KubeClient) -> None:
    created = await kube.create(NODES, {"metadata": {"name": "n1"}})
    version = created["metadata"]["resourceVersion"]

    async def lock(owner: str) -> bool:
        try:
            await kube.patch_node(
                "n1",
                {
                    "metadata": {
                        "annotations": {"hami.io/mutex.lock": owner},
                        "resourceVersion": version,
                    }
                },
            )
        except Conflict:
            return False
        return True

    results = await asyncio.gather(*(lock(f"p{i}") for i in range(8)))
    assert sum(results) == 1


async def test_from_kubeconfig(apiserver: FakeKubeAPIServer, tmp_path) -> None:
    path = apiserver.write_kubeconfig(tmp_path / "config")
    client = await KubeClient.from_kubeconfig(str(path))
    async with client:
        await client.create(NODES, {"metadata": {"name": "n1"}})
        assert (await client.get_node("n1"))["metadata"]["name"] == "n1"


async def test_patch_bodies_are_checked_before_sending(kube: KubeClient) -> None:
    with pytest.raises(TypeError, match="list of operations"):
        await kube.patch(NODES, "n1", {"a": 1}, patch_type=PatchType.JSON)
    with pytest.raises(TypeError, match="JSON object"):
        await kube.patch(NODES, "n1", [{"op": "remove", "path": "/a"}])


async def test_proxy_settings_are_read_once_not_on_every_request(
    apiserver: FakeKubeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp with trust_env looks up proxies and ~/.netrc in a worker thread on every call;
    like client-go, the client reads the environment once, when it is made."""
    import aiohttp.client

    lookups: list[str] = []
    real_lookup = aiohttp.client.get_env_proxy_for_url

    def counted(url: object) -> object:
        lookups.append(str(url))
        return real_lookup(url)

    monkeypatch.setattr(aiohttp.client, "get_env_proxy_for_url", counted)
    async with KubeClient(apiserver.configuration(), timeout_s=5) as client:
        for name in ("a", "b", "c"):
            await client.create_pod("default", pod(name))
        await client.list_pods()
    assert lookups == []


def test_the_environment_proxy_is_taken_at_start_and_no_proxy_honoured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    assert proxy_from_environment("https://api.example:6443") == "http://proxy.example:3128"
    assert proxy_from_environment("https://kube.internal.example:6443") is None
    monkeypatch.delenv("HTTPS_PROXY")
    assert proxy_from_environment("https://api.example:6443") is None
