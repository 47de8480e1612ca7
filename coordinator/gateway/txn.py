"""Transactional Kafka producers: InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn.

Each is forwarded to the coordinator's ``kafka_txn`` role, which translates the client's
epoch (kept across transactions, as Kafka clients before EndTxn v5 do) and sequences to the
coordinator's, so any gateway serves any request of a transaction. AddPartitionsToTxn and
AddOffsetsToTxn open the transaction at the coordinator (and check that the producer is
current and the topic exists); partitions join it at their first Reserve, which, like
TxnOffsetCommit, is refused while none is open (a late retry of an ended transaction).
TxnOffsetCommit writes the group's offsets into the transaction
through the group offsets path, so they commit or abort with it (Kafka's
sendOffsetsToTransaction), and are the offsets OffsetFetch and Spark read once committed.
"""

from __future__ import annotations

from typing import Any

from . import errors as E
from .backend import Backend
from .codec import ms
from .groups import offset_answer, offset_checks


def _code(exc: BaseException) -> int:
    code = E.code_of(exc)
    # an unreachable coordinator: the client looks it up again and retries
    return E.COORDINATOR_NOT_AVAILABLE if code in (E.NOT_COORDINATOR, E.KAFKA_STORAGE_ERROR,
                                                   E.UNKNOWN_SERVER_ERROR) else code


async def init_transactional(backend: Backend, tid: str, timeout_ms: int, pid: int = -1,
                             epoch: int = -1) -> tuple[int, int]:
    r = await backend.run(backend.client.call, "kafka_init_producer_id", {
        "transactional_id": tid, "transaction_timeout_ms": timeout_ms,
        "producer_id": pid, "epoch": epoch})
    return r["producer_id"], r["epoch"]


async def add_partitions_to_txn(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    tid = req.v3_and_below_transactional_id
    pid, epoch = req.v3_and_below_producer_id, req.v3_and_below_producer_epoch
    topics = req.v3_and_below_topics
    try:
        await backend.run(backend.client.call, "kafka_txn_check", {
            "transactional_id": tid, "producer_id": pid, "epoch": epoch})
        code = 0
    except Exception as exc:
        code = E.fenced_as(_code(exc), version, 2)
    results = []
    for t in topics:
        n = await backend.run(backend.partitions, t.name) if code == 0 else None
        results.append({"name": t.name, "results_by_partition": [
            {"partition_index": p,
             "partition_error_code": code if code else
             (0 if n is not None and 0 <= p < n else E.UNKNOWN_TOPIC_OR_PARTITION)}
            for p in t.partitions]})
    if code == 0 and any(r["partition_error_code"] for t in results
                         for r in t["results_by_partition"]):
        for t in results:  # Kafka: the others are OPERATION_NOT_ATTEMPTED
            for r in t["results_by_partition"]:
                if r["partition_error_code"] == 0:
                    r["partition_error_code"] = 55
    return {"throttle_time": 0, "results_by_topic_v3_and_below": results}


async def add_offsets_to_txn(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    try:
        await backend.run(backend.client.call, "kafka_txn_check", {
            "transactional_id": req.transactional_id, "producer_id": req.producer_id,
            "epoch": req.producer_epoch})
        code = 0
    except Exception as exc:
        code = E.fenced_as(_code(exc), version, 2)
    return {"throttle_time": 0, "error_code": code}


async def txn_offset_commit(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    offsets, refused = await offset_checks(backend, req.topics)
    code = 0
    if offsets:
        try:
            await backend.run(backend.client.call, "kafka_add_offsets", {
                "transactional_id": req.transactional_id, "producer_id": req.producer_id,
                "epoch": req.producer_epoch, "group_id": req.group_id, "offsets": offsets})
        except Exception as exc:
            code = _code(exc)
    return {"throttle_time": 0, "topics": offset_answer(req.topics, refused, code)}


async def end_txn(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    try:
        await backend.run(backend.client.call, "kafka_end_txn", {
            "transactional_id": req.transactional_id, "producer_id": req.producer_id,
            "epoch": req.producer_epoch, "commit": bool(req.committed)})
        code = 0
        backend.mark_written()  # the outcome is published: read-your-writes
    except Exception as exc:
        code = E.fenced_as(_code(exc), version, 2)
    return {"throttle_time": 0, "error_code": code}


def timeout_ms(req: Any) -> int:
    return ms(req.transaction_timeout)
