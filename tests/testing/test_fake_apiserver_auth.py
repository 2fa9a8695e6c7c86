"""The fake API server over HTTPS with a bearer token, reached through kubeconfig and through
a Configuration, as a component in a cluster would reach kube-apiserver."""

from pathlib import Path

import pytest

from pyhami.kube import NODES, KubeClient, Unauthorized
from pyhami.testing import FakeKubeAPIServer
from pyhami.testing.fake_apiserver import ServingTLS

from .certs import make_serving_cert


@pytest.fixture
def tls(tmp_path: Path) -> ServingTLS:
    cert = make_serving_cert(tmp_path)
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
