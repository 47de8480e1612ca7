"""``txnlog coordinator``: the HTTP/JSON server around the engine.

Start-up: bind (``/healthz`` answers 503 while loading), recover the log (snapshot + replay),
append the takeover record (coordinator epoch), roll Prepare* transactions forward, register
in ``<root>/_coordinator.json``, then ``/healthz`` answers 200. Every operation is
``POST /v1/<operation>`` with a JSON object; errors come back as
``{"error": <Kafka error name>, "code": <Kafka code>, "message": ...}`` (docs/coordinator.md).

A coordinator that loses the put-if-absent race on its own log is fenced: it answers
NotCoordinator from then on, logs why, and exits with status 3. SIGTERM/SIGINT stop it
gracefully: in-flight completions and queued log writes finish first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from txnlog.log_format import layout
from txnlog.log_format.storage import Storage

from .errors import (
    CoordinatorError,
    CoordinatorLoadInProgressError,
    InvalidRequestError,
    NotCoordinatorError,
    UnknownServerError,
)
from .http_server import HttpServer, Reply
from .transaction_coordinator import TransactionCoordinator
from .txn_log import Recovered, TxnLog, recover

log = logging.getLogger("txnlog.coordinator.server")
EXIT_FENCED = 3
EXIT_FATAL = 4


class JsonFormatter(logging.Formatter):
    """One JSON object per line: easy to grep, easy to ship."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname,
               "logger": record.name, "pid": record.process, "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, help="storage root URL (file:///..., s3://...)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    parser.add_argument("--port", type=int, default=0, help="port (0 = pick a free one)")
    parser.add_argument("--storage-option", action="append", default=[], metavar="K=V",
                        help="fsspec option for the root (repeatable), e.g. endpoint_url=...")
    parser.add_argument("--max-transaction-timeout-ms", type=int, default=900_000,
                        help="largest transaction.timeout.ms accepted (Kafka's "
                             "transaction.max.timeout.ms)")
    parser.add_argument("--transactional-id-expiration-ms", type=int,
                        default=7 * 24 * 3600 * 1000)
    parser.add_argument("--reservation-timeout-ms", type=int, default=60_000,
                        help="an idempotent producer's reservation not confirmed after this "
                             "long is fenced with a 0-byte object")
    parser.add_argument("--heartbeat-ms", type=int, default=5_000,
                        help="how often _coordinator.json is refreshed")
    parser.add_argument("--idle-exit-s", type=float, default=0.0,
                        help="exit after this many seconds without requests or open "
                             "transactions (0 = never; the embedded coordinator uses it)")
    parser.add_argument("--snapshot-every-records", type=int, default=20_000,
                        help="snapshot the coordinator's log after this many records ...")
    parser.add_argument("--snapshot-every-objects", type=int, default=50,
                        help="... or this many log objects (one GET each in a replay; at "
                             "least one per 8 KiB of the last snapshot) ...")
    parser.add_argument("--snapshot-every-s", type=float, default=5.0,
                        help="... or this many seconds with records, whichever comes first")
    parser.add_argument("--stable-keep", type=int, default=10)
    parser.add_argument("--no-register", action="store_true",
                        help="do not write _coordinator.json")
    parser.add_argument("--log-level", default=os.environ.get("TXNLOG_LOG_LEVEL", "INFO"))


def run(args: argparse.Namespace) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root_logger = logging.getLogger()
    root_logger.handlers[:] = [handler]
    root_logger.setLevel(args.log_level.upper())
    for noisy in ("botocore", "s3fs", "aiobotocore", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return asyncio.run(Coordinator(args).main())


def storage_options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--storage-option needs K=V, got {pair!r}")
        out[key if key.startswith("storage.") else f"storage.{key}"] = value
    return out


class Metrics:
    def __init__(self, engine: TransactionCoordinator) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.transactions = Counter("txnlog_coordinator_transactions",
                                    "transactions ended, by outcome", ["outcome"], registry=r)
        self.commit_latency = Histogram(
            "txnlog_coordinator_commit_latency_seconds", "EndTxn(commit) to reply",
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10), registry=r)
        self.reservations = Counter("txnlog_coordinator_reservations",
                                    "reserve calls that handed out offsets", registry=r)
        self.storage_errors = Counter("txnlog_coordinator_storage_errors",
                                      "storage calls that failed after retries", registry=r)
        self.requests = Counter("txnlog_coordinator_requests", "requests by operation and error",
                                ["op", "error"], registry=r)
        self.commit_round_trips = Histogram(
            "txnlog_coordinator_commit_round_trips",
            "sequential storage round trips an EndTxn reply waited for (verify, Prepare, "
            "markers+fences, Complete+stable)", buckets=(1, 2, 3, 4, 5, 6), registry=r)
        self.commit_storage_calls = Histogram(
            "txnlog_coordinator_commit_storage_calls",
            "storage calls on an EndTxn's critical path", buckets=(2, 4, 8, 16, 32, 64, 128),
            registry=r)
        self.objects_written = Counter(
            "txnlog_coordinator_objects_written",
            "objects written outside the coordinator's log, by kind", ["kind"], registry=r)
        log_records = Gauge("txnlog_coordinator_log_records_written",
                            "records in the __transaction_state objects written by this process",
                            registry=r)
        log_records.set_function(lambda: engine.log.records_written if engine.log else 0)
        open_txns = Gauge("txnlog_coordinator_open_transactions",
                          "transactions not Empty/Complete*", registry=r)
        open_txns.set_function(engine.open_transactions)
        log_objects = Gauge("txnlog_coordinator_log_objects_written",
                            "__transaction_state objects written by this process", registry=r)
        log_objects.set_function(lambda: engine.log.objects_written if engine.log else 0)
        self._ok: dict[str, Any] = {}

    def request_ok(self, op: str) -> None:
        """The success counter of ``op`` (labels() takes a lock and builds a key: cache it)."""
        child = self._ok.get(op)
        if child is None:
            child = self._ok[op] = self.requests.labels(op, "")
        child.inc()


class Coordinator:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.storage = Storage.for_url(args.root, storage_options(args.storage_option))
        self.engine = TransactionCoordinator(
            self.storage, max_transaction_timeout_ms=args.max_transaction_timeout_ms,
            transactional_id_expiration_ms=args.transactional_id_expiration_ms,
            reservation_timeout_ms=args.reservation_timeout_ms, stable_keep=args.stable_keep)
        self.metrics = Metrics(self.engine)
        self.engine.metrics = self.metrics
        self.ready = False
        self.stopping = False
        self.exit_code = 0
        self.fatal: BaseException | None = None
        self.stop_event = asyncio.Event()
        self.last_request = time.monotonic()
        self.endpoint = ""

    # ------------------------------------------------------------------ lifecycle
    async def main(self) -> int:
        http = HttpServer(self.route)
        port = await http.start(self.args.host, self.args.port)
        host = self.args.host if self.args.host not in ("0.0.0.0", "::") else "127.0.0.1"
        self.endpoint = f"http://{host}:{port}"
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, f"signal {sig.name}")
        log.info("coordinator for %s listening on %s; loading", self.storage.url, self.endpoint)
        t0 = time.monotonic()
        try:
            recovered = await asyncio.to_thread(recover, self.storage)
            log.info("recovery read %s: snapshot %s, %d log objects, %d records in %.2f s",
                     self.storage.url, recovered.snapshot_offsets[-1:] or "none",
                     recovered.objects, len(recovered.records), recovered.seconds)
            await self.engine.start(self._make_log, recovered)
        except CoordinatorError as exc:
            log.critical("start-up failed: %s", exc)
            await http.close()
            return EXIT_FENCED if isinstance(exc, NotCoordinatorError) else EXIT_FATAL
        self.ready = True
        log.info("coordinator epoch %d serving %s at %s (log offset %d, %d transactional ids, "
                 "%.2f s after loading began)", self.engine.coordinator_epoch, self.storage.url,
                 self.endpoint, self.engine.log.next_offset,  # type: ignore[union-attr]
                 len(self.engine.txns), time.monotonic() - t0)
        tasks = []
        if not self.args.no_register:
            await asyncio.to_thread(self._register)
            tasks.append(loop.create_task(self._register_loop()))
        if self.args.idle_exit_s > 0:
            tasks.append(loop.create_task(self._idle_loop()))
        await self.stop_event.wait()
        self.stopping = True
        if self.fatal is None:
            log.info("stopping: finishing in-flight work")
            with contextlib.suppress(Exception):
                await self.engine.stop()
            if not self.args.no_register:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self._unregister)
        for t in tasks:
            t.cancel()
        await http.close()
        log.info("stopped with status %d", self.exit_code)
        return self.exit_code

    def _make_log(self, engine: TransactionCoordinator, recovered: Recovered) -> TxnLog:
        return TxnLog(self.storage, recovered.next_offset, snapshot_fn=engine.to_snapshot,
                      snapshot_offsets=recovered.snapshot_offsets,
                      protected_fn=lambda: list(engine.takeover_offsets),
                      on_fatal=self._on_fatal,
                      snapshot_every_records=self.args.snapshot_every_records,
                      snapshot_every_objects=self.args.snapshot_every_objects,
                      snapshot_every_s=self.args.snapshot_every_s,
                      replayed=(len(recovered.records), recovered.objects))

    def _on_fatal(self, exc: BaseException) -> None:
        self.fatal = exc
        self.ready = False
        self.exit_code = EXIT_FENCED if isinstance(exc, NotCoordinatorError) else EXIT_FATAL
        log.critical("coordinator stops serving: %s", exc)
        self.stop_event.set()

    def request_stop(self, why: str) -> None:
        log.info("stop requested (%s)", why)
        self.stop_event.set()

    def _registration(self) -> bytes:
        return json.dumps({"endpoint": self.endpoint, "epoch": self.engine.coordinator_epoch,
                           "pid": os.getpid(), "heartbeat_ms": self.args.heartbeat_ms,
                           "written_ms": int(time.time() * 1000)}).encode()

    def _register(self) -> None:
        self.storage.put(layout.COORDINATOR_FILE, self._registration())

    def _unregister(self) -> None:
        """Remove _coordinator.json only if it still names us (a successor may have won)."""
        try:
            current = json.loads(self.storage.get(layout.COORDINATOR_FILE))
        except (FileNotFoundError, ValueError):
            return
        if current.get("endpoint") == self.endpoint and current.get("pid") == os.getpid():
            self.storage.delete(layout.COORDINATOR_FILE)

    async def _register_loop(self) -> None:
        while True:
            await asyncio.sleep(self.args.heartbeat_ms / 1000)
            if self.fatal is not None:
                return
            try:
                await asyncio.to_thread(self._register)
            except Exception as exc:
                log.warning("refreshing %s failed: %s", layout.COORDINATOR_FILE, exc)

    async def _idle_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.args.idle_exit_s / 4))
            idle = time.monotonic() - self.last_request
            if idle > self.args.idle_exit_s and self.engine.open_transactions() == 0:
                self.request_stop(f"idle for {idle:.0f}s")
                return

    # ------------------------------------------------------------------ handlers
    async def route(self, method: str, path: str, body: bytes) -> Reply:
        if path.startswith("/v1/"):
            if method != "POST":
                return 405, _json({"error": "method not allowed"})
            return await self.dispatch(path[4:], body)
        if path == "/healthz" and method == "GET":
            return self.healthz()
        if path == "/metrics" and method == "GET":
            return 200, generate_latest(self.metrics.registry), b"text/plain; version=0.0.4"
        return 404, _json({"error": f"no route {method} {path}"})

    def healthz(self) -> Reply:
        if self.ready and not self.stopping:
            return 200, _json({"status": "ok", "epoch": self.engine.coordinator_epoch,
                               "pid": os.getpid()})
        status = "fenced" if self.fatal else ("stopping" if self.stopping else "loading")
        return 503, _json({"status": status})

    async def dispatch(self, op: str, raw: bytes) -> Reply:
        self.last_request = time.monotonic()
        handler = OPERATIONS.get(op)
        try:
            if handler is None:
                raise InvalidRequestError(f"unknown operation {op!r}; known: {sorted(OPERATIONS)}")
            if self.fatal is not None or self.stopping:
                raise NotCoordinatorError(
                    f"this coordinator is not serving ({self.fatal or 'stopping'})")
            if not self.ready:
                raise CoordinatorLoadInProgressError("the coordinator is loading its log")
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise InvalidRequestError(f"request body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise InvalidRequestError("request body must be a JSON object")
            try:
                result = await handler(self.engine, body)
            except (KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, CoordinatorError):
                    raise
                raise InvalidRequestError(f"bad {op} request: {exc!r}") from None
            self.metrics.request_ok(op)
            return 200, _json(result)
        except CoordinatorError as exc:
            if self.fatal is not None and not isinstance(exc, NotCoordinatorError):
                exc = NotCoordinatorError(f"this coordinator stopped: {self.fatal}")
            self.metrics.requests.labels(op, exc.name).inc()
            return exc.http_status, _json(exc.to_json())
        except Exception as exc:
            log.exception("%s failed", op)
            err = UnknownServerError(f"{op}: {exc!r}")
            self.metrics.requests.labels(op, err.name).inc()
            return 500, _json(err.to_json())


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _parts(items: list[dict[str, Any]], *fields: str) -> list[dict[str, Any]]:
    out = []
    for item in items:
        out.append({"topic": str(item["topic"]), "partition": int(item["partition"]),
                    **{f: int(item[f]) for f in fields}})
    return out


Handler = Callable[[TransactionCoordinator, dict[str, Any]], Awaitable[Any]]


async def _init(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.init_producer_id(b.get("transactional_id"),
                                    int(b.get("transaction_timeout_ms", 60_000)))


async def _add_member(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.add_member(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]),
                              b["member_key"])


async def _reserve(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    res = await e.reserve(int(b["producer_id"]), int(b["epoch"]),
                          _parts(b["partitions"], "base_sequence", "count"))
    return {"partitions": res}


async def _confirm(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.confirm(int(b["producer_id"]), int(b["epoch"]),
                           _parts(b["partitions"], "base_offset"),
                           bool(b.get("wait_stable", False)))


async def _heartbeat(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.heartbeat(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]))


async def _add_offsets(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    offsets = [{"topic": str(o["topic"]), "partition": int(o["partition"]),
                "offset": int(o["offset"]), "metadata": str(o.get("metadata", ""))}
               for o in b["offsets"]]
    return await e.add_offsets(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]),
                               b["group_id"], offsets)


async def _committed(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return {"offsets": await e.committed_offsets(b["group_id"])}


async def _end_txn(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    members = b.get("members")
    batch = b.get("batch_id")
    written = b.get("written")
    return await e.end_txn(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]),
                           bool(b["commit"]), None if members is None else
                           [int(m) for m in members], None if batch is None else int(batch),
                           _parts(written, "base_offset") if written else None)


async def _begin_batch(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.begin_batch(b["transactional_id"], int(b["batch_id"]),
                               int(b.get("transaction_timeout_ms", 60_000)))


async def _create_topic(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.create_topic(b["name"], b["partitions"], b.get("config") or {},
                                bool(b.get("exist_ok", False)))


async def _describe_topic(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.describe_topic(b["name"])


async def _list_topics(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return {"topics": await e.list_topics()}


async def _describe_txn(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    await e.log.sync()  # type: ignore[union-attr]
    return e.describe_txn(b["transactional_id"])


async def _stable(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    if b.get("publish"):
        await e.request_stable()
    snap = e.stable_written
    return {"coordinator_epoch": e.coordinator_epoch, "seq": snap.seq if snap else None,
            "partitions": {k: {"hw": hw, "lso": lso} for k, (hw, lso) in e.hw_lso().items()}}


OPERATIONS: dict[str, Handler] = {
    "init_producer_id": _init, "add_member": _add_member, "reserve": _reserve,
    "confirm": _confirm, "heartbeat": _heartbeat, "add_offsets": _add_offsets,
    "committed_offsets": _committed, "end_txn": _end_txn, "begin_batch": _begin_batch,
    "create_topic": _create_topic, "describe_topic": _describe_topic,
    "list_topics": _list_topics, "describe_txn": _describe_txn, "stable": _stable,
}
