"""Kafka's producer API in Python: ``TransactionalProducer`` and ``IdempotentProducer``.

Data never passes through the coordinator. ``flush`` encodes each partition's buffered
records into v2 batches (``arrow_codec.encode_arrow``) and hands them to the write path every
producer shares (``segment_writer``, also the Spark tasks'): reserve offsets for all
partitions in one call (sequence-checked, so a retry gets the same offsets), write
``<topic>-<p>/<base>.log`` put-if-absent in parallel, then confirm. A put-if-absent that
finds other bytes means the range was fenced (our transaction was aborted): the producer
is fenced from then on, like Kafka's after ProducerFencedException. Partition choice is
the shared one too (``segment_writer.Partitioner``: murmur2 for keys, sticky for null keys).

Usage mirrors Kafka's::

    with TransactionalProducer(root, "my-txn") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("orders", b"v", key=b"k")
        p.send_offsets_to_transaction({("in", 0): 42}, "group")
        p.commit_transaction()
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pyarrow as pa
from txnlog.log_format import layout
from txnlog.log_format.arrow.arrow_codec import EncodedRecords, encode_arrow
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.storage import Storage

from ..errors import CoordinatorError, InvalidRecordError, InvalidTxnStateError, ProducerFencedError
from ..topic_config import null_key_error
from .coordinator_client import CoordinatorClient
from .segment_writer import PartitionCounts, Partitioner, SegmentWriter, Written

_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_io = ThreadPoolExecutor(max_workers=16, thread_name_prefix="txnlog-producer")


@dataclass(frozen=True)
class RecordMetadata:
    """Where a sent record landed (known once its batch is flushed)."""

    topic: str
    partition: int
    offset: int


class _State(Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    FENCED = "fenced"
    CLOSED = "closed"


def _bytes(v: Any, what: str) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be bytes or str, not {type(v).__name__}")


class _Producer:
    """What both producers share: buffering and state; partitioning and the writes are
    ``segment_writer``'s (the Spark tasks' too)."""

    def __init__(self, root: str, transactional_id: str | None, coordinator: str | None,
                 storage_options: Mapping[str, Any] | None, compression: str,
                 batch_size: int, buffer_records: int, transaction_timeout_ms: int) -> None:
        self.root = root
        self.transactional_id = transactional_id
        self.storage_options = dict(storage_options or {})
        self.storage = Storage.for_url(root, self.storage_options)
        if coordinator is None:
            from .embedded import coordinator_for_root
            coordinator = coordinator_for_root(root, self.storage_options)
        client = CoordinatorClient(coordinator, root=root, storage_options=self.storage_options)
        self._writer = SegmentWriter(client, self.storage, -1, -1, _io)
        self._partitions = PartitionCounts(self.storage)
        self._partitioner = Partitioner(self._partitions)
        self.compression = compression
        self.batch_size = batch_size
        self.buffer_records = buffer_records
        self.transaction_timeout_ms = transaction_timeout_ms
        self._state = _State.UNINITIALIZED
        self._lock = threading.RLock()
        self._buffers: dict[TopicPartition, list[tuple[Any, ...]]] = {}
        self._futures: dict[TopicPartition, list[Future[RecordMetadata]]] = {}
        self._buffered = 0
        # Written but not yet confirmed: EndTxn confirms them (kept until it succeeds, so a
        # retried commit still names them and needs no storage check).
        self._unconfirmed: list[Written] = []

    # The client, producer id and epoch are the write path's: one place holds them (a test
    # may swap the client to point the producer at another coordinator).
    @property
    def client(self) -> CoordinatorClient:
        """The coordinator client every call of this producer goes through."""
        return self._writer.client

    @client.setter
    def client(self, client: CoordinatorClient) -> None:
        self._writer.client = client

    @property
    def producer_id(self) -> int:
        """The producer id (-1 before init_transactions)."""
        return self._writer.producer_id

    @property
    def epoch(self) -> int:
        """The producer epoch, bumped by every EndTxn (-1 before init_transactions)."""
        return self._writer.epoch

    # ------------------------------------------------------------------ helpers
    def _check(self, *allowed: _State) -> None:
        if self._state is _State.FENCED:
            raise ProducerFencedError(
                f"producer {self.producer_id} ({self.transactional_id!r}) was fenced; "
                "create a new producer")
        if self._state not in allowed:
            raise InvalidTxnStateError(
                f"producer is {self._state.value}; this call needs "
                f"{' or '.join(s.value for s in allowed)}")

    def _fenced(self, exc: Exception) -> None:
        self._state = _State.FENCED
        self._drop_buffers(exc)

    def _drop_buffers(self, exc: Exception) -> None:
        for futs in self._futures.values():
            for f in futs:
                if not f.done():
                    f.set_exception(exc)
        self._buffers.clear()
        self._futures.clear()
        self._buffered = 0

    def partitions_for(self, topic: str) -> int:
        """How many partitions ``topic`` has (UnknownTopicOrPartitionError if none)."""
        return self._partitions(topic)

    # --------------------------------------------------------------------- send
    def _send(self, topic: str, value: Any, key: Any, headers: Iterable[tuple[str, Any]] | None,
              partition: int | None, timestamp: int | None) -> Future[RecordMetadata]:
        layout.validate_topic(topic)
        k, v = _bytes(key, "key"), _bytes(value, "value")
        hs = [(str(hk), _bytes(hv, "header value")) for hk, hv in (headers or [])]
        if k is None and self._partitions.compacted(topic):
            raise InvalidRecordError(null_key_error(topic, partition))
        with self._lock:
            p = self._partitioner.choose(topic, k, partition)
            fut: Future[RecordMetadata] = Future()
            self._buffers.setdefault((topic, p), []).append((k, v, hs, timestamp))
            self._futures.setdefault((topic, p), []).append(fut)
            self._buffered += 1
            if self._buffered >= self.buffer_records:
                self._flush()
        return fut

    def _encode(self, rows: list[tuple[Any, ...]], seq: int) -> EncodedRecords:
        cols: dict[str, pa.Array] = {
            "value": pa.array([r[1] for r in rows], pa.binary()),
            "key": pa.array([r[0] for r in rows], pa.binary()),
            "timestamp": pa.array([r[3] for r in rows], pa.int64()),
        }
        if any(r[2] for r in rows):
            cols["headers"] = pa.array([[{"key": hk, "value": hv} for hk, hv in r[2]]
                                        for r in rows], _HEADER_TYPE)
        return encode_arrow(pa.RecordBatch.from_pydict(cols), producer_id=self.producer_id,
                            producer_epoch=self.epoch, base_sequence=seq,
                            transactional=self.transactional_id is not None,
                            compression=self.compression, max_batch_bytes=self.batch_size)

    def _flush(self, wait_stable: bool = False, confirm: bool = True) -> None:
        """Reserve, write put-if-absent, confirm everything buffered (caller holds the lock).

        ``confirm=False`` (commit): the written ranges go to ``_unconfirmed`` and are
        confirmed by EndTxn itself, one RPC less per transaction.
        """
        if not self._buffers:
            return
        futures, w = self._futures, self._writer
        encoded = {tp: self._encode(rows, w.next_sequence(tp))
                   for tp, rows in self._buffers.items()}
        try:
            written = w.write(w.reserve(encoded))
        except ProducerFencedError as exc:
            self._fenced(exc)
            raise
        if confirm:
            w.confirm(written, wait_stable=wait_stable)
        else:
            self._unconfirmed += written
        self._buffers, self._futures, self._buffered = {}, {}, 0
        for w in written:
            for i, f in enumerate(futures[(w.topic, w.partition)]):
                f.set_result(RecordMetadata(w.topic, w.partition, w.base + i))
        self._partitioner.new_batch()

    def close(self) -> None:
        """No further calls; buffered records that were not flushed are not written."""
        self._state = _State.CLOSED

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TransactionalProducer(_Producer):
    """Kafka's transactional producer: every send belongs to the open transaction."""

    def __init__(self, root: str, transactional_id: str, coordinator: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, compression: str = "none",
                 batch_size: int = 1 << 20, buffer_records: int = 100_000,
                 transaction_timeout_ms: int = 60_000) -> None:
        if not transactional_id:
            raise ValueError("a TransactionalProducer needs a transactional_id")
        super().__init__(root, transactional_id, coordinator, storage_options, compression,
                         batch_size, buffer_records, transaction_timeout_ms)

    def init_transactions(self) -> None:
        """Get (producer id, epoch); fences older instances and finishes what they left."""
        self._check(_State.UNINITIALIZED, _State.READY)
        self._writer.start_epoch(*self.client.init_producer_id(
            self.transactional_id, self.transaction_timeout_ms))
        self._unconfirmed = []
        self._state = _State.READY

    def begin_transaction(self) -> None:
        """Open a transaction (local only: the coordinator learns of it at the first write)."""
        with self._lock:
            self._check(_State.READY)
            self._state = _State.IN_TRANSACTION

    def send(self, topic: str, value: Any, key: Any = None,
             headers: Iterable[tuple[str, Any]] | None = None, partition: int | None = None,
             timestamp: int | None = None) -> Future[RecordMetadata]:
        """Buffer one record; its offset is known after flush/commit (the returned future)."""
        self._check(_State.IN_TRANSACTION)
        return self._send(topic, value, key, headers, partition, timestamp)

    def flush(self) -> None:
        """Write everything buffered (part of the open transaction, invisible until commit);
        the futures of the sent records then hold their offsets."""
        with self._lock:
            self._check(_State.IN_TRANSACTION, _State.READY)
            self._flush()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                    group_id: str) -> None:
        """Commit a consumer group's offsets atomically with this transaction."""
        with self._lock:
            self._check(_State.IN_TRANSACTION)
            try:
                self.client.add_offsets(self.transactional_id, self.producer_id, self.epoch,
                                        group_id, dict(offsets))
            except ProducerFencedError as exc:
                self._fenced(exc)
                raise

    def heartbeat(self) -> None:
        """Keep a long transaction alive between sends."""
        self._check(_State.IN_TRANSACTION)
        self.client.heartbeat(self.transactional_id, self.producer_id, self.epoch)

    def _end(self, commit: bool) -> None:
        try:
            r = self.client.end_txn(self.transactional_id, self.producer_id, self.epoch, commit,
                                    written=self._unconfirmed)
        except ProducerFencedError as exc:
            self._fenced(exc)
            raise
        self._unconfirmed = []
        # the next transaction's (pid, epoch); its sequences start at 0 (KIP-890)
        self._writer.start_epoch(r["producer_id"], r["epoch"])
        self._state = _State.READY

    def commit_transaction(self) -> None:
        """Flush, then commit; returns once readers can see the whole transaction."""
        with self._lock:
            self._check(_State.IN_TRANSACTION)
            self._flush(confirm=False)
            self._end(True)

    def abort_transaction(self) -> None:
        """Drop unsent records and abort everything sent in this transaction."""
        with self._lock:
            self._check(_State.IN_TRANSACTION)
            self._drop_buffers(InvalidTxnStateError("the transaction was aborted"))
            self._end(False)

    def close(self) -> None:
        """Abort an open transaction (its records were never committed), then close."""
        with self._lock:
            if self._state is _State.IN_TRANSACTION:
                # if this fails, the coordinator aborts it after transaction.timeout.ms
                with contextlib.suppress(CoordinatorError):
                    self.abort_transaction()
            super().close()


class IdempotentProducer(_Producer):
    """Kafka's idempotent producer: no transactions; flushed data is visible at once."""

    def __init__(self, root: str, coordinator: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, compression: str = "none",
                 batch_size: int = 1 << 20, buffer_records: int = 100_000) -> None:
        super().__init__(root, None, coordinator, storage_options, compression, batch_size,
                         buffer_records, 60_000)
        self._writer.start_epoch(*self.client.init_producer_id(None))
        self._state = _State.READY
        self._unpublished = False  # written by a full buffer, not yet waited for

    def _flush(self, wait_stable: bool = False, confirm: bool = True) -> None:
        self._unpublished = self._unpublished or (bool(self._buffers) and not wait_stable)
        super()._flush(wait_stable, confirm)

    def send(self, topic: str, value: Any, key: Any = None,
             headers: Iterable[tuple[str, Any]] | None = None, partition: int | None = None,
             timestamp: int | None = None) -> Future[RecordMetadata]:
        """Buffer one record; flush writes it (the returned future then holds its offset)."""
        self._check(_State.READY)
        return self._send(topic, value, key, headers, partition, timestamp)

    def flush(self) -> None:
        """Write everything buffered; returns once the stable snapshot includes it, and
        everything sent before (a full buffer was written by ``send`` itself, without
        waiting: flush then has nothing left to write, but still waits)."""
        with self._lock:
            self._check(_State.READY)
            if self._buffers:
                self._flush(wait_stable=True)
            elif self._unpublished:
                self._writer.confirm([], wait_stable=True)
            self._unpublished = False

    def close(self) -> None:
        """Flush what is buffered, then close."""
        with self._lock:
            if self._state is _State.READY and self._buffers:
                self.flush()
            super().close()
