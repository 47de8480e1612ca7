"""``txnlog schema-registry``: the registry process (arguments, start-up, signals).

Stateless: it needs only the root (and the root's coordinator, for its producer), so any
number of them can serve one root behind one address. Token and TLS as the gateway's:
``--token-file`` (clients send the token as the HTTP Basic password or a Bearer token; the
registry also uses it with the coordinator) and ``--tls-cert``/``--tls-key``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from ..security import TOKEN_ENV, Credentials, read_token_file, server_ssl_context

log = logging.getLogger("txnlog.schema_registry")


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, help="storage root URL")
    parser.add_argument("--listen", type=_host_port, default=("127.0.0.1", 8081),
                        metavar="HOST:PORT", help="where clients connect (port 0: any)")
    parser.add_argument("--coordinator", default=None,
                        help="coordinator endpoint (default: the root's _coordinator.json)")
    parser.add_argument("--storage-option", action="append", default=[], metavar="K=V")
    parser.add_argument("--token-file", default=None,
                        help="clients must send this token (HTTP Basic password or Bearer); "
                             "also used with the coordinator")
    parser.add_argument("--tls-cert", default=None)
    parser.add_argument("--tls-key", default=None)
    parser.add_argument("--coordinator-ca", default=None,
                        help="CA of the coordinator's TLS certificate")
    parser.add_argument("--claim-wait-s", type=float, default=5.0,
                        help="how long to wait for another registry's claimed version to be "
                             "written before writing it from the claim")
    parser.add_argument("--port-file", default=None,
                        help="write the bound port here once listening (tests)")
    parser.add_argument("--log-level", default="INFO")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("numba").setLevel(logging.WARNING)
    options = {}
    for kv in args.storage_option:
        k, sep, v = kv.partition("=")
        if not sep:
            print(f"--storage-option {kv!r}: expected K=V", file=sys.stderr)
            return 2
        options[k] = v
    if bool(args.tls_cert) != bool(args.tls_key):
        print("--tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    token = read_token_file(args.token_file) if args.token_file else None
    if token is not None:
        # the producer's coordinator client reads its token from the environment
        os.environ[TOKEN_ENV] = token.decode()
    ctx = server_ssl_context(args.tls_cert, args.tls_key) if args.tls_cert else None

    from ..client.embedded import coordinator_for_root
    from .http_api import RegistryHttp
    from .registry import Registry
    from .store import SchemaStore

    credentials = Credentials.resolve(token.decode() if token else None, args.coordinator_ca)
    endpoint = args.coordinator or coordinator_for_root(
        args.root, options or None, start=False, ca_file=credentials.ca_file)
    store = SchemaStore(args.root, endpoint, storage_options=options or None,
                        credentials=credentials)
    http = RegistryHttp(Registry(store, args.claim_wait_s), token)
    host, port = args.listen

    async def main() -> None:
        bound = await http.start(host, port, ctx)
        log.info("schema registry for %s listening on %s:%d", args.root, host, bound)
        if args.port_file:
            with open(args.port_file + ".tmp", "w") as f:
                f.write(str(bound))
            os.replace(args.port_file + ".tmp", args.port_file)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await http.stop()

    try:
        asyncio.run(main())
    finally:
        store.close()
    log.info("schema registry stopped")
    return 0
