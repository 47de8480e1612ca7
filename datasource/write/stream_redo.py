"""A micro-batch redone by the driver when the coordinator lost its tasks' records.

A stream's tasks join their micro-batch's transaction with lazy log records (the "batch"
record, each task's membership and reservations): they ride in the next durable append,
the driver's, so a micro-batch costs a log object or two, not two per task. A coordinator
lost before that append (a failover, a crash) loses them, and the driver's EndTxn is
refused (its batch, members or reservations unknown) before it changes anything. The
tasks' data is still on storage, in their shared objects, never confirmed.

Rather than failing the query, the driver redoes the micro-batch from those objects: it
begins the batch again (a no-op answer if it was committed after all), joins it as a
member of its own, copies every run's batches under its producer id (Kafka's batches,
their producer id, epoch and base sequence stamped again with a new CRC, records
untouched) into shared objects at offsets it reserves, ``REDO_CHUNK_BYTES`` at a time,
commits the batch's group offsets again, and commits with itself as the only member:
whatever of the tasks' records did become durable is aborted. The tasks' objects are
never confirmed and are deleted as orphans. Costs one read and one write of the
micro-batch's bytes, on the driver, a chunk at a time, only after a coordinator was lost
mid-batch.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.segment_writer import SegmentWriter
from txnlog.log_format.arrow.arrow_encode import EncodedRecords
from txnlog.log_format.codec.batch_header import restamp_producer
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.storage import Storage

from .commit_messages import TxnlogCommitMessage

log = logging.getLogger("txnlog.datasource.stream_redo")


# A redo reads, restamps and writes the micro-batch this many bytes at a time (each chunk
# one shared object): the driver holds one chunk, not the micro-batch
REDO_CHUNK_BYTES = 64 << 20

Run = tuple[str, int, int, str | None, int, int]  # topic, partition, base, path, position, size


def chunks(tasks: list[TxnlogCommitMessage], limit: int | None = None) -> list[list[Run]]:
    """Every run of ``tasks`` in (topic, partition, base) order, cut into lists of at most
    ``limit`` bytes (``REDO_CHUNK_BYTES``; a run bigger than that alone)."""
    limit = REDO_CHUNK_BYTES if limit is None else limit
    runs = sorted((r for m in tasks for r in m.runs), key=lambda r: (r[0], r[1], r[2]))
    out: list[list[Run]] = []
    size = limit
    for run in runs:
        if size + run[5] > limit and (not out or out[-1]):
            out.append([])
            size = 0
        out[-1].append(run)
        size += run[5]
    return out


def copy_runs(storage: Storage, runs: list[Run], producer_id: int, epoch: int,
              next_seq: dict[TopicPartition, int]) -> dict[TopicPartition, EncodedRecords]:
    """``runs`` (in offset order per partition) read back and stamped as
    ``producer_id``'s: the epoch, and base sequences from ``next_seq`` on (moved past
    them: a partition's sequences go on across chunks)."""
    out: dict[TopicPartition, EncodedRecords] = {}
    by_tp: dict[TopicPartition, list[tuple[str, int, int]]] = {}
    for topic, p, _base, path, position, size in runs:
        if path is None:
            raise RuntimeError(f"a run of {topic}-{p} names no object: cannot redo it")
        by_tp.setdefault(TopicPartition(topic, p), []).append((path, position, size))
    for tp, parts in by_tp.items():
        data = bytearray()
        for path, position, size in parts:
            data += storage.get(path, position, position + size)
        positions, counts, first, at = [], [], next_seq.get(tp, 0), 0
        seq = first
        while at < len(data):
            n = int.from_bytes(data[at + 57:at + 61], "big", signed=True)
            positions.append(at)
            counts.append(n)
            at += restamp_producer(data, at, producer_id, epoch, seq)
            seq += n
        if at != len(data):
            raise RuntimeError(f"the runs of {tp.topic}-{tp.partition} end inside a batch")
        next_seq[tp] = seq
        out[tp] = EncodedRecords(data, np.array(positions, dtype=np.int64),
                                 np.array(counts, dtype=np.int32), seq - first)
    return out


def redo_batch(client: CoordinatorClient, storage: Storage, tid: str, batch_id: int,
               timeout_ms: int, tasks: list[TxnlogCommitMessage],
               groups: list[Any]) -> dict[str, Any]:
    """Commit micro-batch ``batch_id`` of ``tid`` from ``tasks``' objects (module doc);
    EndTxn's answer."""
    began = client.begin_batch(tid, batch_id, timeout_ms)
    if began.get("state") == "committed":
        return {"outcome": "commit", "batch_committed": True}
    pid, epoch = int(began["producer_id"]), int(began["epoch"])
    mpid, mepoch = client.add_member(tid, pid, epoch, f"b{batch_id}-redo-{uuid.uuid4().hex}")
    written: list[Any] = []
    next_seq: dict[TopicPartition, int] = {}
    with ThreadPoolExecutor(1) as io:
        writer = SegmentWriter(client, storage, mpid, mepoch, io, name="stream redo")
        for runs in chunks(tasks):
            encoded = copy_runs(storage, runs, mpid, mepoch, next_seq)
            written += writer.write(writer.reserve(encoded))
    for g in groups:
        client.add_offsets(tid, pid, epoch, g.group_id, g.offsets)
    log.warning("txnlog sink %s: batch %d redone by the driver from %d runs (%d records): "
                "the coordinator lost its tasks' records", tid, batch_id,
                sum(len(m.runs) for m in tasks), sum(next_seq.values()))
    return client.end_txn(tid, pid, epoch, commit=True, members=[mpid], batch_id=batch_id,
                          written=written)


__all__ = ["REDO_CHUNK_BYTES", "chunks", "copy_runs", "redo_batch"]
