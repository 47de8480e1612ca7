"""The task side of every txnlog write, batch or streaming.

One task attempt is one member producer of the write's transaction (DESIGN 5.2): it routes
its rows to topic-partitions, encodes Kafka batches with its own producer id and sequence
numbers as the rows arrive (one copy of the data), and writes them through the write path
every producer shares (``coordinator.segment_writer``: one Reserve for all partitions of a
flush, one shared object put-if-absent), and heartbeats in the background so a slow upstream
iterator never lets the transaction time out.

A task does not confirm its runs: it hands them (object, position, size) to the driver in
its commit message, and the driver's EndTxn confirms every successful attempt's runs in the
same log append as the Prepare. Nothing reads a transaction's data before its commit
anyway (read_committed), and a confirm per task cost a coordinator call, a log append and a
stable head each: over 64 partitions with 4 tasks, 8 of a write's 26 objects.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.segment_writer import (
    PartitionCounts,
    Partitioner,
    Reservation,
    SegmentWriter,
)
from txnlog.coordinator.errors import InvalidProducerIdMappingError, ProducerFencedError
from txnlog.log_format.arrow.arrow_encode import StreamEncoder, prepare_columns
from txnlog.log_format.codec.compression import Codec
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.storage import Storage, aligned_empty

from ..options import WriteOptions
from .commit_messages import Membership, TxnlogCommitMessage
from .routing import Router

# Flush when this much Arrow data is buffered in a task (all partitions together).
FLUSH_BYTES = 32 << 20
# A Spark local property (sc.setLocalProperty) that overrides FLUSH_BYTES for the jobs of
# one thread: no option needed, and tests use "1" to make a task write before its input ends.
# A flush size given this way also makes flushes synchronous (rows are on storage before the
# task takes its next batch), which is what tests of failures after a write rely on.
FLUSH_BYTES_PROPERTY = "txnlog.write.flushBytes"
_io = ThreadPoolExecutor(max_workers=8, thread_name_prefix="txnlog-put")
# Runs each task's in-flight flush (its puts go to _io); one per concurrent task in a worker.
_flusher = ThreadPoolExecutor(max_workers=4, thread_name_prefix="txnlog-flush")


class _Heartbeat:
    """Keeps the member's transaction alive while the task works (a daemon thread)."""

    def __init__(self, client: CoordinatorClient, tid: str, pid: int, epoch: int,
                 interval_s: float) -> None:
        self._stop = threading.Event()
        self._deadline: float | None = None
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, args=(client, tid, pid, epoch,
                                                                interval_s), daemon=True)
        self._thread.start()

    def _run(self, client: CoordinatorClient, tid: str, pid: int, epoch: int,
             interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            if self._deadline is not None and time.monotonic() > self._deadline:
                return
            try:
                client.heartbeat(tid, pid, epoch)
            except (ProducerFencedError, InvalidProducerIdMappingError) as exc:
                # ended: fenced, or a one-shot id already dropped after its transaction
                self.error = exc
                return
            except Exception:  # transient: the next beat or the next RPC will tell
                continue

    def stop(self) -> None:
        self._stop.set()

    def linger(self, seconds: float) -> None:
        """Go on beating until the transaction ends or ``seconds`` pass."""
        self._deadline = time.monotonic() + seconds

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()


# A finished task's heartbeat lingers until the transaction ends (then the coordinator answers
# ProducerFenced) or LINGER_S pass: Spark runs commit() in a fresh planner worker after the last
# task ends, and that gap must not time out a transaction with a short transaction.timeout.ms.
# One lingering beat per transactional id and Python worker (workers are reused).
LINGER_S = 60.0
_lingering: dict[str, _Heartbeat] = {}
_lingering_lock = threading.Lock()


def _linger(tid: str, beat: _Heartbeat) -> None:
    with _lingering_lock:
        for key, other in list(_lingering.items()):
            if not other.alive or key == tid:
                other.stop()
                del _lingering[key]
        beat.linger(LINGER_S)
        _lingering[tid] = beat


# Encode buffers whose writes finished, kept for the next flush of any task in this Python
# worker (workers are reused): their pages are already faulted in, and faulting in a fresh
# 32 MiB buffer costs about as much as encoding into it. At most SPARE_BYTES are kept.
SPARE_BYTES = 256 << 20
_spare: list[np.ndarray] = []
_spare_lock = threading.Lock()


def _take_buffer(size: int) -> np.ndarray:
    with _spare_lock:
        for i, buf in enumerate(_spare):
            if len(buf) >= size:
                return _spare.pop(i)
    # Untouched capacity is virtual memory only. Aligned: the segment is written from this
    # memory with direct I/O (LocalStorage), not copied into the page cache.
    return aligned_empty(size)


def _give_back(buffers: list[np.ndarray]) -> None:
    with _spare_lock:
        for buf in buffers:
            if sum(len(b) for b in _spare) + len(buf) <= SPARE_BYTES:
                _spare.append(buf)


class TaskWriter:
    """Routes rows to partitions and flushes them as reserved, written runs of shared objects.

    Each partition's rows go straight from Spark's Arrow batch into that partition's
    StreamEncoder (by row numbers: no per-partition copy, no buffered Arrow data), so the
    data is copied once, into Kafka's bytes, which are stamped with their offsets in place
    and written from that same buffer.
    """

    def __init__(self, opts: WriteOptions, client: CoordinatorClient, member_id: int,
                 member_epoch: int, flush_bytes: int = FLUSH_BYTES,
                 overlap: bool = True) -> None:
        self.opts = opts
        self.flush_bytes = flush_bytes
        self.client = client
        self.storage = Storage.for_url(opts.root, opts.storage_options)
        self.member_id = member_id
        self.member_epoch = member_epoch
        self.segments = SegmentWriter(client, self.storage, member_id, member_epoch, _io,
                                      name="member producer")
        self.router = Router(opts.topic, Partitioner(PartitionCounts(self.storage,
                                                                     self._create_topic)))
        self._encoders: dict[TopicPartition, StreamEncoder] = {}
        self._buffered = 0
        self.records = 0
        self.written: list[tuple[str, int, int, int]] = []
        # what the driver's EndTxn confirms: (topic, partition, base, object, position, size)
        self.runs: list[tuple[str, int, int, str | None, int, int]] = []
        self.overlap = overlap
        self._pending: Future[None] | None = None
        self._in_flight: list[np.ndarray] = []

    def _create_topic(self, topic: str) -> int:
        """A topic named by a row that does not exist: created like Kafka's auto-creation, via
        the coordinator so the creation is in its log; returns its partition count."""
        meta = self.client.create_topic(topic, self.opts.partitions or 1, exist_ok=True)
        return int(meta["partitions"])

    def _encoder(self, tp: TopicPartition) -> StreamEncoder:
        enc = self._encoders.get(tp)
        if enc is None:
            buffer = _take_buffer(self.flush_bytes + self.flush_bytes // 4 + (4 << 20))
            enc = self._encoders[tp] = StreamEncoder(
                producer_id=self.member_id, producer_epoch=self.member_epoch,
                base_sequence=self.segments.next_sequence(tp), transactional=True,
                compression=self.opts.compression, level=self.opts.compression_level,
                max_batch_bytes=self.opts.batch_size, buffer=buffer)
        return enc

    def add(self, batch: pa.RecordBatch) -> None:
        records, groups = self.router.assign(batch)
        if not groups:
            return
        # The batch's columns are taken apart once, for every partition its rows go to.
        prepared = prepare_columns(records, int(time.time() * 1000))
        for tp, rows in groups.items():
            enc = self._encoder(tp)
            before = enc.nbytes
            enc.append(prepared, rows)
            self._buffered += enc.nbytes - before
        if self._buffered >= self.flush_bytes:
            self.flush(wait=not self.overlap)

    def flush(self, wait: bool = True) -> None:
        """Finish the open encoders and reserve their offsets, then write and confirm.

        The writes and the confirm run in the background while the task routes and encodes
        its next rows (storage latency overlaps CPU work); at most one flush is in flight,
        which bounds memory and reports a failed write at the next flush. ``wait`` (the
        task's last flush) returns only once everything is written and confirmed.
        """
        if self._encoders:
            encoded = {tp: enc.finish() for tp, enc in self._encoders.items()}
            buffers = [enc.buffer for enc in self._encoders.values() if enc.buffer is not None]
            self._encoders, self._buffered = {}, 0
            if self.opts.compression is not Codec.NONE:  # the batches were copied out
                _give_back(buffers)
                buffers = []
            reservation = self.segments.reserve(encoded)
            self._wait()
            self._in_flight = buffers
            self._pending = _flusher.submit(self._write, reservation)
        if wait:
            self._wait()

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()
            _give_back(self._in_flight)  # written: the next flush may encode into them
            self._in_flight = []

    def _write(self, reservation: Reservation) -> None:
        """Put one flush (on the flush thread); then it counts as written, to be confirmed
        by the driver's EndTxn."""
        written = self.segments.write(reservation)
        for w, enc in zip(written, reservation.encoded.values(), strict=True):
            self.written.append((w.topic, w.partition, w.base, enc.record_count))
            self.runs.append((w.topic, w.partition, w.base, w.object, w.position, w.size))
            self.records += enc.record_count


# Spark's worker daemon runs gc.collect() after every task of a reused Python worker, and a
# full collection walks every tracked object: with numba and the compiled kernels loaded
# (~150,000 objects) that is ~30 ms per task, ~0.3 s CPU per 10 M-row write in local[2].
# From a worker's second write task on, the objects alive at its start (modules, kernels,
# caches; the last task's garbage is already collected) are moved to the permanent
# generation once, so later collections scan only what tasks allocate.
_gc_frozen = False
_tasks_run = 0


def _freeze_long_lived() -> None:
    global _gc_frozen
    if not _gc_frozen and _tasks_run:
        gc.freeze()
        _gc_frozen = True


def _flush_bytes(ctx: object | None) -> int:
    raw = ctx.getLocalProperty(FLUSH_BYTES_PROPERTY) if ctx else None  # type: ignore[attr-defined]
    try:
        return max(1, int(raw)) if raw else FLUSH_BYTES
    except ValueError:
        return FLUSH_BYTES


def run_task(iterator: Iterator[pa.RecordBatch], opts: WriteOptions, client: CoordinatorClient,
             membership: Membership, member_key: str | None = None) -> TxnlogCommitMessage:
    """Write one task attempt's rows as a member of ``membership``'s transaction.

    ``member_key`` names the member (idempotent add_member); by default the task attempt.
    A streaming batch replayed after a driver restart rejoins the same transaction while
    Spark's task ids start again from 0, so the stream sink passes a key of its own.
    """
    from pyspark import TaskContext

    global _tasks_run
    _freeze_long_lived()
    _tasks_run += 1
    ctx = TaskContext.get()
    task_partition = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    task_attempt_id = ctx.taskAttemptId() if ctx else 0
    member_id, member_epoch = client.add_member(
        membership.transactional_id, membership.producer_id, membership.epoch,
        member_key or f"p{task_partition}-a{attempt}-t{task_attempt_id}")
    beat = _Heartbeat(client, membership.transactional_id, member_id, member_epoch,
                      interval_s=max(0.5, min(10.0, opts.transaction_timeout_ms / 4000)))
    done = False
    try:
        flush_bytes = _flush_bytes(ctx)
        writer = TaskWriter(opts, client, member_id, member_epoch, flush_bytes,
                            overlap=flush_bytes == FLUSH_BYTES)
        if opts.framings:
            from .framing import encode_batches

            iterator = encode_batches(iterator, opts)
        for batch in iterator:
            if beat.error is not None:
                raise beat.error
            writer.add(batch)
        writer.flush()
        done = True
    finally:
        if done:
            _linger(membership.transactional_id, beat)
        else:
            beat.stop()
    return TxnlogCommitMessage(member_id, member_epoch, task_partition, attempt,
                               writer.records, writer.written, writer.runs)
