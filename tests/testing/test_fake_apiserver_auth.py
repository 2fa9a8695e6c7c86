"""The fake API server over HTTPS with bearer tokens, reached through kubeconfig and through
a Configuration, as a component in a cluster would reach kube-apiserver; who asked for what."""

from pathlib import Path

import pytest

from pyhami.kube import NODES, PODS, KubeClient, Unauthorized
from pyhami.testing import FakeKubeAPIServer
from pyhami.testing.certs import write_serving_certificate
from pyhami.testing.fake_apiserver import ADMIN, RequestKey, ServingTLS, UserInfo, service_account


@pytest.fixture
def tls(tmp_path: Path) -> ServingTLS:
    cert = write_serving_certificate(tmp_path)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(cert.ca_pem)
    return ServingTLS(cert.cert_file, cert.key_file, ca_file)


async def test_https_and_token_through_kubeconfig(tls: ServingTLS, tmp_path: Path) -> None:
    async with FakeKubeAPIServer(tls=tls, token="s3cret", require_token=True) as server:
        assert server.url.startswith("https://")
        path = server.write_kubeconfig(tmp_path / "kubeconfig")
        async with await KubeClient.from_kubeconfig(str(path)) as client:
            await client.create(NODES, {"metadata": {"name": "n1"}})
        async with KubeClient(server.configuration()) as client:
            assert (await client.get_node("n1"))["metadata"]["name"] == "n1"


async def test_wrong_token_is_unauthorized(tls: ServingTLS) -> None:
    async with FakeKubeAPIServer(tls=tls, token="s3cret", require_token=True) as server:
        config = server.configuration()
        config.api_key = {"BearerToken": "Bearer guess"}
        async with KubeClient(config) as client:
            with pytest.raises(Unauthorized) as caught:
                await client.get_node("n1")
        assert caught.value.code == 401


async def test_each_user_has_a_token_and_its_requests_are_recorded_as_its(
    tls: ServingTLS,
) -> None:
    scheduler = service_account("hami-system", "hami-scheduler")
    async with FakeKubeAPIServer(tls=tls, token="s3cret", require_token=True) as server:
        async with KubeClient(server.configuration()) as admin:
            await admin.create(NODES, {"metadata": {"name": "n1"}})
        async with KubeClient(server.configuration(scheduler)) as client:
            await client.get_node("n1")
            await client.get_node("n1")
            await client.list(PODS, "default")
        tokens = {server.configuration(scheduler).api_key["BearerToken"] for _ in range(2)}
        assert len(tokens) == 1 and tokens != {"Bearer s3cret"}, "one token per user"
        assert server.requests_by_user == {
            RequestKey(ADMIN, "create", "", "nodes", ""): 1,
            RequestKey(scheduler, "get", "", "nodes", ""): 2,
            RequestKey(scheduler, "list", "", "pods", "default"): 1,
        }


async def test_without_require_token_an_unknown_caller_is_anonymous(tls: ServingTLS) -> None:
    async with FakeKubeAPIServer(tls=tls, token="s3cret") as server:
        config = server.configuration()
        config.api_key = {"BearerToken": "Bearer guess"}
        async with KubeClient(config) as client:
            await client.list(NODES)
        assert list(server.requests_by_user) == [
            RequestKey("system:anonymous", "list", "", "nodes", "")
        ]


@pytest.mark.parametrize(
    ("username", "groups"),
    [
        (ADMIN, ("system:masters", "system:authenticated")),
        (
            "system:serviceaccount:gpu:pyhami",
            ("system:serviceaccounts", "system:serviceaccounts:gpu", "system:authenticated"),
        ),
        ("system:node:gpu-1", ("system:nodes", "system:authenticated")),
        ("alice", ("system:authenticated",)),
        ("system:anonymous", ("system:unauthenticated",)),
    ],
)
def test_users_are_in_the_groups_kube_apiserver_puts_them_in(
    username: str, groups: tuple[str, ...]
) -> None:
    assert UserInfo.named(username).groups == groups
