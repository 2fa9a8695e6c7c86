"""FakeKubeAPIServer: the HTTP face of the store, on a real localhost socket."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import json
import ssl
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from pyhami.kube import JsonObject
from pyhami.kube.clock import Clock
from pyhami.kube.errors import Status, StatusDetails
from pyhami.kube.lifecycle import AsyncService
from pyhami.testing.certs import kubeconfig
from pyhami.testing.fake_apiserver.admission import AdmissionChain
from pyhami.testing.fake_apiserver.faults import FaultInjector
from pyhami.testing.fake_apiserver.identity import ADMIN, ANONYMOUS, RequestKey, Tokens, UserInfo
from pyhami.testing.fake_apiserver.objects import StoredObject
from pyhami.testing.fake_apiserver.resources import PODS, ResourceType
from pyhami.testing.fake_apiserver.routes import Route, parse_path
from pyhami.testing.fake_apiserver.selectors import Selector
from pyhami.testing.fake_apiserver.status import (
    ApiError,
    bad_request,
    gone,
    internal,
    stale,
)
from pyhami.testing.fake_apiserver.store import (
    DEFAULT_NAMESPACES,
    PATCH_TYPES,
    ObjectStore,
)
from pyhami.testing.fake_apiserver.watch import Watcher

log = structlog.get_logger(__name__)

_METHOD_NOT_ALLOWED = "the server does not allow this method on the requested resource"
_TRUE = ("1", "true", "True")
# Redos of an update whose object changed while its webhooks ran (GuaranteedUpdate retries).
_UPDATE_ATTEMPTS = 5


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _event_line(kind: str, obj: object) -> bytes:
    """One watch event on the stream: a JSON object per line."""
    return (_dumps({"type": kind, "object": obj}) + "\n").encode()


def _json_response(body: JsonObject, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(body), status=status, content_type="application/json")


def _list_response(
    resource: ResourceType, metadata: Mapping[str, str | int], items: list[StoredObject]
) -> web.Response:
    """A list: its items' documents as stored (no kind, no apiVersion)."""
    return _json_response(
        {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": [item.body for item in items],
        }
    )


def _object_response(obj: StoredObject, status: int = 200) -> web.Response:
    """An object as get, create, update, patch and delete answer it: kind and apiVersion first."""
    return _json_response(obj.encode(), status)


@dataclass(frozen=True, slots=True)
class ServingTLS:
    """Serve HTTPS with this certificate; clients are told to trust `ca_file`."""

    cert_file: Path
    key_file: Path
    ca_file: Path


class FakeKubeAPIServer(AsyncService):
    """A kube-apiserver double for tests and the demo: real HTTP on 127.0.0.1.

    `store` is the in-process view (reads, and writes that skip admission); `faults` injects
    latency and errors; `admission` holds the mutating webhooks. Use `configuration()` for a
    kubernetes-asyncio client, or `write_kubeconfig(path)` for a process.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock | None = None,
        history_limit: int = 10_000,
        bookmark_interval_s: float = 1.0,
        pod_grace_cap_s: float = 0.2,
        default_watch_timeout_s: float = 1800.0,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        seed: int | None = None,
        token: str = "fake-token",
        require_token: bool = False,
        tls: ServingTLS | None = None,
    ) -> None:
        self.store = ObjectStore(
            clock=clock,
            history_limit=history_limit,
            pod_grace_cap_s=pod_grace_cap_s,
            seed=seed,
            namespaces=namespaces,
        )
        self.faults = FaultInjector()
        self.admission = AdmissionChain(self.store)
        # What each user asked for, for holding a component's calls against RBAC rules.
        self.requests_by_user: Counter[RequestKey] = Counter()
        self.bookmark_interval_s = bookmark_interval_s
        self.default_watch_timeout_s = default_watch_timeout_s
        self.max_watch_timeout_s: float | None = None
        self._host = host
        self.token = token
        self._tokens = Tokens(token)
        self._require_token = require_token
        self._tls = tls
        self._port = port
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the fake API server is already running")
        app = web.Application(client_max_size=16 << 20)
        app.router.add_get("/version", self._version)
        for probe in ("/healthz", "/readyz", "/livez"):
            app.router.add_get(probe, self._probe)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        context = None
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self._tls.cert_file, self._tls.key_file)
        site = web.TCPSite(self._runner, self._host, self._port, ssl_context=context)
        await site.start()
        port = self._runner.addresses[0][1]
        scheme = "https" if self._tls is not None else "http"
        self.url = f"{scheme}://{self._host}:{port}"

    async def stop(self) -> None:
        self.store.drop_watches()
        await self.admission.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def requests(self) -> Counter[tuple[str, str]]:
        """How many requests of each (verb, resource), whoever made them."""
        counts: Counter[tuple[str, str]] = Counter()
        for key, count in self.requests_by_user.items():
            counts[(key.verb, key.resource)] += count
        return counts

    # --- client wiring --------------------------------------------------------------------

    def configuration(self, user: str = ADMIN) -> Configuration:
        """A kubernetes-asyncio Configuration that talks to this server as `user`."""
        if not self.url:
            raise RuntimeError("start the fake API server before asking for its configuration")
        config = Configuration(host=self.url)
        config.api_key = {"BearerToken": f"Bearer {self._tokens.token_for(user)}"}
        if self._tls is not None:
            config.ssl_ca_cert = str(self._tls.ca_file)
        return config

    def write_kubeconfig(self, path: Path, user: str = ADMIN) -> Path:
        """A kubeconfig file at `path` that talks to this server as `user`."""
        if not self.url:
            raise RuntimeError("start the fake API server before asking for a kubeconfig")
        cluster = {"server": self.url}
        if self._tls is not None:
            ca = base64.b64encode(self._tls.ca_file.read_bytes()).decode()
            cluster["certificate-authority-data"] = ca
        path.write_text(kubeconfig(cluster, {"token": self._tokens.token_for(user)}))
        return path

    def drop_watches(self, resource: str | None = None, *, abrupt: bool = False) -> int:
        """End open watches (cleanly, or by cutting the connection); returns how many."""
        for watcher in self.store.open_watchers(resource):
            watcher.abort = abrupt
        return self.store.drop_watches(resource)

    async def wait_for(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        condition: Callable[[StoredObject], bool],
        *,
        timeout_s: float = 10.0,
    ) -> StoredObject:
        """The object once `condition(obj)` holds (checked now and on every change).

        Raises TimeoutError, or LookupError when the object is deleted while waiting."""
        kind = self.store.resource(resource)
        selector = Selector.parse(kind, "", f"metadata.name={name}")
        watcher = self.store.watch(kind, namespace if kind.namespaced else None, selector, None)
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    event = await watcher.queue.get()
                    if event is None:
                        raise LookupError(f"the watch on {resource} {name!r} was dropped")
                    if event.type == "DELETED":
                        raise LookupError(f"{resource} {name!r} was deleted while waiting")
                    if condition(event.obj):
                        return event.obj
        finally:
            self.store.stop_watch(watcher)

    # --- HTTP -----------------------------------------------------------------------------

    async def _version(self, _request: web.Request) -> web.Response:
        return _json_response(
            {
                "major": "1",
                "minor": "33",
                "gitVersion": "v1.33.0-pyhami-fake",
                "platform": "linux/amd64",
            }
        )

    async def _probe(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        route = parse_path(request.path)
        if route is None:
            missing = "the server could not find the requested resource"
            return _json_response(Status(404, "NotFound", missing, StatusDetails()).encode(), 404)
        try:
            user = self._tokens.user_of(request.headers.get("Authorization"))
            if user is None:
                if self._require_token:
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                user = UserInfo.named(ANONYMOUS)
            verb = self._verb(request, route)
            if request.query.get("dryRun"):
                # Refused rather than ignored: persisting a dry run would be a silent lie.
                raise bad_request("dryRun is not supported by the fake API server")
            self.requests_by_user[
                RequestKey(
                    user.username,
                    verb,
                    route.resource.group,
                    route.audit_name,
                    route.namespace or "",
                )
            ] += 1
            await self.faults.before(verb, route.audit_name)
            if verb == "watch":
                return await self._watch(request, route)
            return await self._serve(request, route, verb, user)
        except ApiError as err:
            return _json_response(err.status.encode(), err.code)
        except Exception as err:  # a bug in the double still answers like an apiserver
            log.exception("fake API server failed a request", path=request.path)
            failure = internal(f"{type(err).__name__}: {err}")
            return _json_response(failure.status.encode(), failure.code)

    @staticmethod
    def _verb(request: web.Request, route: Route) -> str:
        method = request.method
        collection = route.name is None
        if route.subresource == "binding":
            if method == "POST":
                return "create"
        elif method == "GET":
            if collection:
                return "watch" if request.query.get("watch") in _TRUE else "list"
            return "get"
        elif method == "POST" and collection:
            return "create"
        elif method == "PUT" and not collection:
            return "update"
        elif method == "PATCH" and not collection:
            return "patch"
        elif method == "DELETE":
            return "deletecollection" if collection else "delete"
        raise ApiError(405, "MethodNotAllowed", _METHOD_NOT_ALLOWED)

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise bad_request(f"the request body is not valid JSON: {err}") from err

    async def _serve(
        self, request: web.Request, route: Route, verb: str, user: UserInfo
    ) -> web.Response:
        store, resource = self.store, route.resource
        if (
            route.subresource not in ("", "status", "binding")
            or (route.subresource == "status" and not resource.has_status)
            or (route.subresource == "binding" and resource is not PODS)
        ):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if verb == "list":
            return self._list(request, route)
        if verb == "deletecollection":
            return self._delete_collection(request, route)
        if verb == "get":
            assert route.name is not None
            return _object_response(store.get(resource, route.namespace, route.name))
        if verb == "create":
            body = await self._body(request)
            if route.subresource == "binding":
                assert route.namespace is not None
                store.bind(route.namespace, route.name, body)
                return _json_response(Status(201).encode(), 201)
            if not isinstance(body, dict):
                raise bad_request(f"the body of a create must be a {resource.kind} object")
            return _object_response(await self._create(route, body, user), 201)
        if verb == "update":
            body = await self._body(request)
            if not isinstance(body, dict):
                raise bad_request(f"the body of an update must be a {resource.kind} object")
            return _object_response(await self._update(route, body, None, user))
        if verb == "patch":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type not in PATCH_TYPES:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {', '.join(PATCH_TYPES)}",
                )
            body = await self._body(request)
            return _object_response(await self._update(route, body, content_type, user))
        return _object_response(await self._delete(request, route))

    def _delete_collection(self, request: web.Request, route: Route) -> web.Response:
        selector = _selector(request, route)
        grace = _int_param(request, "gracePeriodSeconds")
        deleted = [
            self.store.delete(
                route.resource, obj.meta.namespace, obj.meta.name, grace_period_seconds=grace
            )
            for obj in self.store.matching(route.resource, route.namespace, selector)
        ]
        return _list_response(
            route.resource, {"resourceVersion": self.store.list_version()}, deleted
        )

    async def _create(self, route: Route, body: JsonObject, user: UserInfo) -> StoredObject:
        obj = self.store.prepare_create(route.resource, route.namespace, body)
        namespace = obj["metadata"].get("namespace")
        obj = await self.admission.admit(route.resource, namespace, obj, user=user)
        return self.store.create(route.resource, route.namespace, obj, keep_pod_status=False)

    async def _update(
        self, route: Route, body: Any, patch_type: str | None, user: UserInfo
    ) -> StoredObject:
        """An update (`patch_type` None) or patch; of an object itself (not a subresource)
        with UPDATE admission before the write.

        The webhooks run between reading the stored object and writing, so another write may
        land first; like kube-apiserver's GuaranteedUpdate, the request is then redone on the
        fresh object. A resourceVersion the client gave stays a precondition: redone, it no
        longer matches and the answer is a conflict.
        """
        assert route.name is not None
        resource, namespace, name = route.resource, route.namespace, route.name
        for _attempt in range(_UPDATE_ATTEMPTS):
            if patch_type is None:
                old, new = self.store.get(resource, namespace, name), copy.deepcopy(body)
            else:
                old, new = self.store.patched(resource, namespace, name, patch_type, body)
            metadata = new.get("metadata")
            if route.subresource or not isinstance(metadata, dict):
                # No admission (or let the store name what is wrong).
                return self.store.update(
                    resource, namespace, name, new, subresource=route.subresource
                )
            stored_version = old.meta.resource_version
            if metadata.get("resourceVersion") not in (None, "", stored_version):
                raise stale(resource, name)  # pinned by the client to another version
            admitted = await self.admission.admit(
                resource,
                old.meta.namespace or None,
                new,
                "UPDATE",
                user=user,
                old_object=old,
                options_kind="UpdateOptions" if patch_type is None else "PatchOptions",
            )
            admitted.setdefault("metadata", {})["resourceVersion"] = stored_version
            try:
                return self.store.update(resource, namespace, name, admitted)
            except ApiError as err:
                if err.code != 409:
                    raise
        raise stale(resource, name)

    async def _delete(self, request: web.Request, route: Route) -> StoredObject:
        assert route.name is not None
        options = await self._body(request) or {}
        if not isinstance(options, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        grace = options.get("gracePeriodSeconds")
        if "gracePeriodSeconds" in request.query:
            grace = _int_param(request, "gracePeriodSeconds")
        preconditions = options.get("preconditions") or {}
        return self.store.delete(
            route.resource,
            route.namespace,
            route.name,
            grace_period_seconds=None if grace is None else int(grace),
            uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"),
        )

    def _list(self, request: web.Request, route: Route) -> web.Response:
        query = request.query
        selector = _selector(request, route)
        version = self.store.list_version()
        start_after = ""
        if query.get("continue"):
            version, start_after = self._decode_continue(query["continue"])
        else:
            self.store.check_list_version(
                query.get("resourceVersion"), query.get("resourceVersionMatch")
            )
        items = self.store.matching(route.resource, route.namespace, selector)
        if start_after:
            items = [i for i in items if i.sort_key > start_after]
        metadata: dict[str, str | int] = {"resourceVersion": version}
        limit = _int_param(request, "limit") or 0
        if limit > 0 and len(items) > limit:
            items, rest = items[:limit], len(items) - limit
            token = _dumps({"rv": int(version), "start": items[-1].sort_key})
            metadata["continue"] = base64.urlsafe_b64encode(token.encode()).decode()
            metadata["remainingItemCount"] = rest
        return _list_response(route.resource, metadata, items)

    def _decode_continue(self, token: str) -> tuple[str, str]:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            version, start = int(decoded["rv"]), str(decoded["start"])
        except (binascii.Error, ValueError, KeyError, TypeError) as err:
            raise bad_request(f"invalid continue token: {err}") from err
        if version < self.store.compacted_version:
            raise gone(
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue parameter."
            )
        return str(version), start

    async def _watch(self, request: web.Request, route: Route) -> web.StreamResponse:
        query = request.query
        selector = _selector(request, route)
        asked = _int_param(request, "timeoutSeconds")
        timeout = self.default_watch_timeout_s if asked is None else float(asked)
        if self.max_watch_timeout_s is not None:  # a server that ends watches early
            timeout = min(timeout, self.max_watch_timeout_s)
        bookmarks = query.get("allowWatchBookmarks") in _TRUE
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            watcher = self.store.watch(
                route.resource, route.namespace, selector, query.get("resourceVersion")
            )
        except ApiError as err:
            if err.code != 410:
                raise
            await response.prepare(request)
            await response.write(_event_line("ERROR", err.status.encode()))
            await response.write_eof()
            return response
        await response.prepare(request)
        try:
            # A client that goes away mid-stream is the normal end of a watch.
            with contextlib.suppress(ConnectionError):
                await self._stream(
                    request, response, watcher, route.resource, timeout=timeout, bookmarks=bookmarks
                )
        finally:
            self.store.stop_watch(watcher)
        return response

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        watcher: Watcher,
        resource: ResourceType,
        *,
        timeout: float,
        bookmarks: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (remaining := deadline - loop.time()) > 0:
            wait = min(remaining, self.bookmark_interval_s) if bookmarks else remaining
            try:
                event = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
            except TimeoutError:
                if bookmarks and deadline - loop.time() > 0:
                    bookmark = {
                        "kind": resource.kind,
                        "apiVersion": resource.api_version,
                        "metadata": {"resourceVersion": self.store.list_version()},
                    }
                    await response.write(_event_line("BOOKMARK", bookmark))
                continue
            if event is None:
                if watcher.abort and request.transport is not None:
                    request.transport.abort()
                    return
                break
            await response.write(_event_line(event.type, event.obj.encode()))
        with contextlib.suppress(ConnectionError):
            await response.write_eof()


def _selector(request: web.Request, route: Route) -> Selector:
    query = request.query
    return Selector.parse(
        route.resource, query.get("labelSelector", ""), query.get("fieldSelector", "")
    )


def _int_param(request: web.Request, name: str) -> int | None:
    """The query parameter `name` as an integer; None when it is not given."""
    text = request.query.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError as err:
        raise bad_request(f"invalid value for {name}: {text!r} is not an integer") from err
