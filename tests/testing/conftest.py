"""Fixtures for the fake API server tests: a running server and a raw HTTP session on it."""

from collections.abc import AsyncIterator

import aiohttp
import pytest

from pyhami.testing import FakeKubeAPIServer

from .builders import Http


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeKubeAPIServer]:
    async with FakeKubeAPIServer(bookmark_interval_s=0.1, pod_grace_cap_s=0.05, seed=7) as server:
        yield server


@pytest.fixture
async def http(apiserver: FakeKubeAPIServer) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession(apiserver.url) as session:
        yield Http(session)
