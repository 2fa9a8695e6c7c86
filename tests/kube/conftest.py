"""A fake API server and a pyhami.kube client pointed at it."""

from collections.abc import AsyncIterator

import pytest

from pyhami.kube import KubeClient
from pyhami.testing import FakeKubeAPIServer


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeKubeAPIServer]:
    async with FakeKubeAPIServer(bookmark_interval_s=0.1, pod_grace_cap_s=0.05, seed=3) as server:
        yield server


@pytest.fixture
async def kube(apiserver: FakeKubeAPIServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(apiserver.configuration(), timeout_s=5) as client:
        yield client
