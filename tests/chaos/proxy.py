"""A small fault-injecting HTTP proxy for the S3 server, on 127.0.0.1 (aiohttp).

Forwards every request as is (Host header included, so SigV4 signatures still match) and,
while faults are on, by probability:

- delays it (up to ``max_delay`` seconds, before forwarding);
- answers ``503 SlowDown`` without forwarding (throttling);
- answers ``500 InternalError`` *after* forwarding: the request took effect but the client
  sees a failure, the ambiguous case put-if-absent retries must get right.

Control: ``GET /__chaos__?p_delay=..&p_503=..&p_500=..&max_delay=..`` sets the
probabilities (``/__chaos__?off=1`` turns them off); ``/__chaos__/stats`` counts. Run as
``python -m chaos.proxy --upstream URL --port-file F``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")
INTERNAL = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
            b"<Message>injected by the chaos proxy</Message></Error>")
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-authorization", "proxy-authenticate", "content-length"}


class Proxy:
    def __init__(self, upstream: str, seed: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.cfg: dict[str, float] = {"p_delay": 0.0, "p_503": 0.0, "p_500": 0.0,
                                      "max_delay": 0.5}
        self.stats: dict[str, int] = {"requests": 0, "delayed": 0, "503": 0, "500": 0}
        self.rng = random.Random(seed)
        self.session: ClientSession | None = None

    async def control(self, request: web.Request) -> web.Response:
        if request.path.endswith("/stats"):
            return web.json_response(self.stats)
        q = request.query
        if "off" in q:
            self.cfg.update(p_delay=0.0, p_503=0.0, p_500=0.0)
        for k in self.cfg:
            if k in q:
                self.cfg[k] = float(q[k])
        return web.json_response(self.cfg)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/__chaos__"):
            return await self.control(request)
        self.stats["requests"] += 1
        cfg, rng = self.cfg, self.rng
        if rng.random() < cfg["p_delay"]:
            self.stats["delayed"] += 1
            await asyncio.sleep(rng.random() * cfg["max_delay"])
        if rng.random() < cfg["p_503"]:
            self.stats["503"] += 1
            return web.Response(status=503, body=SLOWDOWN, content_type="application/xml")
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        assert self.session is not None
        async with self.session.request(request.method, self.upstream + request.path_qs,
                                        headers=headers, data=body,
                                        allow_redirects=False) as up:
            data = await up.read()
            if rng.random() < cfg["p_500"]:
                self.stats["500"] += 1  # the request took effect; the client is told no
                return web.Response(status=500, body=INTERNAL, content_type="application/xml")
            out = {k: v for k, v in up.headers.items() if k.lower() not in HOP}
            if request.method == "HEAD":  # no body, but the object's size must get through
                out["Content-Length"] = up.headers.get("Content-Length", "0")
                resp = web.Response(status=up.status, headers=out)
                return resp
            return web.Response(status=up.status, body=data, headers=out)


async def serve(upstream: str, port_file: Path, seed: int) -> None:
    proxy = Proxy(upstream, seed)
    proxy.session = ClientSession(timeout=ClientTimeout(total=60), auto_decompress=False,
                                  skip_auto_headers=("User-Agent", "Content-Type"))
    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"port": port}))
    tmp.replace(port_file)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="chaos.proxy")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port-file", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    asyncio.run(serve(args.upstream, args.port_file, args.seed))
    return 0


def set_faults(endpoint: str, **cfg: Any) -> dict[str, Any]:
    """Change the proxy's fault probabilities (harness side)."""
    import urllib.request
    from urllib.parse import urlencode

    with urllib.request.urlopen(f"{endpoint}/__chaos__?{urlencode(cfg)}", timeout=5) as r:
        return json.loads(r.read())


if __name__ == "__main__":
    sys.exit(main())
