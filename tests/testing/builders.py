"""Raw HTTP access and object builders for the fake API server tests."""

import json
from typing import Any

import aiohttp


class Http:
    """Raw requests, answered as (status, decoded JSON body)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        async with self.session.request(
            method, path, data=data, headers={"Content-Type": content_type}
        ) as response:
            return response.status, await response.json(content_type=None)

    async def get(self, path: str) -> tuple[int, Any]:
        return await self.call("GET", path)

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body)

    async def put(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, body)

    async def patch(
        self, path: str, body: Any, content_type: str = "application/merge-patch+json"
    ) -> tuple[int, Any]:
        return await self.call("PATCH", path, body, content_type)

    async def delete(self, path: str, body: Any = None) -> tuple[int, Any]:
        return await self.call("DELETE", path, body)


def pod(
    name: str,
    *,
    node: str = "",
    labels: dict[str, str] | None = None,
    scheduler: str = "",
    gpus: int = 0,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container]}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
