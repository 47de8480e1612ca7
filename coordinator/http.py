"""The coordinator's HTTP/1.1 server: a bare ``asyncio.Protocol``, no framework.

Every request the coordinator serves is tiny (a JSON object of a few hundred bytes) and
every answer has a Content-Length, so the framework's work per request (aiohttp: request
and response objects, header multidicts, middleware, access-log plumbing; ~150 us) was most
of the cost of an RPC. This parser does what those requests need in a few tens of
microseconds: request line, headers (Content-Length, Transfer-Encoding: chunked,
Connection), body, keep-alive; requests on one connection are answered in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("txnlog.coordinator.http")

Reply = tuple[int, bytes] | tuple[int, bytes, bytes]
Route = Callable[[str, str, bytes], Awaitable[Reply]]

MAX_BODY = 64 << 20
MAX_HEAD = 64 << 10
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
            413: b"Payload Too Large", 500: b"Internal Server Error",
            503: b"Service Unavailable"}
_JSON = b"application/json"


class _BadRequest(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False  # a request of this connection is being answered
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        """Start answering the next complete request in the buffer, if there is one."""
        if self.closing or self.transport is None:
            return
        try:
            request = self._parse()
        except _BadRequest as exc:
            self._write(exc.status, f'{{"error": "{exc}"}}'.encode(), _JSON, keep=False)
            return
        if request is None:
            return
        method, path, body, keep = request
        self.busy = True
        task = asyncio.get_running_loop().create_task(self._answer(method, path, body, keep))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    def _parse(self) -> tuple[str, str, bytes, bool] | None:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise _BadRequest(400, "request head too large")
            return None
        lines = bytes(buf[:end]).split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            raise _BadRequest(400, "malformed request line")
        keep = parts[2] == b"HTTP/1.1"
        length = 0
        chunked = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise _BadRequest(400, "malformed header")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise _BadRequest(400, "bad Content-Length") from None
                if not 0 <= length <= MAX_BODY:
                    raise _BadRequest(413, "request body too large")
            elif name == b"transfer-encoding":
                chunked = value.strip().lower() == b"chunked"
            elif name == b"connection":
                v = value.strip().lower()
                keep = v == b"keep-alive" or (keep and v != b"close")
        start = end + 4
        if chunked:
            decoded = self._dechunk(start)
            if decoded is None:
                return None
            body, consumed = decoded
        else:
            if len(buf) < start + length:
                return None
            body, consumed = bytes(buf[start:start + length]), start + length
        del buf[:consumed]
        path = parts[1].decode("latin-1").split("?", 1)[0]
        return parts[0].decode("latin-1"), path, body, keep

    def _dechunk(self, pos: int) -> tuple[bytes, int] | None:
        """(body, bytes consumed) of a complete chunked body at ``pos``, else None."""
        buf, out = self.buf, bytearray()
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            try:
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            except ValueError:
                raise _BadRequest(400, "bad chunk size") from None
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", eol)
                if buf[eol:eol + 4] == b"\r\n\r\n":
                    return bytes(out), eol + 4
                if trailer_end < 0:
                    return None
                return bytes(out), trailer_end + 4
            if len(out) + size > MAX_BODY:
                raise _BadRequest(413, "request body too large")
            if len(buf) < eol + 2 + size + 2:
                return None
            out += buf[eol + 2:eol + 2 + size]
            pos = eol + 2 + size + 2

    async def _answer(self, method: str, path: str, body: bytes, keep: bool) -> None:
        try:
            reply = await self.server.route(method, path, body)
        except Exception:
            log.exception("%s %s failed", method, path)
            reply = (500, b'{"error": "UnknownServerError", "code": -1}')
        status, data = reply[0], reply[1]
        ctype = reply[2] if len(reply) == 3 else _JSON  # type: ignore[misc]
        self._write(status, data, ctype, keep)
        self.busy = False
        if keep and self.buf:
            self._next()

    def _write(self, status: int, data: bytes, ctype: bytes, keep: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        keep = keep and not self.server.closing
        self.transport.write(b"".join((
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            % (status, _REASONS.get(status, b"Unknown"), ctype, len(data)),
            b"" if keep else b"Connection: close\r\n", b"\r\n", data)))
        if not keep:
            self.closing = True
            self.transport.close()


class HttpServer:
    """Serves ``route(method, path, body) -> (status, body[, content type])``."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closing = False
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Bind and listen; returns the port (``port=0`` picks a free one)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port,
                                                reuse_address=True)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self, timeout: float = 30.0) -> None:
        """Stop listening, let requests being answered finish, close every connection."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
