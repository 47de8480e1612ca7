"""One call per flush for many producers: ``reserve_many`` and ``confirm_many``.

A gateway flushes every Produce request of every connection that arrived within its flush
window as one shared object (``gateway.flush_window``). Reserving and confirming each
producer's batches with calls of their own would cost a round trip per producer per flush;
these two operations take every producer of a flush in one request and answer each one on
its own (a fenced producer fails alone, as one Produce request would).

Both run the single-producer operations (``TransactionCoordinator.reserve``/``confirm`` and
``KafkaClients.reserve`` for a Kafka client's transaction) for all entries at once, so the
log's group commit makes them one append, and each entry's answer waits for its own
durability exactly as a call of its own would. Order matters for reservations: a producer
with several Produce requests in one window (librdkafka keeps up to five in flight) must be
reserved in the order they came, or its second batch would be taken for a gap
(OutOfOrderSequence). Every topic is made known first (the only step of ``reserve`` that can
wait before its checks), so the entries' checks and reservations run in list order before
any of them waits for the log.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from .. import faults
from ..errors import CoordinatorError, UnknownServerError, UnknownTopicOrPartitionError
from ..wire import written_parts
from .kafka_txn import kafka_clients

if TYPE_CHECKING:
    from .transaction_coordinator import TransactionCoordinator


def _answer(result: Any) -> dict[str, Any]:
    if isinstance(result, CoordinatorError):
        return {"error": result.to_json()}
    if isinstance(result, BaseException):
        return {"error": UnknownServerError(f"{type(result).__name__}: {result}").to_json()}
    return result if isinstance(result, dict) else {}


async def reserve_many(e: TransactionCoordinator, entries: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """Each entry ``{producer_id, epoch, partitions, transactional_id?}`` reserved as its
    own Reserve (or, with a transactional id, a Kafka client's reserve) would be; answers in
    entry order: ``{"partitions": [...], "epoch": e}`` or ``{"error": {...}}``."""
    for topic in {p["topic"] for entry in entries for p in entry["partitions"]}:
        with contextlib.suppress(CoordinatorError):  # its entries get the error themselves
            await e._partition_count(topic)
    clients = kafka_clients(e)

    async def one(entry: dict[str, Any]) -> dict[str, Any]:
        tid = entry.get("transactional_id")
        if tid is not None:
            return await clients.reserve(tid, entry["producer_id"], entry["epoch"],
                                         entry["partitions"])
        out = await e.reserve(entry["producer_id"], entry["epoch"], entry["partitions"])
        return {"partitions": out, "epoch": entry["epoch"]}

    # tasks start in list order and each runs its checks and state changes before its
    # first wait (every topic is known now), so one producer's entries keep their order
    results = await asyncio.gather(*(one(x) for x in entries), return_exceptions=True)
    return [_answer(r) for r in results]


async def confirm_many(e: TransactionCoordinator, entries: list[dict[str, Any]],
                       wait_stable: bool) -> list[dict[str, Any]]:
    """Each entry ``{producer_id, epoch, partitions}`` confirmed as its own Confirm would
    be; ``wait_stable``: answer once a stable head shows them all."""
    results = await asyncio.gather(
        *(e.confirm(x["producer_id"], x["epoch"], x["partitions"], wait_stable)
          for x in entries), return_exceptions=True)
    return [_answer(r) for r in results]


async def _reserve_many(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    entries = []
    for x in b["entries"]:
        parts = [{"topic": str(p["topic"]), "partition": int(p["partition"]),
                  "base_sequence": int(p["base_sequence"]), "count": int(p["count"])}
                 for p in x["partitions"]]
        if not parts:
            raise UnknownTopicOrPartitionError("an entry of reserve_many names no partition")
        entries.append({"producer_id": int(x["producer_id"]), "epoch": int(x["epoch"]),
                        "transactional_id": x.get("transactional_id"), "partitions": parts})
    return {"results": await reserve_many(e, entries)}


async def _confirm_many(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    faults.point("before_confirm")
    entries = [{"producer_id": int(x["producer_id"]), "epoch": int(x["epoch"]),
                "partitions": written_parts(x["partitions"])} for x in b["entries"]]
    return {"results": await confirm_many(e, entries, bool(b.get("wait_stable", False)))}


FLUSH_OPERATIONS = {"reserve_many": _reserve_many, "confirm_many": _confirm_many}

__all__ = ["FLUSH_OPERATIONS", "confirm_many", "reserve_many"]
