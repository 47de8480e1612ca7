"""The coordinator's HTTP/1.1 server: aiohttp's low-level server, no application layer.

Every request the coordinator serves is a small JSON object and every answer is one too, so
the routing, middleware and response machinery of ``aiohttp.web.Application`` was most of an
RPC's cost (~150 us). ``aiohttp.web.Server`` hands each parsed request (aiohttp's C HTTP
parser, keep-alive, pipelining, limits) straight to one coroutine, which dispatches on
method and path itself (~65 us per request on this machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger("txnlog.coordinator.http")

Reply = tuple[int, bytes] | tuple[int, bytes, bytes]
Route = Callable[[str, str, bytes], Awaitable[Reply]]

MAX_BODY = 64 << 20
_JSON = "application/json"
_FAILED = (500, b'{"error": "UnknownServerError", "code": -1}')


class HttpServer:
    """Serves ``route(method, path, body) -> (status, body[, content type])``."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self._handler: web.Server | None = None
        self._server: asyncio.Server | None = None

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > MAX_BODY:
            return web.Response(status=413, body=b'{"error": "request body too large"}',
                                content_type=_JSON)
        body = await request.content.read()  # bounded above (BaseRequest.read caps at 1 MiB)
        if len(body) > MAX_BODY:
            return web.Response(status=413, body=b'{"error": "request body too large"}',
                                content_type=_JSON)
        try:
            reply = await self.route(request.method, request.path, body)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            reply = _FAILED
        ctype = reply[2].decode() if len(reply) == 3 else _JSON  # type: ignore[misc]
        return web.Response(status=reply[0], body=reply[1], headers={"Content-Type": ctype})

    async def start(self, host: str, port: int) -> int:
        """Bind and listen; returns the port (``port=0`` picks a free one)."""
        self._handler = web.Server(self._handle, access_log=None)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._handler, host, port, reuse_address=True)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self, timeout: float = 30.0) -> None:
        """Stop listening, let requests being answered finish, close every connection."""
        if self._server is not None:
            self._server.close()
        if self._handler is not None:
            self._handler.pre_shutdown()  # idle keep-alive connections close now
            with contextlib.suppress(Exception):
                await self._handler.shutdown(timeout)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
