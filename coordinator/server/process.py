"""``txnlog coordinator``: the coordinator process (CLI, logging, lifecycle, registration).

Start-up: bind (``/healthz`` answers 503 while loading), recover the log (snapshot + replay),
append the takeover record (coordinator epoch), roll Prepare* transactions forward, register
in ``<root>/_coordinator.json``, then ``/healthz`` answers 200. The HTTP/JSON API it serves
(``POST /v1/<operation>``, errors as Kafka error names) is ``api.py``; its Prometheus
metrics are ``metrics.py``; the transaction logic is ``TransactionCoordinator``.

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
import ssl
import sys
import threading
import time
from collections.abc import Callable

from txnlog.log_format import layout
from txnlog.log_format.storage import Storage

from ..client.coordinator_client import CoordinatorClient
from ..errors import CoordinatorError, NotCoordinatorError
from ..maintenance.merge_policy import MergeSettings
from ..maintenance.topic_admin import AutoCreate, set_auto_create
from ..security import TokenCheck, TokenFileError, client_ca, read_token_file, server_ssl_context
from ..state.txn_log import FencedError, Recovered, TxnLog, recover
from ..transaction.transaction_coordinator import ONE_SHOT_ID_RETENTION_MS, TransactionCoordinator
from .api import CoordinatorApi, ServingState
from .http_server import HttpServer
from .metrics import Metrics
from .request_limits import MAX_BODY_BYTES
from .standby import wait_for_takeover

log = logging.getLogger("txnlog.coordinator.server.process")
EXIT_FENCED = 3
EXIT_FATAL = 4
# A process that stops serving (fenced, a failed log write or background loop) is gone
# within this many seconds, whatever is still in flight.
FATAL_EXIT_BOUND_S = 5.0


class JsonFormatter(logging.Formatter):
    """One JSON object per line: easy to grep, easy to ship."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname,
               "logger": record.name, "pid": record.process, "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def _at_least_two(text: str) -> int:
    """argparse type: an int >= 2 (a clear usage error otherwise)."""
    value = _non_negative_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be >= 2, got {value}")
    return value


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1 (a clear usage error otherwise)."""
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _true_false(text: str) -> bool:
    """argparse type: Kafka's boolean config values, true or false."""
    if text.strip().lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.strip().lower() == "true"


def _positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (a clear usage error otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    """argparse type: an int >= 0 (a clear usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


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
    parser.add_argument("--one-shot-id-retention-ms", type=_non_negative_int,
                        default=ONE_SHOT_ID_RETENTION_MS,
                        help="how long a one-shot transactional id (a Spark batch write's "
                             "own) is kept after its transaction is decided, so a retried "
                             "commit/abort gets the same answer; then it is dropped "
                             "(default 600000: longer than the writer's retry window)")
    parser.add_argument("--reservation-timeout-ms", type=int, default=60_000,
                        help="an idempotent producer's reservation not confirmed after this "
                             "long is fenced with a 0-byte object")
    parser.add_argument("--log-linger-ms", type=_non_negative_int, default=5_000,
                        help="how long a Spark write's membership and reservations may wait "
                             "to ride in the append of its EndTxn before they are written on "
                             "their own (a coordinator lost meanwhile costs that write a "
                             "retry, never a record; default 5000)")
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
    parser.add_argument("--no-merge", action="store_true",
                        help="do not merge small objects into segments (retention and its "
                             "deletions still run)")
    parser.add_argument("--merge-min-objects", type=_at_least_two, default=32,
                        help="small objects below the LSO that make a run (default 32)")
    parser.add_argument("--merge-fanout", type=_at_least_two, default=8,
                        help="runs of one level that make a run of the next (default 8)")
    parser.add_argument("--merge-interval-s", type=float, default=1.0,
                        help="how often partitions are looked at for merging (default 1)")
    parser.add_argument("--merge-process", choices=("auto", "on", "off"), default="auto",
                        help="read and build merges in a worker process of their own: on "
                             "remote storage by default (auto), where the S3 client's CPU "
                             "would otherwise slow commits (coordinator/merge_worker.py)")
    parser.add_argument("--merge-worker-timeout-s", type=_positive_float, default=600.0,
                        help="a step of a merge (its build, its writes, a cleanup) the "
                             "worker process has not finished after this many seconds: the "
                             "worker is killed and the step retried (default 600)")
    parser.add_argument("--shared-orphan-age-s", type=_positive_float, default=960.0,
                        help="a shared object no confirm named, seen so for this long, is "
                             "deleted (a zombie's, a writer's killed between its put and its "
                             "confirm); keep it above the longest transaction timeout "
                             "(default 960)")
    parser.add_argument("--retention-check-interval-ms", type=_non_negative_int, default=300_000,
                        help="how often retention.ms/retention.bytes are applied (Kafka's "
                             "log.retention.check.interval.ms, default 300000)")
    parser.add_argument("--group-initial-rebalance-delay-ms", type=_non_negative_int,
                        default=3000,
                        help="Kafka's group.initial.rebalance.delay.ms: the first rebalance "
                             "of an empty consumer group waits this long for more members, "
                             "again after each one joins, up to the rebalance timeout "
                             "(default 3000, as Kafka; 0: at once)")
    parser.add_argument("--auto-create-topics-enable", type=_true_false, default=True,
                        metavar="true|false",
                        help="Kafka's auto.create.topics.enable for every gateway of the "
                             "root: a client naming an unknown topic creates it (default: "
                             "true; a gateway can also turn it off for itself)")
    parser.add_argument("--num-partitions", type=_positive_int, default=1,
                        help="Kafka's num.partitions: partitions of an auto-created topic, "
                             "unless its gateway says otherwise (default: 1)")
    parser.add_argument("--no-register", action="store_true",
                        help="do not write _coordinator.json")
    parser.add_argument("--advertised-url", default=None, metavar="URL",
                        help="the URL clients must use, registered in _coordinator.json "
                             "(e.g. https://coord.internal:9092 behind --host 0.0.0.0); "
                             "default: http(s)://<host>:<port>")
    parser.add_argument("--token-file", default=None,
                        help="file holding the shared bearer token every operation must "
                             "carry (chmod 600); clients send TXNLOG_COORDINATOR_TOKEN or "
                             "the coordinator.token option")
    parser.add_argument("--principals", action="store_true",
                        help="bearer tokens may also be principals' tokens (`txnlog "
                             "principal-tokens`), and their operations are authorized with "
                             "the root's ACLs; the --token-file token stays a super user's")
    parser.add_argument("--super-users", default="", metavar="User:a;User:b",
                        help="with --principals: principals allowed everything")
    parser.add_argument("--allow-everyone-if-no-acl-found", action="store_true",
                        help="with --principals: a resource no ACL names is open to all")
    parser.add_argument("--protect-metrics", action="store_true",
                        help="/metrics needs the token too (/healthz is always open)")
    parser.add_argument("--tls-cert", default=None, help="serve TLS with this certificate "
                        "(PEM, chain included)")
    parser.add_argument("--tls-key", default=None, help="the --tls-cert private key (PEM)")
    parser.add_argument("--tls-ca", default=None,
                        help="CA a standby verifies the serving coordinator with (default: "
                             "TXNLOG_COORDINATOR_CA, else --tls-cert)")
    parser.add_argument("--standby", action="store_true",
                        help="wait until the registered coordinator stops heartbeating, "
                             "then take the log over and serve")
    parser.add_argument("--standby-misses", type=int, default=3,
                        help="heartbeats (--heartbeat-ms) the serving coordinator may miss "
                             "before a standby takes over")
    parser.add_argument("--stop-timeout-s", type=float, default=20.0,
                        help="SIGTERM: finish in-flight work for at most this long, then exit "
                             "(non-zero when work was left)")
    parser.add_argument("--max-request-bytes", type=int, default=MAX_BODY_BYTES,
                        help="larger request bodies are refused with 413")
    parser.add_argument("--embedded", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default=os.environ.get("TXNLOG_LOG_LEVEL", "INFO"))


def run(args: argparse.Namespace) -> int:
    """Run the coordinator process until it is stopped or fenced; returns its exit status."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root_logger = logging.getLogger()
    root_logger.handlers[:] = [handler]
    root_logger.setLevel(args.log_level.upper())
    for noisy in ("botocore", "s3fs", "aiobotocore", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        server = CoordinatorServer(args)
    except (TokenFileError, OSError, ssl.SSLError) as exc:
        log.critical("cannot start: %s", exc)
        return EXIT_FATAL
    return asyncio.run(server.main())


_watchdog_armed = threading.Event()


def arm_exit_watchdog(after_s: float, status: Callable[[], int]) -> None:
    """End the process ``after_s`` from now whatever it is doing: a stop must never hang
    (a storage call stuck in a thread would otherwise keep the interpreter alive). The
    first arming counts."""
    if _watchdog_armed.is_set():
        return
    _watchdog_armed.set()

    def expire() -> None:
        time.sleep(after_s)
        code = status()
        log.critical("still running %.0f s after the stop began; exiting with %d", after_s,
                     code)
        logging.shutdown()
        os._exit(code)

    threading.Thread(target=expire, name="exit-watchdog", daemon=True).start()


def storage_options(pairs: list[str]) -> dict[str, str]:
    """``--storage-option K=V`` pairs -> Storage options (``storage.``-prefixed)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--storage-option needs K=V, got {pair!r}")
        out[key if key.startswith("storage.") else f"storage.{key}"] = value
    return out


class CoordinatorServer:
    """The coordinator process: one TransactionCoordinator behind the HTTP API, from start-up
    to exit.

    Owns what the transaction coordinator does not: recovery at start, the
    ``_coordinator.json`` registration and its refresh, the idle exit, signals, and the exit
    status (fenced: 3). Whether the API serves is ``self.state`` (``api.ServingState``).
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.storage = Storage.for_url(args.root, storage_options(args.storage_option))
        self.coordinator = TransactionCoordinator(
            self.storage, max_transaction_timeout_ms=args.max_transaction_timeout_ms,
            transactional_id_expiration_ms=args.transactional_id_expiration_ms,
            reservation_timeout_ms=args.reservation_timeout_ms, stable_keep=args.stable_keep,
            one_shot_id_retention_ms=args.one_shot_id_retention_ms,
            merge_settings=MergeSettings(min_objects=args.merge_min_objects,
                                         fanout=args.merge_fanout,
                                         interval_s=args.merge_interval_s,
                                         isolate={"auto": None, "on": True,
                                                  "off": False}[args.merge_process],
                                         worker_timeout_s=args.merge_worker_timeout_s,
                                         orphan_age_s=args.shared_orphan_age_s),
            merging=not args.no_merge,
            retention_check_interval_ms=args.retention_check_interval_ms)
        set_auto_create(self.coordinator, AutoCreate(args.auto_create_topics_enable,
                                                     args.num_partitions))
        # read by the group membership role when it is first used (group/group_membership)
        self.coordinator.group_initial_rebalance_delay_ms = \
            args.group_initial_rebalance_delay_ms
        self.metrics = Metrics(self.coordinator)
        self.coordinator.metrics = self.metrics
        self.state = ServingState()
        self.api = CoordinatorApi(self.coordinator, self.metrics, self.state)
        self.exit_code = 0
        self.stop_event = asyncio.Event()
        self.endpoint = ""
        self.tokens = TokenCheck(read_token_file(args.token_file) if args.token_file else None,
                                 args.protect_metrics)
        if bool(args.tls_cert) != bool(args.tls_key):
            raise SystemExit("--tls-cert and --tls-key go together")
        self.ssl_context = server_ssl_context(args.tls_cert, args.tls_key) \
            if args.tls_cert else None

    # ------------------------------------------------------------------ lifecycle
    async def main(self) -> int:
        """Serve until a stop is requested or the process is fenced; the exit status."""
        guard = None
        if getattr(self.args, "principals", False):
            from ..access.coordinator_authz import CoordinatorGuard
            from ..access.store import AccessStore
            guard = CoordinatorGuard(
                AccessStore(self.storage), self.tokens.token,
                frozenset(p.strip() for p in getattr(self.args, "super_users", "").split(";")
                          if p.strip()),
                getattr(self.args, "allow_everyone_if_no_acl_found", False))
        http = HttpServer(self.api.route, tokens=self.tokens,
                          max_body=self.args.max_request_bytes, ssl_context=self.ssl_context,
                          on_refused=self.metrics.refused.inc, guard=guard)
        port = await http.start(self.args.host, self.args.port)
        host = self.args.host if self.args.host not in ("0.0.0.0", "::") else "127.0.0.1"
        scheme = "https" if self.ssl_context else "http"
        self.endpoint = (self.args.advertised_url or f"{scheme}://{host}:{port}").rstrip("/")
        loop = self._loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():  # not when embedded
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        log.info("coordinator for %s listening on %s:%d as %s (token %s, TLS %s); loading",
                 self.storage.url, self.args.host, port, self.endpoint,
                 "required" if self.tokens.token else "off",
                 "on" if self.ssl_context else "off")
        if self.args.standby:
            self.state.standby = True
            take = await wait_for_takeover(self.storage, self.endpoint, self.args.heartbeat_ms,
                                           self.args.standby_misses, self._probe,
                                           self.stop_event)
            self.state.standby = False
            if not take:
                await http.close(5)
                return self.exit_code
        t0 = time.monotonic()
        try:
            recovered = await asyncio.to_thread(recover, self.storage)
            log.info("recovery read %s: snapshot %s, %d log objects, %d records in %.2f s",
                     self.storage.url, recovered.snapshot_offsets[-1:] or "none",
                     recovered.objects, len(recovered.records), recovered.seconds)
            await self.coordinator.start(self._make_log, recovered)
        except CoordinatorError as exc:
            log.critical("start-up failed: %s", exc)
            await http.close()
            return EXIT_FENCED if isinstance(exc, NotCoordinatorError) else EXIT_FATAL
        self.state.ready = True
        log.info("coordinator epoch %d serving %s at %s (log offset %d, %d transactional ids, "
                 "%.2f s after loading began)", self.coordinator.coordinator_epoch,
                 self.storage.url, self.endpoint, self.coordinator.log.next_offset,  # type: ignore[union-attr]
                 len(self.coordinator.txns), time.monotonic() - t0)
        for name, task in self.coordinator.background_tasks().items():
            if task is not None:
                task.add_done_callback(lambda t, n=name: self._background_ended(n, t))
        tasks = []
        if not self.args.no_register:
            await asyncio.to_thread(self._register)
            tasks.append(loop.create_task(self._register_loop()))
        if self.args.idle_exit_s > 0:
            tasks.append(loop.create_task(self._idle_loop()))
        await self.stop_event.wait()
        self.state.stopping = True
        if self.state.fatal is None:
            log.info("stopping: finishing in-flight work (at most %.0f s)",
                     self.args.stop_timeout_s)
            try:
                await asyncio.wait_for(self.coordinator.stop(), self.args.stop_timeout_s)
            except TimeoutError:
                log.error("in-flight work did not finish within %.0f s; exiting without it "
                          "(the next coordinator recovers it from the log)",
                          self.args.stop_timeout_s)
                self.exit_code = EXIT_FATAL
            except Exception as exc:
                log.error("stopping failed: %r", exc)
                self.exit_code = EXIT_FATAL
            if not self.args.no_register:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.to_thread(self._unregister), 5)
        for t in tasks:
            t.cancel()
        await http.close(2 if self.state.fatal is not None else 5)
        log.info("stopped with status %d", self.exit_code)
        return self.exit_code

    def _probe(self, endpoint: str) -> bool:
        """A standby's /healthz check of the serving coordinator (blocking)."""
        ca = self.args.tls_ca or client_ca(None) or self.args.tls_cert
        return CoordinatorClient(endpoint, ca_file=ca).healthy(timeout=1.0)

    def _background_ended(self, name: str, task: asyncio.Task) -> None:
        """A loop the coordinator needs ended while serving: stop the process (the next
        coordinator recovers), never go on half alive."""
        if task.cancelled() or self.state.stopping or self.state.fatal is not None:
            return
        exc = task.exception() or RuntimeError(f"the {name} loop ended")
        log.critical("background task %s failed: %r", name, exc)
        self._on_fatal(exc)

    def _make_log(self, coordinator: TransactionCoordinator, recovered: Recovered) -> TxnLog:
        return TxnLog(self.storage, recovered.next_offset, snapshot_fn=coordinator.to_snapshot,
                      snapshot_offsets=recovered.snapshot_offsets,
                      protected_fn=lambda: list(coordinator.takeover_offsets),
                      on_fatal=self._on_fatal,
                      snapshot_every_records=self.args.snapshot_every_records,
                      snapshot_every_objects=self.args.snapshot_every_objects,
                      snapshot_every_s=self.args.snapshot_every_s,
                      lazy_linger_s=self.args.log_linger_ms / 1000,
                      replayed=(len(recovered.records), recovered.objects))

    def _on_fatal(self, exc: BaseException) -> None:
        if self.state.fatal is not None:
            return
        self.state.fatal = exc
        self.state.ready = False
        self.exit_code = EXIT_FENCED if isinstance(exc, NotCoordinatorError) else EXIT_FATAL
        log.critical("coordinator stops serving: %s", exc)
        self.stop_event.set()
        arm_exit_watchdog(FATAL_EXIT_BOUND_S, lambda: self.exit_code)

    def _on_signal(self, signum: int, _frame: object) -> None:
        """A plain (not asyncio) signal handler: it runs even while the event loop is
        blocked, so the exit watchdog is armed whatever the loop is doing; the graceful
        stop itself runs on the loop."""
        arm_exit_watchdog(self.args.stop_timeout_s + FATAL_EXIT_BOUND_S,
                          lambda: self.exit_code or EXIT_FATAL)
        why = f"signal {signal.Signals(signum).name}"
        self._loop.call_soon_threadsafe(self.request_stop, why)

    def request_stop(self, why: str) -> None:
        """Stop gracefully: in-flight completions and queued log writes finish first, for at
        most --stop-timeout-s; the process is gone a few seconds after that in any case."""
        log.info("stop requested (%s)", why)
        self.stop_event.set()
        arm_exit_watchdog(self.args.stop_timeout_s + FATAL_EXIT_BOUND_S,
                          lambda: self.exit_code or EXIT_FATAL)

    def _registration(self) -> bytes:
        return json.dumps({"endpoint": self.endpoint, "epoch": self.coordinator.coordinator_epoch,
                           "pid": os.getpid(), "heartbeat_ms": self.args.heartbeat_ms,
                           "written_ms": int(time.time() * 1000),
                           "embedded": bool(self.args.embedded),
                           "token": self.tokens.token is not None,
                           "tls": self.ssl_context is not None}).encode()

    def _register(self) -> None:
        """Write (refresh) the registration, unless a newer coordinator's is there: then
        this one was taken over (a standby decided it was gone) and must stop."""
        try:
            current = json.loads(self.storage.get(layout.COORDINATOR_FILE))
        except (FileNotFoundError, ValueError):
            current = {}
        theirs = current.get("epoch")
        if isinstance(theirs, int) and theirs > self.coordinator.coordinator_epoch:
            raise FencedError(
                f"fenced: coordinator epoch {theirs} at {current.get('endpoint')} took the "
                f"log over from this one (epoch {self.coordinator.coordinator_epoch})")
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
            if self.state.fatal is not None:
                return
            try:
                await asyncio.to_thread(self._register)
            except FencedError as exc:
                self._on_fatal(exc)
                return
            except Exception as exc:
                log.warning("refreshing %s failed: %s", layout.COORDINATOR_FILE, exc)

    async def _idle_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.args.idle_exit_s / 4))
            idle = time.monotonic() - self.state.last_request
            if idle > self.args.idle_exit_s and self.coordinator.open_transactions() == 0:
                self.request_stop(f"idle for {idle:.0f}s")
                return
