"""A tiny scheduler extender for the harness tests: it fits pods on nodes by a label."""

import json
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web


class TinyExtender:
    """`/filter` keeps nodes labelled `gpu=yes`; `/bind` binds through the API (or fails)."""

    def __init__(self, bind: Callable[[str, str, str, str], Any] | None = None) -> None:
        self.filter_calls: list[dict[str, Any]] = []
        self.bind_calls: list[dict[str, Any]] = []
        self.peers: list[Any] = []  # the caller's address per filter or bind call
        self.filter_error = ""
        self.bind_errors = 0  # answer this many binds with an Error first
        self.filter_status = 200
        self.node_labels: dict[str, dict[str, str]] = {}
        self._bind = bind
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> None:
        app = web.Application()
        app.router.add_post("/filter", self._filter)
        app.router.add_post("/bind", self._bind_route)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        scheme = "https" if ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _seen(self, request: web.Request) -> None:
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername"))

    async def _filter(self, request: web.Request) -> web.Response:
        args = json.loads(await request.read())
        self.filter_calls.append(args)
        self._seen(request)
        if self.filter_status != 200:
            return web.Response(status=self.filter_status, text="broken")
        if self.filter_error:
            return web.json_response(
                {
                    "Nodes": None,
                    "NodeNames": None,
                    "FailedNodes": None,
                    "FailedAndUnresolvableNodes": None,
                    "Error": self.filter_error,
                }
            )
        if args["NodeNames"] is not None:
            names = args["NodeNames"]
        else:
            names = [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        fits = [n for n in names if self.node_labels.get(n, {}).get("gpu") == "yes"]
        fitting = set(fits)
        failed = {n: "no gpu here" for n in names if n not in fitting}
        answer: dict[str, Any] = {
            "Nodes": None,
            "NodeNames": fits,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": None,
            "Error": "",
        }
        if args["NodeNames"] is None:
            answer["Nodes"] = {
                "items": [n for n in args["Nodes"]["items"] if n["metadata"]["name"] in fits]
            }
            answer["NodeNames"] = None
        return web.json_response(answer)

    async def _bind_route(self, request: web.Request) -> web.Response:
        args = json.loads(await request.read())
        self.bind_calls.append(args)
        self._seen(request)
        if self.bind_errors > 0:
            self.bind_errors -= 1
            return web.json_response({"Error": "node lock contention"})
        assert self._bind is not None
        try:
            await self._bind(args["PodNamespace"], args["PodName"], args["Node"], args["PodUID"])
        except Exception as err:
            return web.json_response({"Error": str(err)})
        return web.json_response({"Error": ""})
