"""Compacting a partition's closed segments: Kafka's log cleaner, the bytes.

A topic with ``cleanup.policy=compact`` keeps the last record per key. Kafka's cleaner
(``LogCleaner``/``Cleaner``) does it in two passes, and so does this module:

1. **The offset map** (``buildOffsetMap``): key -> offset of its last record, over the
   *dirty* section ``[first_dirty, upper)`` (what was not cleaned before), skipping aborted
   transactions; ``latest_offset`` is the last offset the map covered.
2. **Cleaning** (``cleanSegments``/``cleanInto``/``MemoryRecords.filterTo``): every closed
   segment from the log start to ``upper``, grouped by ``segment.bytes`` of input (Kafka's
   ``groupSegmentsBySize``), is rewritten keeping, batch by batch:

   - a record past the map's latest offset, or whose offset is its key's last; a record
     without a key is dropped (Kafka counts it as invalid);
   - a tombstone (null value) until its batch's *delete horizon* has passed (KIP-534: the
     first cleaning that keeps a tombstone rewrites its batch with ``hasDeleteHorizonMs`` and
     baseTimestamp = now + ``delete.retention.ms``; a later cleaning after that drops it);
   - transactional data per ``CleanedTransactionMetadata``: batches of aborted transactions
     are removed; an ABORT marker stays (with its ``.txnindex`` entry) while this pass saw
     data of its transaction, a COMMIT marker stays while this pass saw batches of its
     transaction; a marker whose transaction has no data left gets a delete horizon and is
     removed once that has passed;
   - the last batch of each producer still active (Kafka's ``lastRecordsOfActiveProducers``)
     as an empty batch (61 bytes, no records) when all its records go, so its last sequence
     survives.

Offsets are never renumbered: a batch whose records all stay is copied byte for byte; one
that loses records is rebuilt with its base offset and its lastOffsetDelta kept (gaps, as
Kafka's compacted segments have), its producer fields, codec and timestamp type.

Everything is a function of its inputs and ``now_ms``: the coordinator logs those in its
plan, so a restart rebuilds the same bytes (put-if-absent succeeds). No I/O here.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..codec.batch_header import LOG_APPEND_TIME, NO_TIMESTAMP, BatchHeader
from ..codec.control import ControlType, parse_control_key
from ..codec.indexes import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    AbortedTxn,
    decode_txn_index,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from ..codec.records import Record, decode_batch, encode_batch, iter_batches
from ..errors import CorruptBatchError, CorruptIndexError
from ..planted_bugs import enabled as planted_bug_enabled
from .segment_merge import MergedSegment, sparse_entries

INT32_MAX = 0x7FFFFFFF
# Kafka's defaults (LogConfig / TopicConfig)
DEFAULT_DELETE_RETENTION_MS = 86_400_000
DEFAULT_MIN_CLEANABLE_DIRTY_RATIO = 0.5
DEFAULT_MIN_COMPACTION_LAG_MS = 0
DEFAULT_MAX_COMPACTION_LAG_MS = (1 << 63) - 1


@dataclass(frozen=True)
class CleanerInput:
    """One closed segment to clean: the offsets it covers, its bytes, its ``.txnindex``."""

    base_offset: int
    end_offset: int
    data: bytes | memoryview
    txnindex: bytes | None = None
    source: str = ""


@dataclass(frozen=True)
class ProducerLast:
    """What Kafka's producer state says of an active producer in this partition: the last
    offset of its last data batch (None: its last batch is a marker) and its epoch."""

    last_data_offset: int | None
    epoch: int


@dataclass
class CleanerStats:
    """Counts of one cleaning (Kafka's CleanerStats, the parts worth logging)."""

    map_keys: int = 0
    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    batches_rewritten: int = 0
    empty_batches_kept: int = 0
    invalid_records: int = 0


@dataclass(frozen=True)
class CleanedLog:
    """What a cleaning writes: one cleaned segment per group, in offset order."""

    segments: list[MergedSegment]
    upper: int  # the new first dirty offset: everything below it is clean
    stats: CleanerStats = field(default_factory=CleanerStats)


@dataclass
class _AbortedTxnState:
    txn: AbortedTxn
    observed: bool = False  # a batch of it was traversed in this pass


class CleanedTransactionMetadata:
    """Kafka's CleanedTransactionMetadata: which transactions are aborted or ongoing as the
    cleaner walks the log, and so which batches are discarded and which markers may go."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._queue = [(t.first_offset, t.producer_id, t) for t in aborted]
        heapq.heapify(self._queue)
        self.ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self.ongoing_committed: set[int] = set()
        self.cleaned_index: list[AbortedTxn] = []  # entries of retained ABORT markers

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._queue and self._queue[0][0] <= offset:
            _, pid, txn = heapq.heappop(self._queue)
            self.ongoing_aborted.setdefault(pid, _AbortedTxnState(txn))

    def on_control_batch(self, header: BatchHeader, records: Sequence[Record]) -> bool:
        """True: the marker may be discarded (its transaction has no data left here)."""
        self._consume_aborted_up_to(header.last_offset)
        if not records:
            return True  # an empty control batch was already cleaned
        _, control_type = parse_control_key(records[0].key)
        pid = header.producer_id
        if control_type == ControlType.ABORT:
            state = self.ongoing_aborted.pop(pid, None)
            if state is not None and state.observed:
                self.cleaned_index.append(state.txn)
                return False
            return True
        if control_type == ControlType.COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch(self, header: BatchHeader) -> bool:
        """True: the data batch belongs to an aborted transaction (discard it)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self.ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.observed = True
            return True
        self.ongoing_committed.add(header.producer_id)
        return False


def _batches(inp: CleanerInput, verify_crc: bool) -> list[BatchHeader]:
    headers = list(iter_batches(inp.data, source=inp.source or None, verify_crc=verify_crc))
    if headers and (headers[0].base_offset < inp.base_offset
                    or headers[-1].last_offset >= inp.end_offset):
        raise CorruptBatchError(
            f"batches span offsets [{headers[0].base_offset}, {headers[-1].last_offset}] "
            f"outside the segment's range [{inp.base_offset}, {inp.end_offset})",
            source=inp.source or None)
    return headers


def _aborted_in(inputs: Sequence[CleanerInput], beyond: Iterable[AbortedTxn]
                ) -> list[AbortedTxn]:
    """The aborted transactions of the inputs' ``.txnindex`` objects, plus those whose
    marker lies beyond them (``beyond``), once each, in marker order."""
    found: dict[tuple[int, int], AbortedTxn] = {}
    for inp in inputs:
        if inp.txnindex:
            for e in decode_txn_index(inp.txnindex, source=inp.source or None):
                if not inp.base_offset <= e.last_offset < inp.end_offset:
                    raise CorruptIndexError(
                        f"{inp.source}: aborted transaction marker at {e.last_offset} lies "
                        f"outside the segment's range [{inp.base_offset}, {inp.end_offset})")
                found[(e.producer_id, e.first_offset)] = e
    for e in beyond:
        found.setdefault((e.producer_id, e.first_offset), e)
    return sorted(found.values(), key=lambda e: e.last_offset)


def build_offset_map(inputs: Sequence[CleanerInput], first_dirty: int,
                     aborted: Sequence[AbortedTxn], *, verify_crc: bool = True
                     ) -> tuple[dict[bytes, int], int]:
    """Kafka's buildOffsetMap over ``[first_dirty, upper)``: the last offset of every key
    in committed (or non-transactional) data, and the last offset covered (-1: none)."""
    meta = CleanedTransactionMetadata(e for e in aborted if e.last_offset >= first_dirty)
    unsafe = planted_bug_enabled("compact_ignore_aborted")  # the chaos self-test's switch
    offsets: dict[bytes, int] = {}
    latest = -1
    for inp in inputs:
        if inp.end_offset <= first_dirty:
            continue
        for h in _batches(inp, verify_crc):
            if h.last_offset < first_dirty:
                continue
            if h.is_control:
                meta.on_control_batch(h, decode_batch(inp.data, h.position,
                                                      verify_crc=False).records)
            elif not meta.on_batch(h) or unsafe:
                for rec in decode_batch(inp.data, h.position, verify_crc=False).records:
                    if rec.key is not None and rec.offset >= first_dirty:
                        offsets[rec.key] = rec.offset
            latest = max(latest, h.last_offset)
    return offsets, latest


def group_by_size(inputs: Sequence[CleanerInput], segment_bytes: int
                  ) -> list[list[CleanerInput]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose total size stays within
    ``segment_bytes`` and whose offsets fit the 32-bit relative offsets of an index."""
    groups: list[list[CleanerInput]] = []
    for inp in inputs:
        if groups:
            group = groups[-1]
            size = sum(len(g.data) for g in group)
            if (size + len(inp.data) <= segment_bytes
                    and inp.end_offset - 1 - group[0].base_offset <= INT32_MAX):
                group.append(inp)
                continue
        groups.append([inp])
    return groups


def _is_last_of_producer(h: BatchHeader, active: Mapping[int, ProducerLast]) -> bool:
    last = active.get(h.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return h.last_offset == last.last_data_offset
    return h.is_control and h.producer_epoch == last.epoch


def _rebuild(h: BatchHeader, records: list[Record], horizon: int | None) -> bytes:
    """The batch ``h`` holding only ``records`` (MemoryRecords.buildRetainedRecordsInto):
    base offset, lastOffsetDelta, producer fields, codec, timestamp type kept."""
    return encode_batch(
        records, base_offset=h.base_offset, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, control=h.is_control, compression=h.compression,
        timestamp_type=h.timestamp_type, partition_leader_epoch=h.partition_leader_epoch,
        max_timestamp=h.max_timestamp if h.timestamp_type == LOG_APPEND_TIME else None,
        last_offset_delta=h.last_offset_delta, delete_horizon_ms=horizon)


def _empty(h: BatchHeader) -> bytes:
    """DefaultRecordBatch.writeEmptyHeader: the header alone, keeping the producer's last
    sequence (no records, no compression, maxTimestamp kept)."""
    return encode_batch(
        [], base_offset=h.base_offset, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, control=h.is_control,
        timestamp_type=h.timestamp_type, partition_leader_epoch=h.partition_leader_epoch,
        max_timestamp=h.max_timestamp, last_offset_delta=h.last_offset_delta)


def clean_log(inputs: Sequence[CleanerInput], *, first_dirty: int,
              aborted_beyond: Iterable[AbortedTxn] = (),
              active_producers: Mapping[int, ProducerLast] | None = None,
              now_ms: int, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
              segment_bytes: int = 1 << 30,
              index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
              verify_crc: bool = True) -> CleanedLog:
    """Clean ``inputs`` — every closed segment from the log start, contiguous, ascending,
    up to the first uncleanable offset — with Kafka's rules (see the module docstring).

    ``first_dirty``: where the last cleaning stopped (the log start if never). Aborted
    transactions come from the inputs' ``.txnindex`` objects plus ``aborted_beyond``
    (transactions with data here whose ABORT marker lies later). Each output covers the
    same offsets as its group of inputs.
    """
    if not inputs:
        raise ValueError("a cleaning needs at least one segment")
    expect = inputs[0].base_offset
    for inp in inputs:
        if inp.base_offset != expect or inp.end_offset < inp.base_offset:
            raise CorruptBatchError(f"segments to clean are not adjacent: expected one at "
                                    f"{expect}, got [{inp.base_offset}, {inp.end_offset})",
                                    source=inp.source or None)
        expect = inp.end_offset
    active = active_producers or {}
    aborted = _aborted_in(inputs, aborted_beyond)
    key_offsets, latest = build_offset_map(inputs, first_dirty, aborted,
                                           verify_crc=verify_crc)
    stats = CleanerStats(map_keys=len(key_offsets))
    meta = CleanedTransactionMetadata(aborted)
    out: list[MergedSegment] = []
    for group in group_by_size(inputs, segment_bytes):
        meta.cleaned_index = []
        pieces: list[bytes | memoryview] = []
        positions: list[int] = []
        lasts: list[int] = []
        max_tss: list[int] = []
        position = 0
        for inp in group:
            stats.bytes_read += len(inp.data)
            for h in _batches(inp, verify_crc=False):
                stats.batches_read += 1
                raw = memoryview(inp.data)[h.position:h.position + h.size]
                decoded = decode_batch(inp.data, h.position, verify_crc=False).records \
                    if h.is_control or h.records_count else []
                if h.is_control:
                    can_discard = meta.on_control_batch(h, decoded)
                    horizon = h.delete_horizon_ms
                    discard_records = (can_discard and horizon is not None
                                       and horizon <= now_ms)
                else:
                    can_discard = meta.on_batch(h)
                    discard_records = can_discard
                marker_of_empty_txn = can_discard and h.is_control
                retain_empty = h.has_producer_id and _is_last_of_producer(h, active)
                kept: list[Record] = []
                if not h.is_control:
                    stats.records_read += len(decoded)
                if not discard_records:
                    if h.is_control:
                        kept = list(decoded)
                    else:
                        for rec in decoded:
                            if rec.offset > latest:
                                kept.append(rec)
                            elif rec.key is None:
                                stats.invalid_records += 1
                            elif rec.offset >= key_offsets.get(rec.key, -1) and (
                                    rec.value is not None or h.delete_horizon_ms is None
                                    or now_ms < h.delete_horizon_ms):
                                kept.append(rec)
                if not h.is_control:
                    stats.records_kept += len(kept)
                batch: bytes | memoryview | None
                if kept:
                    tombstones = not h.is_control and any(r.value is None for r in kept)
                    set_horizon = (tombstones or marker_of_empty_txn) \
                        and not h.has_delete_horizon
                    if len(kept) == len(decoded) and not set_horizon:
                        batch = raw
                    else:
                        batch = _rebuild(h, kept, now_ms + delete_retention_ms
                                         if set_horizon else h.delete_horizon_ms)
                        stats.batches_rewritten += 1
                elif retain_empty:
                    batch = _empty(h) if h.records_count or h.has_delete_horizon else raw
                    stats.empty_batches_kept += 1
                else:
                    batch = None
                if batch is None:
                    continue
                positions.append(position)
                lasts.append(h.last_offset)
                max_tss.append(_max_timestamp(batch))
                pieces.append(batch)
                position += len(batch)
        log = b"".join(pieces)
        stats.bytes_written += len(log)
        base = group[0].base_offset
        offsets, times, max_ts = sparse_entries(
            [np.asarray(positions, dtype=np.int64)] if positions else [],
            [np.asarray(lasts, dtype=np.int64)] if lasts else [],
            [np.asarray(max_tss, dtype=np.int64)] if max_tss else [],
            base, index_interval_bytes)
        out.append(MergedSegment(
            base_offset=base, end_offset=group[-1].end_offset, log=log,
            index=encode_offset_index(offsets, base), timeindex=encode_time_index(times, base),
            txnindex=encode_txn_index(meta.cleaned_index) if meta.cleaned_index else None,
            max_timestamp=max_ts if positions else NO_TIMESTAMP, batches=len(positions)))
    return CleanedLog(out, expect, stats)


def _max_timestamp(batch: bytes | memoryview) -> int:
    return int.from_bytes(bytes(batch[35:43]), "big", signed=True)
