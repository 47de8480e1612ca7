"""The gateway process: Kafka's framing over asyncio, one connection at a time in order.

A connection reads ``int32 size`` + frame, answers, reads the next: requests of one
connection are handled in order, as a broker does (clients pipeline and match responses by
correlation id). What a broker would refuse ends the connection: a size below a header or
above ``max_request_bytes``, an API key it does not serve, a version it does not serve (but
ApiVersions, which is answered with UNSUPPORTED_VERSION and the versions it does serve, so
a client can retry with one), a body that does not parse. A handler that fails answers
nothing and closes the connection after logging it; the process and every other connection
carry on. Nothing a client sends can crash or wedge the gateway.

Authentication: with a token (``--token-file``), a client must complete SASL/PLAIN
(SaslHandshake + SaslAuthenticate, password = the token) before anything but ApiVersions;
TLS with ``--tls-cert``/``--tls-key``. With ``--sasl``, clients authenticate as users
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 against the credentials in the root) and every
request is authorized with the root's ACLs (``txnlog.coordinator.access``: the rules live
there; this module only routes requests through them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..access import kafka_authz
from ..access.kafka_acls import AclApis
from ..access.sasl import SaslExchange, SaslFailed, Subject
from ..security import Credentials, read_token_file, server_ssl_context
from . import admin, admin_groups, codec, consume, groups, produce, txn
from . import errors as E
from . import versions as V
from .backend import DEFAULT_VIRTUAL_BROKERS, Backend, GatewayConfig
from .flush_window import DEFAULT_FLUSH_INTERVAL_MS, DEFAULT_FLUSH_MAX_BYTES

log = logging.getLogger("txnlog.gateway")

Handler = Callable[[Backend, Any, int], Awaitable[dict[str, Any] | None]]

HANDLERS: dict[int, Handler] = {
    V.METADATA: consume.metadata,
    V.LIST_OFFSETS: consume.list_offsets,
    V.FETCH: consume.fetch,
    V.INIT_PRODUCER_ID: produce.init_producer_id,
    V.FIND_COORDINATOR: groups.find_coordinator,
    V.JOIN_GROUP: groups.join_group,
    V.SYNC_GROUP: groups.sync_group,
    V.HEARTBEAT: groups.heartbeat,
    V.LEAVE_GROUP: groups.leave_group,
    V.OFFSET_COMMIT: groups.offset_commit,
    V.OFFSET_FETCH: groups.offset_fetch,
    V.ADD_PARTITIONS_TO_TXN: txn.add_partitions_to_txn,
    V.ADD_OFFSETS_TO_TXN: txn.add_offsets_to_txn,
    V.TXN_OFFSET_COMMIT: txn.txn_offset_commit,
    V.END_TXN: txn.end_txn,
    V.CREATE_TOPICS: admin.create_topics,
    V.DELETE_TOPICS: admin.delete_topics,
    V.DELETE_RECORDS: admin.delete_records,
    V.CREATE_PARTITIONS: admin.create_partitions,
    V.DESCRIBE_CONFIGS: admin.describe_configs,
    V.ALTER_CONFIGS: admin.alter_configs,
    V.INCREMENTAL_ALTER_CONFIGS: admin.incremental_alter_configs,
    V.LIST_GROUPS: admin_groups.list_groups,
    V.DESCRIBE_GROUPS: admin_groups.describe_groups,
    V.DELETE_GROUPS: admin_groups.delete_groups,
    V.OFFSET_DELETE: admin_groups.offset_delete,
    V.DESCRIBE_PRODUCERS: admin_groups.describe_producers,
    V.DESCRIBE_TRANSACTIONS: admin_groups.describe_transactions,
    V.LIST_TRANSACTIONS: admin_groups.list_transactions,
    V.DESCRIBE_CLUSTER: admin.describe_cluster,
}


ACL_APIS = {V.CREATE_ACLS: "create_acls", V.DESCRIBE_ACLS: "describe_acls",
            V.DELETE_ACLS: "delete_acls", V.DESCRIBE_USER_SCRAM_CREDENTIALS: "describe_scram",
            V.ALTER_USER_SCRAM_CREDENTIALS: "alter_scram"}


def api_versions_body(error_code: int = 0) -> dict[str, Any]:
    return {"error_code": error_code, "throttle_time": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(V.SUPPORTED.items())]}


# Produce requests of one connection handled at once (librdkafka keeps at most 5 in flight)
MAX_PIPELINED = 16
PRODUCE_KEY = V.PRODUCE.to_bytes(2, "big")
SEND_DRAIN_S = 30.0  # answers still owed when the client stops sending: sent within this


class Connection:
    """One client connection: its authentication state and its request loop."""

    def __init__(self, gateway: Gateway, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, broker: int = 0) -> None:
        self.gateway = gateway
        self.broker = broker  # which of the gateway's brokers (ports) the client reached
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        config = gateway.backend.config
        self.authenticated = config.sasl_token is None and not config.sasl
        self.host = self.peer[0] if isinstance(self.peer, tuple) and self.peer else ""
        # without --sasl nothing is authorized: whoever may connect acts as a super user
        self.subject = Subject("User:ANONYMOUS", self.host, super_user=not config.sasl)
        self.exchange: SaslExchange | None = None
        self.close_after_answer = False  # a failed SASL authentication, as Kafka closes
        self.producer: produce.GatewayProducer | None = None  # for producers without ids
        # Produce requests reach the flush window in the order they came (produce.py)
        self.produce_order = asyncio.Lock()

    async def serve(self) -> None:
        """Read requests and answer them in order. Produce requests are pipelined: the
        next one is read and handled while earlier ones wait for their flush window (a
        client such as librdkafka keeps up to five in flight per connection, each one
        partition's batch, and one window per request would hold it to five batches per
        window); responses still go out in request order, as Kafka requires. Any other
        request waits for every earlier one, as a broker handles a connection's requests
        one at a time."""
        answers: asyncio.Queue[asyncio.Task[bytes | bool | None] | None] = asyncio.Queue(
            MAX_PIPELINED)
        sender = asyncio.get_running_loop().create_task(self._send(answers))
        outstanding: list[asyncio.Task[bytes | bool | None]] = []
        try:
            while not sender.done():
                head = await self.reader.readexactly(4)
                size = int.from_bytes(head, "big", signed=True)
                if size < 8 or size > self.gateway.backend.config.max_request_bytes:
                    log.info("%s: request size %d refused; closing", self.peer, size)
                    return
                frame = await self.reader.readexactly(size)
                produce_request = frame[:2] == PRODUCE_KEY and self.authenticated
                if not produce_request and outstanding:
                    await asyncio.wait(outstanding)  # a broker's order for everything else
                outstanding = [t for t in outstanding if not t.done()]
                task = asyncio.get_running_loop().create_task(self.handle(frame))
                outstanding.append(task)
                await answers.put(task)
                if not produce_request:
                    await asyncio.wait([task])
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, TimeoutError):
            pass
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                answers.put_nowait(None)
            if not sender.done():
                await asyncio.wait([sender], timeout=SEND_DRAIN_S)
            sender.cancel()
            for task in outstanding:
                task.cancel()
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _send(self, answers: asyncio.Queue[asyncio.Task[bytes | bool | None] | None]
                    ) -> None:
        """Write each request's answer in request order; closes on a False answer."""
        try:
            while (task := await answers.get()) is not None:
                answer = await task
                if answer is None:
                    continue
                if answer is False:
                    break
                self.writer.write(answer)
                await self.writer.drain()
                if self.close_after_answer:
                    break
        except (ConnectionError, ssl.SSLError, TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self.writer.close()  # ends the reading side too

    async def handle(self, frame: bytes) -> bytes | bool | None:
        """The response frame, None (no response: acks=0), or False (close)."""
        try:
            api_key, version, correlation_id = codec.peek_header(frame)
        except codec.FrameError:
            return False
        if api_key == V.API_VERSIONS and not V.supports(api_key, version):
            # Kafka answers with v0 and its own versions, so the client can pick one
            cls = codec.response_class(V.API_VERSIONS, 0)
            return codec.encode_response(cls, correlation_id, codec.build(
                cls, api_versions_body(E.UNSUPPORTED_VERSION)))
        if not V.supports(api_key, version):
            log.info("%s: api key %d version %d not served; closing", self.peer, api_key,
                     version)
            return False
        req_cls = codec.request_class(api_key, version)
        if req_cls is None:
            return False
        try:
            header, body = codec.parse_request(frame, req_cls)
        except codec.FrameError as exc:
            log.info("%s: %s; closing", self.peer, exc)
            return False
        host = self.peer[0] if isinstance(self.peer, tuple) and self.peer else ""
        codec.CLIENT.set((getattr(header, "client_id", None) or "", f"/{host}"))
        codec.BROKER.set(self.broker)
        resp_cls = codec.response_class(api_key, version)
        try:
            result = await self.dispatch(api_key, version, body)
        except _Close as exc:
            log.info("%s: %s; closing", self.peer, exc)
            return False
        except Exception:
            log.exception("%s: api key %d v%d failed; closing", self.peer, api_key, version)
            return False
        if result is None:
            return None
        try:
            return codec.encode_response(resp_cls, correlation_id, codec.build(resp_cls, result))
        except Exception:
            log.exception("%s: api key %d v%d: response not encodable; closing", self.peer,
                          api_key, version)
            return False

    async def dispatch(self, api_key: int, version: int, body: Any) -> dict[str, Any] | None:
        if api_key == V.API_VERSIONS:
            return api_versions_body()
        if api_key == V.SASL_HANDSHAKE:
            return self.sasl_handshake(body)
        if api_key == V.SASL_AUTHENTICATE:
            return await self.sasl_authenticate(body)
        if not self.authenticated:
            raise _Close(f"api key {api_key} before SASL authentication")
        backend = self.gateway.backend
        if api_key in ACL_APIS:
            az = await self._authorizer() if backend.access is not None else None
            apis = AclApis(backend.access, az, self.subject)
            return await backend.run(getattr(apis, ACL_APIS[api_key]), body)
        if api_key == V.PRODUCE:
            def call(b: Any) -> Awaitable[dict[str, Any] | None]:
                return produce.produce(backend, b, version, self)
        else:
            def call(b: Any) -> Awaitable[dict[str, Any] | None]:
                return HANDLERS[api_key](backend, b, version)
        if self.subject.super_user:
            return await call(body)
        resp_cls = codec.response_class(api_key, version)
        guard = kafka_authz.Guard(self.subject, await self._authorizer(), call,
                                  lambda path, code: codec.blank(resp_cls, code, path))
        return await kafka_authz.guard(api_key, version, body, guard)

    async def _authorizer(self) -> Any:
        cfg, store = self.gateway.backend.config, self.gateway.backend.access
        assert store is not None
        args = (cfg.super_users, cfg.allow_everyone_if_no_acl_found)
        return store.current_authorizer(*args) or await self.gateway.backend.run(
            store.authorizer, *args)

    # ---- SASL: PLAIN (users or the shared token), SCRAM-SHA-256/512 -------------------
    def sasl_handshake(self, body: Any) -> dict[str, Any]:
        cfg = self.gateway.backend.config
        mechanisms = SaslExchange.mechanisms(cfg.sasl)
        if body.mechanism not in mechanisms:
            return {"error_code": E.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
        store = self.gateway.backend.access

        def lookup(user: str, mechanism: str) -> Any:
            return None if store is None else store.state().users.get(user, {}).get(
                mechanism)
        token = cfg.sasl_token.encode() if cfg.sasl_token is not None else None
        self.exchange = SaslExchange(body.mechanism, lookup, token, self.host,
                                     cfg.super_users, users_enabled=cfg.sasl)
        return {"error_code": 0, "mechanisms": mechanisms}

    async def sasl_authenticate(self, body: Any) -> dict[str, Any]:
        exchange = self.exchange
        if exchange is None:
            return {"error_code": E.ILLEGAL_SASL_STATE, "auth_bytes": b"",
                    "error_message": "SaslHandshake first", "session_lifetime": 0}
        try:
            # PLAIN derives a key (PBKDF2) and a lookup may list storage: off the loop
            answer = await self.gateway.backend.run(exchange.step, bytes(body.auth_bytes))
        except SaslFailed as exc:
            self.exchange, self.close_after_answer = None, True
            return {"error_code": E.SASL_AUTHENTICATION_FAILED, "auth_bytes": b"",
                    "error_message": str(exc), "session_lifetime": 0}
        if exchange.subject is not None:
            if self.authenticated and self.gateway.backend.config.sasl and \
                    exchange.subject.principal != self.subject.principal:
                raise _Close("re-authentication as another principal")  # as KIP-368
            self.subject, self.authenticated, self.exchange = exchange.subject, True, None
        return {"error_code": 0, "auth_bytes": answer, "error_message": None,
                "session_lifetime": 0}


class _Close(Exception):
    """End this connection (a protocol violation), without a response."""


class Gateway:
    """The listening side: accepts connections and runs each one's loop."""

    def __init__(self, config: GatewayConfig) -> None:
        self.backend = Backend(config)
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, ports: list[int],
                    ssl_context: ssl.SSLContext | None = None) -> tuple[str, list[int]]:
        """Listen as one broker per port (0: any free port); the bound host and ports."""
        bound = []
        for k, port in enumerate(ports):
            server = await asyncio.start_server(functools.partial(self._accept, k), host,
                                                port, ssl=ssl_context, limit=1 << 16)
            self._servers.append(server)
            sock = server.sockets[0].getsockname()
            bound.append(int(sock[1]))
        return str(self._servers[0].sockets[0].getsockname()[0]), bound

    async def _accept(self, broker: int, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await Connection(self, reader, writer, broker).serve()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection failed")
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        await self.backend.flush_window.stop()
        self.backend.close()


# ------------------------------------------------------------------------------ CLI
def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return low == "true"


def _virtual_brokers(text: str) -> int:
    n = _positive_int(text)
    if n > 64:
        raise argparse.ArgumentTypeError(f"expected 1-64 virtual brokers, got {text!r}")
    return n


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, help="storage root URL")
    parser.add_argument("--listen", type=_host_port, default=("127.0.0.1", 9092),
                        metavar="HOST:PORT", help="where Kafka clients connect (port 0: any)")
    parser.add_argument("--advertised", type=_host_port, default=None, metavar="HOST:PORT",
                        help="the address Metadata gives clients (default: --listen)")
    parser.add_argument("--node-id", type=int, default=0,
                        help="the broker id this gateway answers as (0-999)")
    parser.add_argument("--virtual-brokers", type=_virtual_brokers,
                        default=DEFAULT_VIRTUAL_BROKERS, metavar="N",
                        help="listen as N brokers, one port each (the --listen port and "
                             "the N-1 after it; with --advertised, its port and the ones "
                             "after it), partition leadership spread over them: a Kafka "
                             "client keeps <= 5 requests in flight per broker, so more "
                             "brokers let one flush window take batches of more partitions "
                             f"(default {DEFAULT_VIRTUAL_BROKERS}; broker ids node-id, "
                             "node-id + 1000, ...)")
    parser.add_argument("--coordinator", default=None,
                        help="coordinator endpoint (default: the root's _coordinator.json)")
    parser.add_argument("--storage-option", action="append", default=[], metavar="K=V")
    parser.add_argument("--token-file", default=None,
                        help="clients must authenticate with SASL/PLAIN, password = this "
                             "token; the gateway also uses it with the coordinator")
    parser.add_argument("--sasl", action="store_true",
                        help="clients authenticate as users (SASL PLAIN, SCRAM-SHA-256, "
                             "SCRAM-SHA-512; credentials in the root, see `txnlog "
                             "scram-credentials`) and every request is authorized with "
                             "the root's ACLs (`txnlog acls`)")
    parser.add_argument("--super-users", default="", metavar="User:a;User:b",
                        help="Kafka's super.users: principals allowed everything "
                             "(the --token-file token's holder is one too)")
    parser.add_argument("--allow-everyone-if-no-acl-found", type=_bool, default=False,
                        metavar="true|false",
                        help="Kafka's allow.everyone.if.no.acl.found: a resource no ACL "
                             "names is open to every principal (default: false)")
    parser.add_argument("--tls-cert", default=None)
    parser.add_argument("--tls-key", default=None)
    parser.add_argument("--coordinator-ca", default=None,
                        help="CA of the coordinator's TLS certificate")
    parser.add_argument("--flush-interval-ms", type=int, default=DEFAULT_FLUSH_INTERVAL_MS,
                        help="Produce requests of every connection arriving within this "
                             "window are written as one object with one reserve and one "
                             "confirm (default %(default)s, as WarpStream's agents; 0: "
                             "flush as soon as the previous window is reserved)")
    parser.add_argument("--flush-max-bytes", type=int, default=DEFAULT_FLUSH_MAX_BYTES,
                        help="flush a window early once this many bytes wait "
                             "(default %(default)s)")
    parser.add_argument("--auto-create-topics-enable", type=_bool, default=True,
                        metavar="true|false", dest="auto_create_topics",
                        help="Kafka's auto.create.topics.enable: a Metadata request that "
                             "allows it, or a Produce, naming an unknown topic creates it "
                             "(default: true; the coordinator's own setting must allow it "
                             "too)")
    parser.add_argument("--no-auto-create-topics", action="store_false",
                        dest="auto_create_topics",
                        help="the same as --auto-create-topics-enable false")
    parser.add_argument("--num-partitions", type=_positive_int, default=None,
                        help="Kafka's num.partitions: partitions of an auto-created topic "
                             "(default: the coordinator's --num-partitions, 1 by default)")
    parser.add_argument("--port-file", default=None,
                        help="write the bound port here once listening (tests)")
    parser.add_argument("--log-level", default="INFO")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("numba").setLevel(logging.WARNING)
    import faulthandler
    faulthandler.enable()  # a crash in native code (codecs, kernels) leaves its traceback
    options = {}
    for kv in args.storage_option:
        k, sep, v = kv.partition("=")
        if not sep:
            print(f"--storage-option {kv!r}: expected K=V", file=sys.stderr)
            return 2
        options[k] = v
    token = read_token_file(args.token_file).decode() if args.token_file else None
    if bool(args.tls_cert) != bool(args.tls_key):
        print("--tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    ctx = server_ssl_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    if args.flush_interval_ms < 0 or args.flush_max_bytes < 1:
        print("--flush-interval-ms must be >= 0 and --flush-max-bytes >= 1", file=sys.stderr)
        return 2
    host, port = args.listen
    if not 0 <= args.node_id <= 999:
        print(f"--node-id must be 0-999, got {args.node_id}", file=sys.stderr)
        return 2
    config = GatewayConfig(root=args.root, node_id=args.node_id,
                           storage_options=options or None, coordinator=args.coordinator,
                           credentials=Credentials.resolve(token, args.coordinator_ca),
                           sasl_token=token, flush_interval_ms=args.flush_interval_ms,
                           flush_max_bytes=args.flush_max_bytes,
                           auto_create_topics=args.auto_create_topics,
                           num_partitions=args.num_partitions, sasl=args.sasl,
                           super_users=frozenset(p.strip() for p in
                                                 args.super_users.split(";") if p.strip()),
                           allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found)

    async def main() -> None:
        from txnlog.log_format.arrow.warmup import warm_up

        # compile the codec's kernels before the first client waits on them (numba's:
        # a long-running process gains nothing from the ahead-of-time module, see warmup)
        await asyncio.get_running_loop().run_in_executor(None, lambda: warm_up(build=False))
        gateway = Gateway(config)
        n = args.virtual_brokers
        try:  # port 0: any free ones; else the given port and the ones after it
            bound_host, bound = await gateway.start(
                host, [port + k if port else 0 for k in range(n)], ctx)
        except OSError as exc:
            log.error("cannot listen on %s:%d%s: %s", host, port,
                      f"-{port + n - 1} (--virtual-brokers {n})" if port and n > 1 else "",
                      exc)
            raise SystemExit(1) from None
        bound_port = bound[0]
        adv = args.advertised or (host if host not in ("0.0.0.0", "") else "127.0.0.1",
                                  bound_port)
        config.advertised_host, config.advertised_port = adv[0], adv[1] or bound_port
        config.more_ports = tuple(
            config.advertised_port + k if args.advertised and adv[1] else bound[k]
            for k in range(1, n))
        log.info("gateway for %s listening on %s:%s (advertised %s:%d%s)", args.root,
                 bound_host, ",".join(map(str, bound)), config.advertised_host,
                 config.advertised_port, f" and {len(bound) - 1} more" if n > 1 else "")
        if args.port_file:
            with open(args.port_file + ".tmp", "w") as f:
                f.write(str(bound_port))
            import os
            os.replace(args.port_file + ".tmp", args.port_file)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await gateway.stop()

    asyncio.run(main())
    log.info("gateway stopped")
    return 0
