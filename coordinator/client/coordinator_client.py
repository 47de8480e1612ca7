"""``CoordinatorClient``: the synchronous HTTP client of the coordinator.

Spark tasks and the driver are synchronous, so this is too. It keeps no live connection in
the object (it pickles into tasks); connections come from a module-level keep-alive pool per
(process, endpoint), which Spark's reused Python workers share. Requests go through
``http.client`` on pooled keep-alive connections (less than half of urllib3's CPU per call,
which matters because writers share cores with the coordinator). Every
coordinator error arrives as the exception class of its Kafka name
(``errors.ProducerFencedError``, ...).

Retries are bounded (the project's one policy, ``log_format.retry``, with a deadline of
``retry_for`` seconds) and only where a repeat is safe: connection failures and the retriable
Kafka errors (CoordinatorLoadInProgress, ConcurrentTransactions, KafkaStorageError). Every
operation is idempotent on retry by design (sequence numbers for reserve, member keys for
add_member, epoch bookkeeping for end_txn).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.retry import RetriesExhausted, RetryPolicy, retry_call

from ..errors import (
    ConcurrentTransactionsError,
    CoordinatorError,
    CoordinatorLoadInProgressError,
    KafkaStorageError,
    NotCoordinatorError,
    UnknownServerError,
    error_from_json,
)
from ..security import CA_ENV, Credentials, client_ssl_context

RETRIABLE = (CoordinatorLoadInProgressError, ConcurrentTransactionsError, KafkaStorageError)
CONNECT_TIMEOUT = 5.0
# How long a call keeps retrying an unreachable coordinator (a restart, a failover to a
# standby) before it fails with CoordinatorUnavailableError.
DEFAULT_RETRY_S = 30.0
_HEADERS = {"Content-Type": "application/json"}


class _Conn:
    """One keep-alive HTTP/1.1 connection (``http.client``), kept in a per-process pool.

    ``http.client`` directly rather than urllib3 on top of it: a pooled connection per call
    costs ~60 us of a writer's CPU instead of ~150 us, and writers share the cores with the
    coordinator in the bench and on Spark executors. ``https`` endpoints verify the
    coordinator's certificate (``security.client_ssl_context``).
    """

    def __init__(self, scheme: str, host: str, port: int, ca_file: str | None) -> None:
        if scheme == "https":
            self.http: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=CONNECT_TIMEOUT, context=client_ssl_context(ca_file))
        else:
            self.http = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)
        self.http.connect()
        self.http.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method: str, path: str, body: bytes, timeout: float,
                headers: Mapping[str, str]) -> tuple[int, bytes, bool]:
        """(status, body, keep_alive) of one request."""
        self.http.sock.settimeout(timeout)
        self.http.request(method, path, body, dict(headers))
        response = self.http.getresponse()
        data = response.read()
        return response.status, data, not response.will_close

    def close(self) -> None:
        self.http.close()


_PoolKey = tuple[int, str, str | None]
_idle: dict[_PoolKey, list[_Conn]] = {}
_idle_lock = threading.Lock()


def _address(endpoint: str) -> tuple[str, str, int]:
    u = urlparse(endpoint)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"coordinator endpoint must be http(s)://host:port, got {endpoint!r}")
    return u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80)


def _take(endpoint: str, ca_file: str | None) -> tuple[_Conn, bool]:
    """An idle keep-alive connection of this process (reused=True) or a new one."""
    key = (os.getpid(), endpoint, ca_file)
    with _idle_lock:
        conns = _idle.get(key)
        if conns:
            return conns.pop(), True
    return _Conn(*_address(endpoint), ca_file), False


def _give(endpoint: str, ca_file: str | None, conn: _Conn) -> None:
    key = (os.getpid(), endpoint, ca_file)
    with _idle_lock:
        conns = _idle.setdefault(key, [])
        if len(conns) < 64:
            conns.append(conn)
            return
    conn.close()


def _http(endpoint: str, method: str, path: str, body: bytes, timeout: float,
          headers: Mapping[str, str] = _HEADERS, ca_file: str | None = None
          ) -> tuple[int, bytes]:
    """One request on a pooled connection; a reused one that turns out closed by the
    server (idle keep-alive) is retried once on a new connection (every call is safe to
    repeat). Raises OSError when the coordinator cannot be reached.

    Every stale pooled connection is dropped in turn until a new one is made: a killed
    coordinator leaves as many stale connections as the process had idle (a gateway's many
    threads: two in a row made this an AssertionError, answered UNKNOWN_SERVER_ERROR to
    Kafka clients, found by the chaos harness's gateway-coordinator-kill class)."""
    while True:
        try:
            conn, reused = _take(endpoint, ca_file)
        except ssl.SSLCertVerificationError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc
        try:
            status, data, keep = conn.request(method, path, body, timeout, headers)
        except ssl.SSLCertVerificationError:
            conn.close()
            raise
        except (OSError, ValueError, http.client.HTTPException) as exc:
            conn.close()
            if reused and not isinstance(exc, TimeoutError):
                continue
            raise OSError(str(exc) or type(exc).__name__) from exc
        if keep:
            _give(endpoint, ca_file, conn)
        else:
            conn.close()
        return status, data


class CoordinatorUnavailableError(NotCoordinatorError):
    """The coordinator did not answer (connection refused / timed out) after retries."""


def unreachable_hint(endpoint: str) -> str:
    """What to do about an unreachable coordinator, for the error a user reads."""
    host = urlparse(endpoint).hostname or ""
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    hint = ("Processes other than the driver (Spark tasks) never start a coordinator. "
            "Check that the coordinator runs and that this host can reach it; on a cluster, "
            "run `txnlog coordinator --root ROOT --host 0.0.0.0 --advertised-url URL "
            "--token-file FILE` on a host every executor can reach and pass "
            "option('coordinator', URL) (docs/deployment.md)")
    if loopback:
        hint = (f"{endpoint} is a loopback address: an embedded coordinator serves only the "
                f"host that started it ({socket.gethostname()} cannot use another host's). "
                + hint)
    return hint


class CoordinatorClient:
    """Talks to one coordinator endpoint (``http(s)://host:port``).

    ``credentials``: bearer token and CA file (default: from the environment, see
    ``security``). ``root``: when given, a connection failure re-reads the root's
    ``_coordinator.json`` and follows a new registration (a standby took over, a restart on
    another port) before retrying — read only: a client never starts a coordinator.
    """

    def __init__(self, endpoint: str, timeout: float = 60.0, retry_for: float | None = None, *,
                 credentials: Credentials | None = None, root: str | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 ca_file: str | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.retry_for = DEFAULT_RETRY_S if retry_for is None else retry_for
        self.credentials = credentials or Credentials.resolve(None, ca_file)
        self.root = root
        self.storage_options = dict(storage_options or {})
        self._headers = dict(_HEADERS)
        if self.credentials.token:
            self._headers["Authorization"] = f"Bearer {self.credentials.token}"

    def __repr__(self) -> str:  # never the token
        return f"CoordinatorClient({self.endpoint!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_headers"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._headers = dict(_HEADERS)
        if self.credentials.token:
            self._headers["Authorization"] = f"Bearer {self.credentials.token}"

    # ------------------------------------------------------------------ transport
    def call(self, op: str, body: Mapping[str, Any]) -> Any:
        """POST /v1/<op>; returns the JSON answer or raises the named Kafka error.

        Connection failures and the RETRIABLE Kafka errors are retried with the project's
        backoff (``log_format.retry``) for up to ``retry_for`` seconds (a connection failure
        first re-resolves the endpoint from the root, when the client has one); then an
        unreachable coordinator is CoordinatorUnavailableError naming the endpoint and the
        fix, and a retriable error is raised as it came. Every other error is raised at once.
        """
        payload = json.dumps(body, separators=(",", ":")).encode()
        path = f"/v1/{op}"

        def attempt() -> Any:
            try:
                status, data = _http(self.endpoint, "POST", path, payload, self.timeout,
                                     self._headers, self.credentials.ca_file)
            except ssl.SSLCertVerificationError as exc:  # retrying cannot help
                raise CoordinatorUnavailableError(
                    f"coordinator {self.endpoint}: its TLS certificate was not verified "
                    f"({exc.verify_message}); give the CA that signed it as the "
                    f"coordinator.tls.ca option or {CA_ENV}") from exc
            except OSError:
                self.reresolve()
                raise
            try:
                answer = json.loads(data) if data else {}
            except ValueError:
                raise UnknownServerError(
                    f"{op}: HTTP {status} with a non-JSON body from {self.endpoint}") from None
            if status == 200:
                return answer
            raise error_from_json(answer if isinstance(answer, dict) else {})

        try:
            return retry_call(attempt, self._retry_policy(), (OSError, *RETRIABLE))
        except RetriesExhausted as gave_up:
            last = gave_up.last
            if isinstance(last, OSError):
                raise CoordinatorUnavailableError(
                    f"coordinator {self.endpoint} unreachable for {op} (tried for "
                    f"{self.retry_for:.0f} s): {last}. {unreachable_hint(self.endpoint)}"
                ) from last
            raise last from None

    def reresolve(self) -> bool:
        """Follow the root's registration if it names another endpoint now (True then).
        Never starts anything; any failure to read it leaves the endpoint as it was."""
        if self.root is None:
            return False
        try:
            from txnlog.log_format import layout
            from txnlog.log_format.storage import Storage

            storage = Storage.for_url(self.root, self.storage_options)
            info = json.loads(storage.get(layout.COORDINATOR_FILE))
        except Exception:
            return False
        endpoint = info.get("endpoint") if isinstance(info, dict) else None
        if isinstance(endpoint, str) and endpoint.rstrip("/") != self.endpoint:
            self.endpoint = endpoint.rstrip("/")
            return True
        return False

    def _retry_policy(self) -> RetryPolicy:
        """Until ``retry_for`` seconds have passed, waiting 50 ms doubling to 1 s (jittered:
        Spark's tasks must not all come back at once to a coordinator that restarts)."""
        return RetryPolicy(max_attempts=None, base_delay_s=0.05, max_delay_s=1.0,
                           deadline_s=self.retry_for)

    def healthy(self, timeout: float = 2.0) -> bool:
        """True when /healthz answers 200 (recovered and serving)."""
        try:
            status, _ = _http(self.endpoint, "GET", "/healthz", b"", timeout, _HEADERS,
                              self.credentials.ca_file)
        except (OSError, ValueError):
            return False
        return status == 200

    # ----------------------------------------------------------------- producers
    def init_producer_id(self, transactional_id: str | None = None,
                         transaction_timeout_ms: int = 60_000, one_shot: bool = False
                         ) -> tuple[int, int]:
        """(producer_id, epoch); bumps the epoch and fences older instances of the id.

        ``one_shot``: the id is new and will carry one transaction only (a batch write's
        own): the coordinator drops it a retention period after that transaction ends.
        """
        body: dict[str, Any] = {"transactional_id": transactional_id,
                                "transaction_timeout_ms": transaction_timeout_ms}
        if one_shot:  # absent = reusable, so an older coordinator reads the request as before
            body["one_shot"] = True
        r = self.call("init_producer_id", body)
        return r["producer_id"], r["epoch"]

    def add_member(self, transactional_id: str, producer_id: int, epoch: int,
                   member_key: str) -> tuple[int, int]:
        """(member_producer_id, member_epoch) of a member producer of the open transaction."""
        r = self.call("add_member", {"transactional_id": transactional_id,
                                     "producer_id": producer_id, "epoch": epoch,
                                     "member_key": member_key})
        return r["producer_id"], r["epoch"]

    def reserve(self, producer_id: int, epoch: int,
                partitions: Mapping[TopicPartition, tuple[int, int]]
                ) -> dict[TopicPartition, int]:
        """{(topic, p): (base_sequence, count)} -> {(topic, p): base_offset}."""
        r = self.call("reserve", {"producer_id": producer_id, "epoch": epoch, "partitions": [
            {"topic": t, "partition": p, "base_sequence": s, "count": c}
            for (t, p), (s, c) in partitions.items()]})
        return {TopicPartition(x["topic"], x["partition"]): x["base_offset"]
                for x in r["partitions"]}

    def confirm(self, producer_id: int, epoch: int,
                written: Iterable[tuple[Any, ...]], wait_stable: bool = False) -> None:
        """Report reserved ranges as written: ``(topic, partition, base_offset)`` for a
        range in its own object, ``(topic, partition, base_offset, object, position,
        size)`` for a run in a shared object (``segment_writer.WrittenRange``)."""
        self.call("confirm", {"producer_id": producer_id, "epoch": epoch,
                              "wait_stable": wait_stable, "partitions": _written(written)})

    def heartbeat(self, transactional_id: str, producer_id: int, epoch: int) -> str:
        """Keep the open transaction alive; returns its state name."""
        return self.call("heartbeat", {"transactional_id": transactional_id,
                                       "producer_id": producer_id, "epoch": epoch})["state"]

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                    offsets: Mapping[TopicPartition, int], metadata: str = "") -> None:
        """Consumer-group offsets committed (or aborted) with the open transaction."""
        self.call("add_offsets", {
            "transactional_id": transactional_id, "producer_id": producer_id, "epoch": epoch,
            "group_id": group_id,
            "offsets": [{"topic": t, "partition": p, "offset": o, "metadata": metadata}
                        for (t, p), o in offsets.items()]})

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets: {(topic, partition): next offset to read}."""
        r = self.call("committed_offsets", {"group_id": group_id})["offsets"]
        out: dict[TopicPartition, int] = {}
        for key, offset in r.items():
            topic, _, p = key.rpartition("-")
            out[TopicPartition(topic, int(p))] = offset
        return out

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                members: list[int] | None = None, batch_id: int | None = None,
                written: Iterable[tuple[Any, ...]] | None = None) -> dict[str, Any]:
        """Commit or abort; answers after the stable snapshot shows the outcome.

        ``members``: member producer ids to commit (None = all); others are aborted.
        ``written``: [(topic, partition, base_offset)] this producer wrote and has not
        confirmed yet: confirmed in the same step (one RPC less than confirm + end_txn).
        Returns {"outcome", "producer_id", "epoch"}: the (pid, epoch) for the next
        transaction (the epoch is bumped on every EndTxn, as in KIP-890).
        """
        body: dict[str, Any] = {"transactional_id": transactional_id,
                                "producer_id": producer_id, "epoch": epoch,
                                "commit": commit, "members": members, "batch_id": batch_id}
        if written:
            body["written"] = _written(written)
        return self.call("end_txn", body)

    def begin_batch(self, transactional_id: str, batch_id: int,
                    transaction_timeout_ms: int = 60_000) -> dict[str, Any]:
        """{"state": "committed"} or {"producer_id", "epoch"} for a streaming batch."""
        return self.call("begin_batch", {"transactional_id": transactional_id,
                                         "batch_id": batch_id,
                                         "transaction_timeout_ms": transaction_timeout_ms})

    # -------------------------------------------------------------------- topics
    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None,
                     exist_ok: bool = False) -> dict[str, Any]:
        """Create a topic through the coordinator's log; returns its metadata.

        ``exist_ok``: an existing topic is no error (its metadata is returned as it is).
        """
        return self.call("create_topic", {"name": name, "partitions": partitions,
                                          "config": dict(config or {}), "exist_ok": exist_ok})

    def delete_records(self, offsets: Mapping[tuple[str, int], int],
                       timeout_ms: int = 60_000) -> dict[tuple[str, int], int]:
        """DeleteRecords: move each partition's log start offset to its offset (-1: the
        high watermark); the new low watermarks, once readers see them."""
        body = {"partitions": [{"topic": t, "partition": p, "offset": o}
                               for (t, p), o in offsets.items()], "timeout_ms": timeout_ms}
        res = self.call("delete_records", body)
        return {(r["topic"], r["partition"]): r["low_watermark"] for r in res["partitions"]}

    def create_partitions(self, name: str, total: int, validate_only: bool = False
                          ) -> dict[str, Any]:
        """CreatePartitions: grow the topic to ``total`` partitions."""
        return self.call("create_partitions", {"name": name, "total": total,
                                               "validate_only": validate_only})

    def delete_topic(self, name: str) -> dict[str, Any]:
        """DeleteTopics of one topic; its objects are deleted in the background."""
        return self.call("delete_topic", {"name": name})

    def alter_configs(self, name: str, set_configs: Mapping[str, Any] | None = None,
                      delete: list[str] | None = None, validate_only: bool = False, *,
                      append: Mapping[str, str] | None = None,
                      subtract: Mapping[str, str] | None = None, replace: bool = False
                      ) -> dict[str, Any]:
        """IncrementalAlterConfigs of one topic (SET, DELETE, and APPEND/SUBTRACT of list
        items); ``replace``: AlterConfigs (what ``set_configs`` does not name goes back to
        its default). Its configs after it."""
        return self.call("alter_configs", {"name": name, "set": dict(set_configs or {}),
                                           "delete": list(delete or []),
                                           "append": dict(append or {}),
                                           "subtract": dict(subtract or {}),
                                           "replace": replace,
                                           "validate_only": validate_only})

    def describe_topic(self, name: str) -> dict[str, Any]:
        """A topic's metadata ({"name", "partitions", "config", ...}) or UnknownTopicOrPartition."""
        return self.call("describe_topic", {"name": name})

    def list_topics(self) -> list[str]:
        """The names of every topic under the root."""
        return self.call("list_topics", {})["topics"]

    def describe_txn(self, transactional_id: str) -> dict[str, Any]:
        """A transactional id's state (producer id, epoch, state, partitions, members)."""
        return self.call("describe_txn", {"transactional_id": transactional_id})

    def stable(self, publish: bool = False) -> dict[str, Any]:
        """The coordinator's HW and LSO per partition and its last stable snapshot's seq;
        ``publish``: write a stable snapshot first (what readers see is then current)."""
        return self.call("stable", {"publish": publish})


def _written(written: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Written ranges as Confirm and EndTxn take them (a shared object's run with its
    object, position and size)."""
    out: list[dict[str, Any]] = []
    for w in written:
        row: dict[str, Any] = {"topic": w[0], "partition": w[1], "base_offset": w[2]}
        if len(w) > 3 and w[3] is not None:
            row.update(object=w[3], position=w[4], size=w[5])
        out.append(row)
    return out


__all__ = ["CoordinatorClient", "CoordinatorError", "CoordinatorUnavailableError"]

