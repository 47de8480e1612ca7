"""Confluent Schema Registry's REST API over HTTP (aiohttp), routed to ``Registry``.

Paths are matched on their raw, still-encoded segments, so a subject holding ``/`` (sent
as ``%2F``) is one segment. Every operation runs in a worker thread (storage and the
coordinator are blocking I/O), one at a time per process; errors answer with Confluent's
``{"error_code", "message"}`` bodies; anything unexpected is logged and answered as 50001,
never a dropped connection.

Authentication (``--token-file``): HTTP Basic with the token as the password (what
``basic.auth.user.info`` of Confluent's clients sends, any user name), or
``Authorization: Bearer <token>``; compared in constant time, never logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from . import errors
from .records import SCHEMA_TYPES
from .registry import Registry

log = logging.getLogger("txnlog.schema_registry.http")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 16 << 20


def _flag(query: Any, name: str) -> bool:
    return str(query.get(name, "false")).lower() == "true"


def _int_id(segment: str) -> int:
    try:
        return int(segment)
    except ValueError:
        raise errors.schema_not_found(segment) from None


class RegistryHttp:
    def __init__(self, registry: Registry, token: bytes | None = None) -> None:
        self.registry = registry
        self.token = token
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ auth
    def _authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        if not header:
            return False
        scheme, _, rest = header.partition(" ")
        given = rest.strip()
        if scheme.lower() == "basic":
            try:
                given = base64.b64decode(given, validate=True).decode().partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                return False
        elif scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token)

    # --------------------------------------------------------------- dispatch
    def _locked(self, call: Callable[[], Any]) -> Any:
        """One operation at a time per process: each reads the state its catch-up built
        while no other thread applies records to it (processes are kept apart by the
        claims, not by this lock)."""
        with self.registry.store.lock:
            return call()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request.headers.get("Authorization")):
            log.warning("refused %s %s from %s: no valid token", request.method,
                        request.path, request.remote)
            e = errors.unauthorized()
            return web.Response(status=e.status, body=e.body(), content_type="application/json",
                                headers={"WWW-Authenticate": 'Basic realm="schema-registry"'})
        try:
            body: Any = None
            if request.method in ("POST", "PUT"):
                raw = await request.read()
                if raw:
                    try:
                        body = json.loads(raw)
                    except ValueError as exc:
                        raise errors.RegistryError(400, 50005, f"Unparseable JSON: {exc}") \
                            from None
            segments = [unquote(s) for s in request.raw_path.split("?", 1)[0].split("/") if s]
            call = self._route(request.method, segments, request.query, body)
            result = await asyncio.to_thread(self._locked, call)
        except errors.RegistryError as exc:
            return web.Response(status=exc.status, body=exc.body(), content_type=CONTENT_TYPE)
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.path)
            e = errors.store_error(f"{type(exc).__name__}: {exc}")
            return web.Response(status=e.status, body=e.body(), content_type=CONTENT_TYPE)
        if isinstance(result, RawText):
            return web.Response(status=200, body=result.text.encode(), content_type=CONTENT_TYPE)
        return web.Response(status=200, body=json.dumps(result).encode(),
                            content_type=CONTENT_TYPE)

    def _route(self, method: str, seg: list[str], q: Any,
               body: Any) -> Callable[[], Any]:
        r = self.registry
        n = len(seg)
        head = seg[0] if seg else ""
        if n == 0 and method == "GET":
            return dict
        if head == "schemas" and method == "GET":
            if seg[1:] == ["types"]:
                return lambda: list(SCHEMA_TYPES)
            if n >= 3 and seg[1] == "ids":
                sid = _int_id(seg[2])
                if n == 3:
                    return lambda: r.schema_by_id(sid, q.get("format"))
                if n == 4 and seg[3] == "schema":
                    return lambda: RawText(r.schema_by_id(sid, q.get("format"))["schema"])
                if n == 4 and seg[3] == "versions":
                    return lambda: r.id_versions(sid, _flag(q, "deleted"))
                if n == 4 and seg[3] == "subjects":
                    return lambda: r.id_subjects(sid, _flag(q, "deleted"))
        if head == "subjects":
            return self._subjects(method, seg, q, body)
        if head in ("config", "mode") and n <= 2:
            subject = seg[1] if n == 2 else None
            if head == "config":
                if method == "GET":
                    return lambda: r.get_config(subject, _flag(q, "defaultToGlobal"))
                if method == "PUT":
                    return lambda: r.set_config(subject, body)
                if method == "DELETE":
                    return lambda: r.delete_config(subject)
            else:
                if method == "GET":
                    return lambda: r.get_mode(subject, _flag(q, "defaultToGlobal"))
                if method == "PUT":
                    return lambda: r.set_mode(subject, body, _flag(q, "force"))
                if method == "DELETE" and subject is not None:
                    return lambda: r.delete_mode(subject)
        if head == "compatibility" and method == "POST" and n in (4, 5) \
                and seg[1] == "subjects" and seg[3] == "versions":
            subject, version = seg[2], (seg[4] if n == 5 else None)
            return lambda: r.test_compatibility(subject, version, body, _flag(q, "verbose"))
        if seg == ["contexts"] and method == "GET":
            return lambda: ["."]
        raise errors.RegistryError(404, 404, f"HTTP 404 Not Found: {method} /{'/'.join(seg)}")

    def _subjects(self, method: str, seg: list[str], q: Any,
                  body: Any) -> Callable[[], Any]:
        r = self.registry
        n = len(seg)
        deleted = _flag(q, "deleted")
        if n == 1 and method == "GET":
            return lambda: r.subjects(deleted, q.get("subjectPrefix", ""))
        if n >= 2:
            subject = seg[1]
            if n == 2 and method == "POST":
                return lambda: r.lookup(subject, body, deleted)
            if n == 2 and method == "DELETE":
                return lambda: r.delete_subject(subject, _flag(q, "permanent"))
            if n == 3 and seg[2] == "versions":
                if method == "GET":
                    return lambda: r.versions(subject, deleted)
                if method == "POST":
                    return lambda: r.register(subject, body)
            if n >= 4 and seg[2] == "versions":
                version = seg[3]
                if n == 4 and method == "GET":
                    return lambda: r.get_version(subject, version, deleted)
                if n == 4 and method == "DELETE":
                    return lambda: r.delete_version(subject, version, _flag(q, "permanent"))
                if n == 5 and seg[4] == "schema" and method == "GET":
                    return lambda: RawText(r.get_version(subject, version, deleted)["schema"])
                if n == 5 and seg[4] == "referencedby" and method == "GET":
                    return lambda: r.referenced_by(subject, version)
        raise errors.RegistryError(404, 404, f"HTTP 404 Not Found: {method} /{'/'.join(seg)}")

    # ------------------------------------------------------------------ serving
    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context,
                           reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        return int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class RawText:
    """A ``/schema`` answer: the schema's text itself, not wrapped in JSON."""

    def __init__(self, text: str) -> None:
        self.text = text
