"""Kafka's producer API in Python: ``TransactionalProducer`` and ``IdempotentProducer``.

Data never passes through the coordinator. ``flush`` encodes each partition's buffered
records into v2 batches (``arrow_codec.encode_arrow``), reserves offsets for all partitions
in one call (sequence-checked, so a retry gets the same offsets), writes
``<topic>-<p>/<base>.log`` put-if-absent in parallel, then confirms. A put-if-absent that
finds other bytes means the range was fenced (our transaction was aborted): the producer
is fenced from then on, like Kafka's after ProducerFencedException.

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
import random
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pyarrow as pa
from txnlog.log_format import layout, topics
from txnlog.log_format.arrow_codec import encode_arrow
from txnlog.log_format.partitioner import partition_for_key
from txnlog.log_format.storage import Storage

from .client import CoordinatorClient
from .errors import (
    CoordinatorError,
    InvalidTxnStateError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)

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
    """What both producers share: buffering, partitioning, reserve/write/confirm."""

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
        self.client = CoordinatorClient(coordinator)
        self.compression = compression
        self.batch_size = batch_size
        self.buffer_records = buffer_records
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = -1
        self.epoch = -1
        self._state = _State.UNINITIALIZED
        self._lock = threading.RLock()
        self._buffers: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
        self._futures: dict[tuple[str, int], list[Future[RecordMetadata]]] = {}
        self._buffered = 0
        self._seq: dict[tuple[str, int], int] = {}
        self._partitions: dict[str, int] = {}
        self._sticky: dict[str, int] = {}
        # Written but not yet confirmed: EndTxn confirms them (kept until it succeeds, so a
        # retried commit still names them and needs no storage check).
        self._unconfirmed: list[tuple[str, int, int]] = []

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
        n = self._partitions.get(topic)
        if n is None:
            try:
                n = topics.read_topic(self.storage, topic).partitions
            except topics.UnknownTopicError as exc:
                raise UnknownTopicOrPartitionError(str(exc)) from None
            self._partitions[topic] = n
        return n

    def _choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        n = self.partitions_for(topic)
        if partition is not None:
            if not 0 <= partition < n:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has {n} partitions; no partition {partition}")
            return partition
        if key is not None:
            return partition_for_key(key, n)
        # Kafka's sticky partitioner: one partition per batch for null keys.
        if topic not in self._sticky:
            self._sticky[topic] = random.randrange(n)
        return self._sticky[topic]

    # --------------------------------------------------------------------- send
    def _send(self, topic: str, value: Any, key: Any, headers: Iterable[tuple[str, Any]] | None,
              partition: int | None, timestamp: int | None) -> Future[RecordMetadata]:
        layout.validate_topic(topic)
        k, v = _bytes(key, "key"), _bytes(value, "value")
        hs = [(str(hk), _bytes(hv, "header value")) for hk, hv in (headers or [])]
        with self._lock:
            p = self._choose_partition(topic, k, partition)
            fut: Future[RecordMetadata] = Future()
            self._buffers.setdefault((topic, p), []).append((k, v, hs, timestamp))
            self._futures.setdefault((topic, p), []).append(fut)
            self._buffered += 1
            if self._buffered >= self.buffer_records:
                self._flush()
        return fut

    def _encode(self, rows: list[tuple[Any, ...]], seq: int) -> Any:
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
        buffers, futures = self._buffers, self._futures
        encoded = {tp: self._encode(rows, self._seq.get(tp, 0)) for tp, rows in buffers.items()}
        try:
            bases = self.client.reserve(
                self.producer_id, self.epoch,
                {tp: (self._seq.get(tp, 0), enc.record_count) for tp, enc in encoded.items()})
        except ProducerFencedError as exc:
            self._fenced(exc)
            raise
        # Offsets are ours from here: sequence numbers move on even if a write fails, so a
        # retry of the same data must go through a new reserve (the old range gets fenced).
        for tp, enc in encoded.items():
            self._seq[tp] = self._seq.get(tp, 0) + enc.record_count

        def write(tp: tuple[str, int]) -> bool:
            data = encoded[tp].with_base_offset(bases[tp])
            return self.storage.put_if_absent(layout.segment_path(tp[0], tp[1], bases[tp]), data)

        results = dict(zip(encoded, _io.map(write, list(encoded)), strict=True))
        lost = [tp for tp, ok in results.items() if not ok]
        if lost:
            exc = ProducerFencedError(
                f"offsets reserved for producer {self.producer_id} in {lost} were fenced "
                "(the transaction was aborted, e.g. after a timeout or a newer instance)")
            self._fenced(exc)
            raise exc
        written = [(t, p, bases[(t, p)]) for t, p in encoded]
        if confirm:
            self.client.confirm(self.producer_id, self.epoch, written, wait_stable=wait_stable)
        else:
            self._unconfirmed += written
        self._buffers, self._futures, self._buffered = {}, {}, 0
        for tp, futs in futures.items():
            for i, f in enumerate(futs):
                f.set_result(RecordMetadata(tp[0], tp[1], bases[tp] + i))
        self._sticky.clear()

    def close(self) -> None:
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
        self.producer_id, self.epoch = self.client.init_producer_id(
            self.transactional_id, self.transaction_timeout_ms)
        self._seq.clear()
        self._unconfirmed = []
        self._state = _State.READY

    def begin_transaction(self) -> None:
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
        with self._lock:
            self._check(_State.IN_TRANSACTION, _State.READY)
            self._flush()

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int],
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
        self.producer_id, self.epoch = r["producer_id"], r["epoch"]
        self._seq.clear()  # a new epoch starts its sequences at 0 (KIP-890)
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
        self.producer_id, self.epoch = self.client.init_producer_id(None)
        self._state = _State.READY

    def send(self, topic: str, value: Any, key: Any = None,
             headers: Iterable[tuple[str, Any]] | None = None, partition: int | None = None,
             timestamp: int | None = None) -> Future[RecordMetadata]:
        self._check(_State.READY)
        return self._send(topic, value, key, headers, partition, timestamp)

    def flush(self) -> None:
        """Write everything buffered; returns once the stable snapshot includes it."""
        with self._lock:
            self._check(_State.READY)
            self._flush(wait_stable=True)

    def close(self) -> None:
        with self._lock:
            if self._state is _State.READY and self._buffers:
                self.flush()
            super().close()
