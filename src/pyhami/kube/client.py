"""A small typed adapter over kubernetes-asyncio: raw JSON in and out, our errors.

kubernetes-asyncio supplies configuration (kubeconfig, in-cluster, TLS, auth) and the aiohttp
transport; every call goes through `ApiClient.call_api` with `_preload_content=False`, so
objects stay plain JSON dicts (no model round trip on hot paths) and failures become
`pyhami.kube.errors` classes with the cause chained.
"""

from __future__ import annotations

import enum
import json
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypedDict, Unpack

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration

from pyhami.kube.errors import KubeError, KubeUnavailable, error_from_body, error_from_status
from pyhami.kube.resources import EVENTS, NODES, PODS, Resource

JsonObject = dict[str, Any]


class PatchType(enum.StrEnum):
    """Patch kinds; the value is the Content-Type on the wire."""

    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JsonObject]
    resource_version: str


class ListQuery(TypedDict, total=False):
    label_selector: str
    field_selector: str
    page_size: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: JsonObject

    @property
    def resource_version(self) -> str:
        return resource_version(self.object)


def resource_version(obj: Mapping[str, Any]) -> str:
    """Any object's `metadata.resourceVersion` ("" when it has none)."""
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return version if isinstance(version, str) else ""


def json_object(data: bytes) -> JsonObject:
    """`data` decoded; ValueError saying what is wrong unless it is one JSON object."""
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"invalid JSON: {err}") from err
    except RecursionError as err:
        raise ValueError("invalid JSON: nested too deeply") from err
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _query(**params: str | int | bool | None) -> list[tuple[str, str]]:
    return [
        (key, ("true" if value else "false") if isinstance(value, bool) else str(value))
        for key, value in params.items()
        if value is not None and value != ""
    ]


# kubernetes-asyncio's read buffer: a watch event can carry an object up to etcd's 1.5 MiB limit.
READ_BUFFER_BYTES = 2**21


def proxy_from_environment(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTPS_PROXY / HTTP_PROXY, unless NO_PROXY
    covers its host), read once as client-go does."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.hostname is None or urllib.request.proxy_bypass(parsed.hostname):
        return None
    return urllib.request.getproxies().get(parsed.scheme) or None


def _stop_per_request_environment_lookups(api: ApiClient) -> None:
    """kubernetes-asyncio makes its aiohttp session with trust_env=True: every request then
    looks up proxies and ~/.netrc in a worker thread (two thread hops, about 0.45 ms of CPU per
    call). The proxy was resolved once above; the same session without trust_env replaces it."""
    rest = api.rest_client
    session: aiohttp.ClientSession = rest.pool_manager
    connector = session.connector
    session.detach()  # the connector moves to the new session
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=READ_BUFFER_BYTES
    )


class KubeClient:
    """One API connection; `async with KubeClient(configuration)` closes it after use."""

    def __init__(self, configuration: Configuration, *, timeout_s: float | None = 30.0) -> None:
        if not configuration.proxy and configuration.host:
            configuration.proxy = proxy_from_environment(configuration.host)
        self._api = ApiClient(configuration)
        _stop_per_request_environment_lookups(self._api)
        self._timeout_s = timeout_s

    @classmethod
    async def from_kubeconfig(
        cls, path: str | None = None, *, timeout_s: float | None = 30.0
    ) -> KubeClient:
        """KUBECONFIG / the given file / ~/.kube/config, else in-cluster (HAMi's order)."""
        from kubernetes_asyncio import config

        configuration = Configuration()
        try:
            await config.load_kube_config(config_file=path, client_configuration=configuration)
        except config.ConfigException:
            if path is not None:
                raise
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        return cls(configuration, timeout_s=timeout_s)

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- transport ------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout | float | None = None,
    ) -> Any:
        """Start a request; returns the open aiohttp response (caller reads and releases)."""
        try:
            return await self._api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],  # the token kubeconfig / in-cluster config set
                _preload_content=False,
                _request_timeout=timeout if timeout is not None else self._timeout_s,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise KubeUnavailable(0, "Unavailable", f"{method} {path}: {err!r}") from err

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        """One call; returns the decoded JSON object or raises a `KubeError`."""
        response = await self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            data = await response.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise KubeUnavailable(0, "Unavailable", f"{method} {path}: {err!r}") from err
        finally:
            response.release()
        if not 200 <= response.status < 300:
            raise error_from_body(response.status, data)
        try:
            return json_object(data)
        except ValueError as err:
            raise KubeError(response.status, "BadResponse", f"{method} {path}: {err}") from err

    # --- generic verbs --------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonObject:
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self, resource: Resource, namespace: str | None = None, **query: Unpack[ListQuery]
    ) -> ObjectList:
        """All matching objects, every page; the list's resourceVersion."""
        pages = [page async for page in self.list_pages(resource, namespace, **query)]
        return ObjectList([obj for page in pages for obj in page.items], pages[-1].resource_version)

    async def list_pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = 500,
    ) -> AsyncIterator[ObjectList]:
        """The matching objects a page at a time (a reader keeps only what it makes of each
        page), following `continue`; the last page carries the list's resourceVersion."""
        token = ""
        while True:
            query = _query(
                labelSelector=label_selector,
                fieldSelector=field_selector,
                limit=page_size or None,
                **{"continue": token or None},
            )
            page = await self.request("GET", resource.path(namespace), query=query)
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            yield ObjectList(page.get("items") or [], str(metadata.get("resourceVersion", "")))
            if not token:
                return

    async def create(
        self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> JsonObject:
        full = {"apiVersion": resource.api_version, "kind": resource.kind, **body}
        return await self.request("POST", resource.path(namespace), body=full)

    async def replace(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str = "",
    ) -> JsonObject:
        """PUT; the body's metadata.resourceVersion makes it conditional (409 when stale)."""
        full = {"apiVersion": resource.api_version, "kind": resource.kind, **body}
        return await self.request("PUT", resource.path(namespace, name, subresource), body=full)

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str = "",
    ) -> JsonObject:
        if patch_type is PatchType.JSON and not isinstance(body, list):
            raise TypeError("a JSON patch body is a list of operations")
        if patch_type is not PatchType.JSON and not isinstance(body, Mapping):
            raise TypeError(f"a {patch_type.name.lower()} patch body is a JSON object")
        return await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=body,
            content_type=patch_type.value,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
    ) -> JsonObject:
        options: JsonObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return await self.request("DELETE", resource.path(namespace, name), body=options)

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        label_selector: str = "",
        field_selector: str = "",
        timeout_s: int = 300,
        bookmarks: bool = True,
    ) -> AsyncIterator[WatchEvent]:
        """Stream events after `resource_version` until the server ends the watch.

        An ERROR event raises its error (410 → `Gone`: the caller must relist)."""
        query = _query(
            watch=True,
            resourceVersion=resource_version,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            timeoutSeconds=timeout_s,
            allowWatchBookmarks=bookmarks,
        )
        path = resource.path(namespace)
        # No total timeout: the server ends the stream; a silent connection is cut after a
        # read stall longer than the server's own timeout.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_s + 30)
        response = await self._send("GET", path, query=query, timeout=timeout)
        try:
            if response.status != 200:
                raise error_from_body(response.status, await response.read())
            while True:
                try:
                    line = await response.content.readline()
                except (aiohttp.ClientError, TimeoutError) as err:
                    raise KubeUnavailable(0, "Unavailable", f"watch {path}: {err!r}") from err
                if not line:
                    return
                yield _decode_event(line, path)
        finally:
            response.release()

    # --- typed helpers for what pyhami does most --------------------------------------------

    async def get_pod(self, namespace: str, name: str) -> JsonObject:
        return await self.get(PODS, name, namespace)

    async def list_pods(
        self, namespace: str | None = None, *, label_selector: str = "", field_selector: str = ""
    ) -> ObjectList:
        return await self.list(
            PODS, namespace, label_selector=label_selector, field_selector=field_selector
        )

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> JsonObject:
        return await self.create(PODS, body, namespace)

    async def patch_pod(self, namespace: str, name: str, body: Any) -> JsonObject:
        return await self.patch(PODS, name, body, namespace)

    async def patch_pod_status(
        self, namespace: str, name: str, body: Any, *, patch_type: PatchType = PatchType.MERGE
    ) -> JsonObject:
        return await self.patch(
            PODS, name, body, namespace, patch_type=patch_type, subresource="status"
        )

    async def delete_pod(
        self, namespace: str, name: str, *, grace_period_seconds: int | None = None
    ) -> JsonObject:
        return await self.delete(PODS, name, namespace, grace_period_seconds=grace_period_seconds)

    async def bind_pod(
        self, namespace: str, name: str, node: str, *, uid: str | None = None
    ) -> None:
        """POST pods/<name>/binding; a pod that is already bound raises `Conflict`."""
        metadata: JsonObject = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.request("POST", PODS.path(namespace, name, "binding"), body=body)

    async def evict_pod(self, namespace: str, name: str, *, uid: str) -> None:
        """POST pods/<name>/eviction (policy/v1): a delete the API server refuses with 429
        (`TooManyRequests`) where a PodDisruptionBudget allows no disruption now. `uid` makes
        sure it is that pod, not a later one of the same name."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        await self.request("POST", PODS.path(namespace, name, "eviction"), body=body)

    async def get_node(self, name: str) -> JsonObject:
        return await self.get(NODES, name)

    async def patch_node(self, name: str, body: Any) -> JsonObject:
        return await self.patch(NODES, name, body)

    async def patch_node_status(self, name: str, body: Any) -> JsonObject:
        return await self.patch(NODES, name, body, subresource="status")

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> JsonObject:
        """A core/v1 Event (the API HAMi's broadcaster writes to)."""
        return await self.create(EVENTS, event, namespace)


def _decode_event(line: bytes, path: str) -> WatchEvent:
    try:
        event = json_object(line)
    except ValueError as err:
        raise KubeError(0, "BadResponse", f"watch {path}: {err}") from err
    if not isinstance(event.get("object"), dict):
        raise KubeError(0, "BadResponse", f"watch {path}: an event without an object")
    kind, obj = str(event.get("type", "")), event["object"]
    if kind == "ERROR":
        raise error_from_status(int(obj.get("code") or 0), obj)
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise KubeError(0, "BadResponse", f"watch {path}: unknown event type {kind!r}")
    return WatchEvent(kind, obj)
