"""Merging a run of objects into one Kafka segment: the bytes.

Object storage has no append, so every commit leaves small objects; below the LSO they are
merged into bigger ones and, finally, into Kafka segments. What a merge produces is fixed by
its inputs alone — batches copied byte for byte in offset order (offsets, CRCs, control
batches and aborted batches exactly as they were), and the indexes Kafka keeps beside a
segment:

- ``.index``/``.timeindex``: Kafka's sparse entries (one per ``index.interval.bytes`` of
  log, the time entry forced for the final maximum on close, as ``LogSegment`` does);
- ``.txnindex``: the inputs' aborted-transaction entries concatenated in order (each lists
  the transactions whose ABORT marker lies in it, so the union is the merged segment's).

A restarted coordinator merging the same inputs therefore writes the same bytes, and its
put-if-absent succeeds (DESIGN.md 3). This module only computes; where the objects live is
``manifest``'s and the coordinator's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..arrow.arrow_scan import scan_batches
from ..codec.batch_header import NO_TIMESTAMP
from ..codec.indexes import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    OffsetEntry,
    TimeEntry,
    decode_txn_index,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from ..errors import CorruptBatchError, CorruptIndexError


@dataclass(frozen=True)
class MergeInput:
    """One object to merge: the offsets it covers, its bytes, its ``.txnindex`` (or None)."""

    base_offset: int
    end_offset: int  # the next object's base: what this one resolves, data or not
    data: bytes | memoryview
    txnindex: bytes | None = None
    source: str = ""


@dataclass(frozen=True)
class MergedSegment:
    """What a merge writes: the segment and its three indexes (``txnindex`` None: no
    aborted transaction ends in it, so no object is written, as Kafka leaves it empty)."""

    base_offset: int
    end_offset: int
    log: bytes
    index: bytes
    timeindex: bytes
    txnindex: bytes | None
    max_timestamp: int
    batches: int


def _sparse_entries(positions: list[np.ndarray], lasts: list[np.ndarray],
                    max_tss: list[np.ndarray], base: int, interval: int
                    ) -> tuple[list[OffsetEntry], list[TimeEntry], int]:
    """Kafka's ``.index``/``.timeindex`` entries for batches at ``positions`` (what
    ``indexes.build_indexes`` computes batch by batch, here with one step per entry, so a
    segment of millions of one-record batches does not hold the GIL batch by batch):
    an entry at every batch more than ``interval`` bytes after the previous entry, the time
    entry the largest timestamp so far (with the last offset of the batch that first had
    it), and one forced for the final maximum."""
    if not positions:
        return [], [], NO_TIMESTAMP
    pos = np.concatenate(positions)
    last = np.concatenate(lasts)
    mts = np.concatenate(max_tss)
    cummax = np.maximum.accumulate(mts)
    before = np.concatenate(([NO_TIMESTAMP], cummax[:-1]))
    rising = np.where(mts > before, np.arange(len(mts)), 0)
    at_max = np.maximum.accumulate(rising)  # the batch that first reached the max so far
    offsets: list[OffsetEntry] = []
    times: list[TimeEntry] = []
    last_time_ts = NO_TIMESTAMP
    i = int(np.searchsorted(pos, interval, side="right"))
    while i < len(pos):
        offsets.append(OffsetEntry(int(last[i]), int(pos[i])))
        if cummax[i] > last_time_ts:
            last_time_ts = int(cummax[i])
            times.append(TimeEntry(last_time_ts, int(last[at_max[i]]) if last_time_ts !=
                                   NO_TIMESTAMP else base))
        i = int(np.searchsorted(pos, pos[i] + interval, side="right"))
    max_ts = int(cummax[-1])
    if max_ts > last_time_ts:
        times.append(TimeEntry(max_ts, int(last[at_max[-1]])))
    return offsets, times, max_ts


def merge_segment(inputs: Sequence[MergeInput], *,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                  verify_crc: bool = True) -> MergedSegment:
    """Concatenate ``inputs`` (contiguous, ascending) into one segment with its indexes.

    Every input is checked before its bytes are trusted: whole batches (CRCs verified), all
    offsets inside ``[base_offset, end_offset)``, inputs adjacent. A violation raises
    ``CorruptBatchError``/``CorruptIndexError`` naming the object: a merge never hides bad
    bytes inside a bigger object.
    """
    if not inputs:
        raise ValueError("a merge needs at least one input")
    base = inputs[0].base_offset
    pieces: list[bytes | memoryview] = []
    positions: list[np.ndarray] = []
    lasts: list[np.ndarray] = []
    max_tss: list[np.ndarray] = []
    aborted = []
    position = 0
    expect = base
    for inp in inputs:
        if inp.base_offset != expect:
            raise CorruptBatchError(
                f"merge inputs are not adjacent: expected an object at {expect}, got "
                f"{inp.base_offset}", source=inp.source or None)
        if inp.end_offset < inp.base_offset:
            raise ValueError(f"{inp.source}: end {inp.end_offset} < base {inp.base_offset}")
        expect = inp.end_offset
        if len(inp.data):
            index = scan_batches(inp.data, source=inp.source or None, verify_crc=verify_crc)
            first = index["base_offset"]
            last = first + index["last_offset_delta"]
            if len(index) and (int(first[0]) < inp.base_offset
                               or int(last[-1]) >= inp.end_offset):
                raise CorruptBatchError(
                    f"batches span offsets [{int(first[0])}, {int(last[-1])}] outside the "
                    f"object's range [{inp.base_offset}, {inp.end_offset})",
                    source=inp.source or None)
            positions.append(index["position"] + position)
            lasts.append(last)
            max_tss.append(index["max_timestamp"])
            pieces.append(inp.data)
            position += len(inp.data)
        if inp.txnindex:
            entries = decode_txn_index(inp.txnindex, source=inp.source or None)
            for e in entries:
                if not inp.base_offset <= e.last_offset < inp.end_offset:
                    raise CorruptIndexError(
                        f"{inp.source}: aborted transaction marker at {e.last_offset} lies "
                        f"outside the object's range [{inp.base_offset}, {inp.end_offset})")
            aborted.extend(entries)
    offsets, times, max_ts = _sparse_entries(positions, lasts, max_tss, base,
                                             index_interval_bytes)
    batches = sum(len(p) for p in positions)
    log = b"".join(pieces)
    return MergedSegment(
        base_offset=base, end_offset=expect, log=log,
        index=encode_offset_index(offsets, base),
        timeindex=encode_time_index(times, base),
        txnindex=encode_txn_index(aborted) if aborted else None,
        max_timestamp=max_ts, batches=batches)


# The same entries for the log cleaner (``log_cleaner``), whose output is built batch by batch.
sparse_entries = _sparse_entries
