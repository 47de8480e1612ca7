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
import json
import logging
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..access.coordinator_authz import CoordinatorGuard
from ..errors import KafkaStorageError
from ..security import OPEN_PATHS, TokenCheck
from .request_limits import MAX_BODY_BYTES

log = logging.getLogger("txnlog.coordinator.http")

Reply = tuple[int, bytes] | tuple[int, bytes, bytes]
Route = Callable[[str, str, bytes], Awaitable[Reply]]

_JSON = "application/json"
_FAILED = (500, b'{"error": "UnknownServerError", "code": -1}')
_UNAUTHORIZED = (b'{"error":"AuthenticationFailed","code":58,'
                 b'"message":"a valid bearer token is required (Authorization: Bearer ...)"}')


class HttpServer:
    """Serves ``route(method, path, body) -> (status, body[, content type])``.

    Before a body is read: the bearer token is checked (``security.TokenCheck``; a refusal
    is 401, logged with the path and peer, never the token) and the body's size is bounded
    (``max_body`` bytes, else 413): an unauthenticated or huge request costs nothing.
    """

    def __init__(self, route: Route, *, tokens: TokenCheck | None = None,
                 max_body: int = MAX_BODY_BYTES, ssl_context: ssl.SSLContext | None = None,
                 on_refused: Callable[[], None] | None = None,
                 guard: CoordinatorGuard | None = None) -> None:
        self.route = route
        # --principals: tokens bound to principals, operations checked with ACLs
        self.guard = guard
        self.tokens = tokens or TokenCheck()
        self.max_body = max_body
        self.ssl_context = ssl_context
        self.on_refused = on_refused
        self._handler: web.Server | None = None
        self._server: asyncio.Server | None = None

    def _too_large(self, request: web.BaseRequest) -> web.Response:
        log.warning("refused %s %s from %s: body larger than %d bytes", request.method,
                    request.path, request.remote, self.max_body)
        return web.Response(status=413, content_type=_JSON, body=json.dumps({
            "error": "InvalidRequest", "code": 42,
            "message": f"request body larger than {self.max_body} bytes"}).encode())

    async def _read_body(self, request: web.BaseRequest) -> bytes | None:
        """The body, or None once it passes ``max_body`` (chunked bodies too)."""
        if request.content_length is not None and request.content_length > self.max_body:
            return None
        chunks, size = [], 0
        while True:
            chunk = await request.content.read(1 << 16)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if self.guard is not None:
            return await self._guarded(request)
        why = self.tokens.refusal(request.path, request.headers.get("Authorization"))
        if why is not None:
            return self._unauthorized(request, why)
        body = await self._read_body(request)
        if body is None:
            return self._too_large(request)
        return await self._answer(request, body)

    def _unauthorized(self, request: web.BaseRequest, why: str) -> web.Response:
        """401, logged and counted."""
        log.warning("refused %s %s from %s: %s", request.method, request.path,
                    request.remote, why)
        if self.on_refused is not None:
            self.on_refused()
        return web.Response(status=401, body=_UNAUTHORIZED, content_type=_JSON,
                            headers={"WWW-Authenticate": 'Bearer realm="txnlog"'})

    async def _guarded(self, request: web.BaseRequest) -> web.StreamResponse:
        """``_handle`` with principals: who asks (the shared token: a super user; a
        principal's token), then whether the operation is allowed (403 and an audit line
        if not), then the route."""
        assert self.guard is not None
        path = request.path
        if path in OPEN_PATHS or (path == "/metrics" and not self.tokens.protect_metrics):
            return await self._answer(request, await self._read_body(request) or b"")
        loop = asyncio.get_running_loop()
        try:
            subject = await loop.run_in_executor(None, self.guard.subject,
                                                 request.headers.get("Authorization"),
                                                 request.remote or "")
        except Exception:
            log.exception("principals not readable")
            subject = None
        if subject is None:
            return self._unauthorized(request, "no valid token")
        body = await self._read_body(request)
        if body is None:
            return self._too_large(request)
        if path.startswith("/v1/") and not subject.super_user:
            try:
                parsed = json.loads(body) if body else {}
            except ValueError:
                parsed = {}  # the route answers the bad body
            try:
                err = await loop.run_in_executor(None, self.guard.refusal, subject, path[4:],
                                                 parsed)
            except Exception as exc:  # storage trouble reading the ACLs: refuse, retriable
                log.warning("ACLs not readable for %s: %s", path, exc)
                err = KafkaStorageError(f"ACLs not readable: {exc}")
            if err is not None:
                return web.Response(status=err.http_status, content_type=_JSON,
                                    body=json.dumps(err.to_json()).encode())
        return await self._answer(request, body)

    async def _answer(self, request: web.BaseRequest, body: bytes) -> web.StreamResponse:
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
        self._server = await loop.create_server(self._handler, host, port, reuse_address=True,
                                                ssl=self.ssl_context)
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
