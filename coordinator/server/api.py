"""The coordinator's HTTP/JSON API: routes, request parsing, the operation table, error replies.

Every operation is ``POST /v1/<operation>`` with a JSON object; a handler turns the object's
fields into typed arguments (``int(...)``, partition lists) and calls the
``TransactionCoordinator``, and the answer is the handler's JSON. Errors come back as
``{"error": <Kafka error name>, "code": <Kafka code>, "message": ...}`` (docs/coordinator.md):
every field is typed and bounded first (``request_limits``): a malformed field is
InvalidRequest naming it, an unknown operation too. ``GET /healthz`` answers 200
only while the process serves (503 while loading, stopping or fenced) and ``GET /metrics``
is Prometheus' text format.

This module knows nothing of the process around it (start-up, registration, signals: that is
``server.py``); it reads whether the process serves from a ``ServingState`` the process
updates.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import generate_latest

from .. import faults
from ..errors import (
    CoordinatorError,
    CoordinatorLoadInProgressError,
    InvalidRequestError,
    NotCoordinatorError,
    UnknownServerError,
)
from ..group.group_membership import GROUP_OPERATIONS
from ..maintenance.topic_admin import ADMIN_TOPIC_OPERATIONS
from ..transaction.flush_calls import FLUSH_OPERATIONS
from ..transaction.kafka_txn import KAFKA_TXN_OPERATIONS
from ..transaction.transaction_coordinator import TransactionCoordinator
from ..wire import written_parts
from .admin_ops import ADMIN_OPERATIONS
from .http_server import Reply
from .metrics import Metrics
from .request_limits import check_request, parse_body

log = logging.getLogger("txnlog.coordinator.server.api")


@dataclass
class ServingState:
    """Whether the process answers operations, as its lifecycle moves on.

    ``ready``: recovery is done (until then CoordinatorLoadInProgress, which clients retry);
    ``standby``: waiting to take over (``standby.py``; answers as loading);
    ``stopping``/``fatal``: NotCoordinator (``fatal``: why this process stopped serving, e.g.
    fenced by a successor). ``last_request``: monotonic time of the last operation, for the
    idle exit.
    """

    ready: bool = False
    standby: bool = False
    stopping: bool = False
    fatal: BaseException | None = None
    last_request: float = field(default_factory=time.monotonic)


class CoordinatorApi:
    """Serves ``route(method, path, body)`` for ``HttpServer`` over one transaction coordinator."""

    def __init__(self, coordinator: TransactionCoordinator, metrics: Metrics,
                 state: ServingState) -> None:
        self.coordinator = coordinator
        self.metrics = metrics
        self.state = state

    async def route(self, method: str, path: str, body: bytes) -> Reply:
        """One HTTP request -> (status, body[, content type])."""
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
        """200 with the coordinator epoch while serving; 503 with why not otherwise."""
        st = self.state
        if st.ready and not st.stopping:
            return 200, _json({"status": "ok", "epoch": self.coordinator.coordinator_epoch,
                               "pid": os.getpid()})
        status = "fenced" if st.fatal else ("stopping" if st.stopping else
                                            "standby" if st.standby else "loading")
        return 503, _json({"status": status})

    async def dispatch(self, op: str, raw: bytes) -> Reply:
        """Run operation ``op`` on the JSON object ``raw``; every failure is a Kafka error
        reply (a bug in a handler too: UnknownServerError, logged with its traceback)."""
        st = self.state
        st.last_request = time.monotonic()
        handler = OPERATIONS.get(op)
        try:
            if handler is None:
                raise InvalidRequestError(f"unknown operation {op!r}; known: {sorted(OPERATIONS)}")
            if st.fatal is not None or st.stopping:
                raise NotCoordinatorError(
                    f"this coordinator is not serving ({st.fatal or 'stopping'})")
            if not st.ready:
                raise CoordinatorLoadInProgressError("the coordinator is loading its log")
            # Typed and bounded before any handler sees it (request_limits: why).
            body = check_request(op, parse_body(op, raw))
            try:
                result = await handler(self.coordinator, body)
            except (KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, CoordinatorError):
                    raise
                raise InvalidRequestError(f"bad {op} request: {exc!r}") from None
            self.metrics.request_ok(op)
            return 200, _json(result)
        except CoordinatorError as exc:
            if st.fatal is not None and not isinstance(exc, NotCoordinatorError):
                exc = NotCoordinatorError(f"this coordinator stopped: {st.fatal}")
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
    """A request's partition list, typed: topic, partition and the named int ``fields``."""
    out = []
    for item in items:
        out.append({"topic": str(item["topic"]), "partition": int(item["partition"]),
                    **{f: int(item[f]) for f in fields}})
    return out


# --------------------------------------------------------------------- the operations
# One coroutine per operation: parse the request's fields, call the transaction coordinator.
# A missing or mistyped field raises KeyError/TypeError/ValueError, which dispatch answers
# as InvalidRequest.
Handler = Callable[[TransactionCoordinator, dict[str, Any]], Awaitable[Any]]


async def _init(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    # one_shot is checked as a bool by the coordinator (absent: reusable, as older clients)
    return await e.init_producer_id(b.get("transactional_id"),
                                    int(b.get("transaction_timeout_ms", 60_000)),
                                    b.get("one_shot", False))


async def _add_member(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.add_member(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]),
                              b["member_key"])


async def _reserve(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    res = await e.reserve(int(b["producer_id"]), int(b["epoch"]),
                          _parts(b["partitions"], "base_sequence", "count"))
    return {"partitions": res}


async def _confirm(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    faults.point("before_confirm")
    return await e.confirm(int(b["producer_id"]), int(b["epoch"]),
                           written_parts(b["partitions"]), bool(b.get("wait_stable", False)))


async def _heartbeat(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await e.heartbeat(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]))


async def _add_offsets(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    offsets = [{"topic": str(o["topic"]), "partition": int(o["partition"]),
                "offset": int(o["offset"]), "metadata": str(o.get("metadata", "")),
                "leader_epoch": int(o.get("leader_epoch", -1))}
               for o in b["offsets"]]
    return await e.add_offsets(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]),
                               b["group_id"], offsets)


async def _committed(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    # "metadata": each offset's commit metadata and leader epoch, where either was given
    return {"offsets": await e.committed_offsets(b["group_id"]),
            "metadata": e.offsets.committed_metadata(b["group_id"])}


async def _end_txn(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    members = b.get("members")
    batch = b.get("batch_id")
    written = b.get("written")
    return await e.end_txn(b["transactional_id"], int(b["producer_id"]), int(b["epoch"]),
                           bool(b["commit"]), None if members is None else
                           [int(m) for m in members], None if batch is None else int(batch),
                           written_parts(written) if written else None)


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
    **FLUSH_OPERATIONS,  # a gateway's flush: many producers' reserves/confirms in one call
    **ADMIN_TOPIC_OPERATIONS,  # delete records, alter configs
    **ADMIN_OPERATIONS,  # list/delete groups, list/describe/abort transactions, producers
    **GROUP_OPERATIONS,  # consumer-group membership for gateways (group_membership.py)
    **KAFKA_TXN_OPERATIONS,  # Kafka clients' transactions through gateways (kafka_txn.py)
}
