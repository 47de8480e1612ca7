"""InitProducerId and Produce: a Kafka producer's batches written through txnlog's one
write path (reserve → stamp → one shared object → confirm), for every connection's
Produce requests of a flush window at once (``flush_window``).

A Produce request carries one v2 batch per partition. Its producer id, epoch and base
sequence go to the coordinator's Reserve as they are, so Kafka's idempotence is the
coordinator's: a retried batch (same sequence) gets the same offsets, a gap is
OutOfOrderSequence, an old epoch InvalidProducerEpoch/ProducerFenced. The batch is stored
verbatim apart from its baseOffset (outside the CRC, as a broker assigns it), in the
window's shared object, then confirmed. A non-transactional batch is acknowledged
once the stable state shows it (``wait_stable``), so a consumer that starts after the ack
reads it, as after a broker's acks=all; a transactional one becomes visible with its
EndTxn.

A producer without an id (``enable.idempotence=false``, producer id -1) writes through a
gateway-owned idempotent producer id of its connection, whose sequences the gateway keeps;
the stored batch still says -1, as a broker stores it. If that id's state is in doubt (a
reserve that failed), the connection takes a new id: the old one's open reservation is
fenced by the coordinator's timers, never half-visible.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from txnlog.log_format.arrow.arrow_codec import scan_batches
from txnlog.log_format.codec.batch_header import (
    CONTROL_FLAG,
    TRANSACTIONAL_FLAG,
    parse_header,
)
from txnlog.log_format.errors import LogFormatError
from txnlog.log_format.layout import TopicPartition

from ..access.kafka_authz import CreateRefused
from ..errors import CoordinatorError
from . import errors as E
from . import validate
from .backend import Backend
from .codec import ms
from .flush_window import WindowBatch, WindowEntry

log = logging.getLogger("txnlog.gateway")


class Connection(Protocol):
    """What Produce needs of a client connection (``server.Connection``): the idempotent
    producer it writes through, kept for the connection's life."""

    producer: GatewayProducer | None
    produce_order: asyncio.Lock

RETRIABLE_CODES = {E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS,
                   E.COORDINATOR_NOT_AVAILABLE, E.KAFKA_STORAGE_ERROR, E.UNKNOWN_SERVER_ERROR}


@dataclass
class GatewayProducer:
    """The idempotent producer id a connection writes id-less batches under."""

    producer_id: int
    epoch: int
    sequences: dict[TopicPartition, int] = field(default_factory=dict)


async def init_producer_id(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    tid = req.transactional_id
    try:
        if tid is None:
            pid, epoch = await backend.run(backend.client.init_producer_id, None)
        else:
            from .txn import init_transactional
            pid, epoch = await init_transactional(
                backend, tid, ms(req.transaction_timeout),
                getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1))
    except Exception as exc:
        code = E.code_of(exc)
        if code == E.NOT_COORDINATOR and tid is None:
            code = E.COORDINATOR_NOT_AVAILABLE
        code = E.fenced_as(code, version, 4)
        return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch}


@dataclass
class _Batch:
    topic: str
    partition: int
    data: bytearray
    producer_id: int
    epoch: int
    base_sequence: int
    count: int
    transactional: bool
    error: int = 0
    message: str | None = None
    base_offset: int = -1
    record_errors: list[dict[str, Any]] = field(default_factory=list)
    log_append_time: int | None = None


def _parse(topic: str, partition: int, records: bytes | None) -> _Batch:
    """The one v2 batch of a partition's records, checked (CRC too) before anything."""
    bad = _Batch(topic, partition, bytearray(), -1, -1, -1, 0, False)
    if not records:
        bad.error, bad.message = E.INVALID_RECORD, "no record batch"
        return bad
    data = bytearray(records)
    try:
        index = scan_batches(data, source=f"produce {topic}-{partition}", verify_crc=True)
        if len(index) != 1:
            bad.error, bad.message = E.INVALID_RECORD, \
                f"{len(index)} batches; a produce request holds one per partition"
            return bad
        h = parse_header(data, 0)
    except LogFormatError as exc:
        bad.error, bad.message = E.CORRUPT_MESSAGE, str(exc)
        return bad
    if h.attributes & CONTROL_FLAG:
        bad.error, bad.message = E.INVALID_RECORD, "clients may not write control batches"
        return bad
    if h.records_count != h.last_offset_delta + 1 or h.records_count < 1:
        bad.error, bad.message = E.INVALID_RECORD, "record count and last offset delta differ"
        return bad
    if len(data) != h.batch_length + 12:
        bad.error, bad.message = E.CORRUPT_MESSAGE, "trailing bytes after the batch"
        return bad
    return _Batch(topic, partition, data, h.producer_id, h.producer_epoch, h.base_sequence,
                  h.records_count, bool(h.attributes & TRANSACTIONAL_FLAG))


def _entry(pid: int, epoch: int, batches: list[_Batch],
           sequences: dict[TopicPartition, int] | None, wait_stable: bool,
           transactional_id: str | None = None) -> WindowEntry:
    """One producer's batches as the flush window writes them (one object and one
    reserve/confirm per window, whatever the producers and partitions). ``sequences``: the
    gateway's own sequence numbers (id-less producers) instead of the batches' own, moved
    on at once (a failure gives the connection a new id)."""
    entry_batches = []
    for b in batches:
        tp = TopicPartition(b.topic, b.partition)
        seq = b.base_sequence if sequences is None else sequences.get(tp, 0)
        if sequences is not None:
            sequences[tp] = seq + b.count
        entry_batches.append(WindowBatch(b.topic, b.partition, b.data, seq, b.count))
    return WindowEntry(pid, epoch, transactional_id, entry_batches, wait_stable)


def _storage_code(exc: BaseException) -> int:
    code = E.code_of(exc)
    if code == E.UNKNOWN_SERVER_ERROR:  # the client learns nothing more: say it here
        log.warning("produce answered UNKNOWN_SERVER_ERROR: %r", exc)
    if code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS):
        code = E.KAFKA_STORAGE_ERROR  # retriable for a producer: same sequences
    return code


async def produce(backend: Backend, req: Any, version: int, conn: Connection
                  ) -> dict[str, Any] | None:
    """Produce: every producer's batches of the request go to the flush window, in the
    order the connection's requests came (``conn.produce_order``: a pipelined request of
    the same producer must not overtake this one), then wait for their outcome."""
    batches: list[_Batch] = []
    waiting: list[tuple[list[_Batch], WindowEntry, GatewayProducer | None]] = []
    async with conn.produce_order:
        for t in req.topic_data:
            for p in t.partition_data:
                b = _parse(t.name, p.index, p.records)
                if b.error == 0:
                    b.error, b.message = await _known(backend, t.name, p.index)
                if b.error == 0:  # what Kafka's LogValidator refuses (keyless, compact)
                    refused = await validate.refusal(backend, t.name, p.index, b.data)
                    if refused is not None:
                        b.error, b.message, b.record_errors = refused
                    else:
                        b.log_append_time = await backend.run(validate.log_append_time,
                                                              backend, t.name, b.data)
                batches.append(b)
        groups: dict[tuple[int, int], list[_Batch]] = {}
        for b in batches:
            if b.error == 0:
                groups.setdefault((b.producer_id, b.epoch), []).append(b)
        for (pid, epoch), group in groups.items():
            try:
                if pid < 0:
                    if any(b.transactional for b in group):
                        raise _BatchError(E.INVALID_RECORD, "a transactional batch needs an id")
                    if conn.producer is None:
                        gp, ge = await backend.run(backend.client.init_producer_id, None)
                        conn.producer = GatewayProducer(gp, ge)
                    gprod = conn.producer
                    entry = _entry(gprod.producer_id, gprod.epoch, group, gprod.sequences,
                                   wait_stable=True)
                    waiting.append((group, entry, gprod))
                else:
                    transactional = any(b.transactional for b in group)
                    tid = getattr(req, "transactional_id", None)
                    if transactional and not tid:
                        raise _BatchError(
                            E.INVALID_RECORD,
                            "a transactional batch needs the request's transactional id")
                    entry = _entry(pid, epoch, group, None, wait_stable=not transactional,
                                   transactional_id=tid if transactional else None)
                    waiting.append((group, entry, None))
                backend.flush_window.enqueue(entry)
            except _BatchError as exc:
                for b in group:
                    b.error, b.message = exc.code, str(exc)
            except Exception as exc:
                code = _storage_code(exc)
                for b in group:
                    b.error, b.message = code, str(exc)[:500] if isinstance(
                        exc, CoordinatorError | OSError) else None
    for group, entry, gprod in waiting:
        await asyncio.shield(entry.done)
        for b, w in zip(group, entry.batches, strict=True):
            b.base_offset, b.error, b.message = w.base_offset, w.error, w.message
        if gprod is not None and any(w.error for w in entry.batches) \
                and conn.producer is gprod:
            conn.producer = None  # its sequences are in doubt: a new id next time
    if any(b.error == 0 and not b.transactional for b in batches):
        backend.mark_written()  # read-your-writes (Backend.snapshot)
    if req.acks == 0:
        return None
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for b in batches:
        by_topic.setdefault(b.topic, []).append({
            "index": b.partition, "error_code": E.fenced_as(b.error, version, None),
            "base_offset": b.base_offset if b.error == 0 else -1,
            "log_append_time": b.log_append_time if b.error == 0 else None,
            "log_start_offset": -1,
            "record_errors": b.record_errors,
            "error_message": b.message})
    return {"throttle_time": 0, "responses": [
        {"name": t, "partition_responses": ps} for t, ps in by_topic.items()]}


async def _known(backend: Backend, topic: str, partition: int) -> tuple[int, str | None]:
    """(0, None) if the partition exists, auto-creating an unknown topic where the gateway
    allows it; else the code a broker answers (retriable if creating it failed)."""
    try:
        n = await backend.topic_partitions(topic, create=True)
    except CreateRefused as exc:
        return E.TOPIC_AUTHORIZATION_FAILED, str(exc)
    except Exception as exc:
        return E.LEADER_NOT_AVAILABLE, f"topic {topic!r} could not be created: {exc}"[:500]
    if n is None or not 0 <= partition < n:
        return E.UNKNOWN_TOPIC_OR_PARTITION, None
    return 0, None


class _BatchError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
