"""Kafka's per-segment index files: ``.index``, ``.timeindex`` and ``.txnindex``.

``.index`` (OffsetIndex): 8-byte entries ``int32 relativeOffset, int32 position``.
``.timeindex`` (TimeIndex): 12-byte entries ``int64 timestamp, int32 relativeOffset``.
Both are sparse (one entry per ``index.interval.bytes`` of log) and may be read from a
preallocated file with trailing zero entries, so readers stop at the first entry whose
relative offset does not grow (entry 0 may be 0).
``.txnindex`` (TransactionIndex): 34-byte ``AbortedTxn`` entries, version 0, one per aborted
transaction whose ABORT marker is in the segment.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import CorruptIndexError
from .batch_header import NO_TIMESTAMP

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")
OFFSET_ENTRY_SIZE = OFFSET_ENTRY.size  # 8
TIME_ENTRY_SIZE = TIME_ENTRY.size  # 12
TXN_ENTRY_SIZE = TXN_ENTRY.size  # 34
TXN_INDEX_VERSION = 0
DEFAULT_INDEX_INTERVAL_BYTES = 4096
INT32_MAX = 0x7FFFFFFF

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES", "AbortedTxn", "OffsetEntry", "TimeEntry",
    "build_indexes", "collect_aborted_txns", "decode_offset_index", "decode_time_index",
    "decode_txn_index", "encode_offset_index", "encode_time_index", "encode_txn_index",
    "find_offset_by_timestamp", "lookup_offset", "lookup_timestamp",
]


# --------------------------------------------------------------------------- .txnindex

@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, its offset span, and the LSO after the abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """The bytes of a ``.txnindex``; lastOffset must strictly increase, as Kafka requires."""
    out = bytearray()
    last = None
    for e in entries:
        if e.first_offset > e.last_offset:
            raise ValueError(f"aborted txn first offset {e.first_offset} is after its marker "
                             f"at {e.last_offset}")
        if last is not None and e.last_offset <= last:
            raise ValueError(f"aborted txn last offsets must increase: {e.last_offset} after "
                             f"{last}")
        last = e.last_offset
        out += TXN_ENTRY.pack(TXN_INDEX_VERSION, e.producer_id, e.first_offset, e.last_offset,
                              e.last_stable_offset)
    return bytes(out)


def decode_txn_index(data: bytes | bytearray | memoryview,
                     *, source: str | None = None) -> list[AbortedTxn]:
    """The entries of a ``.txnindex``; a partial entry or an unknown version is corrupt."""
    n, rest = divmod(len(data), TXN_ENTRY_SIZE)
    where = f" in {source}" if source else ""
    if rest:
        raise CorruptIndexError(f"transaction index of {len(data)} bytes is not a whole number "
                                f"of {TXN_ENTRY_SIZE}-byte entries{where}")
    out = []
    for i in range(n):
        _, pid, first, last, lso = TXN_ENTRY.unpack_from(data, i * TXN_ENTRY_SIZE)
        # Kafka reads the version with buffer.get(0): one signed byte.
        version = struct.unpack_from(">b", data, i * TXN_ENTRY_SIZE)[0]
        if version > TXN_INDEX_VERSION or version < 0:
            raise CorruptIndexError(f"unexpected aborted transaction version {version} in "
                                    f"entry {i}{where}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_aborted_txns(entries: Iterable[AbortedTxn], fetch_offset: int,
                         upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
    """TransactionIndex.collectAbortedTxns over one segment's entries.

    Returns the entries overlapping [fetch_offset, upper_bound_offset) and whether the
    search is complete (an entry's LSO reached the upper bound, so later segments cannot
    add more).
    """
    found = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
            found.append(e)
        if e.last_stable_offset >= upper_bound_offset:
            return found, True
    return found, False


# --------------------------------------------------------------------------- .index / .timeindex

class OffsetEntry(NamedTuple):
    """An ``.index`` entry with its absolute offset."""

    offset: int
    position: int


class TimeEntry(NamedTuple):
    """A ``.timeindex`` entry with its absolute offset."""

    timestamp: int
    offset: int


def _relative(offset: int, base_offset: int, what: str) -> int:
    rel = offset - base_offset
    if not 0 <= rel <= INT32_MAX:
        raise ValueError(f"{what} offset {offset} is not within 2^31 of base offset "
                         f"{base_offset}")
    return rel


def encode_offset_index(entries: Iterable[OffsetEntry | tuple[int, int]],
                        base_offset: int) -> bytes:
    """``.index`` bytes; offsets must strictly increase and positions not decrease."""
    out = bytearray()
    prev: tuple[int, int] | None = None
    for offset, position in entries:
        rel = _relative(offset, base_offset, "index")
        if not 0 <= position <= INT32_MAX:
            raise ValueError(f"index position {position} is outside int32")
        if prev is not None and (rel <= prev[0] or position < prev[1]):
            raise ValueError(f"index entry ({offset}, {position}) does not follow the "
                             f"previous one")
        prev = (rel, position)
        out += OFFSET_ENTRY.pack(rel, position)
    return bytes(out)


def _check_entry_size(data: bytes | bytearray | memoryview, size: int, what: str,
                      source: str | None) -> int:
    n, rest = divmod(len(data), size)
    if rest:
        where = f" in {source}" if source else ""
        raise CorruptIndexError(f"{what} of {len(data)} bytes is not a whole number of "
                                f"{size}-byte entries{where}")
    return n


def decode_offset_index(data: bytes | bytearray | memoryview, base_offset: int,
                        *, source: str | None = None) -> list[OffsetEntry]:
    """Entries of an ``.index``, stopping at trailing zero (non-increasing) entries."""
    n = _check_entry_size(data, OFFSET_ENTRY_SIZE, "offset index", source)
    out: list[OffsetEntry] = []
    prev = -1
    for i in range(n):
        rel, position = OFFSET_ENTRY.unpack_from(data, i * OFFSET_ENTRY_SIZE)
        if rel <= prev:
            break
        prev = rel
        out.append(OffsetEntry(base_offset + rel, position))
    return out


def encode_time_index(entries: Iterable[TimeEntry | tuple[int, int]], base_offset: int) -> bytes:
    """``.timeindex`` bytes; timestamps and offsets must strictly increase.

    TimeIndex.maybeAppend only appends a greater timestamp (whose offset is then later), so
    Kafka never writes a repeat, and a reader would take one for the zero-filled tail.
    """
    out = bytearray()
    prev: tuple[int, int] | None = None
    for timestamp, offset in entries:
        rel = _relative(offset, base_offset, "time index")
        if prev is not None and (timestamp <= prev[0] or rel <= prev[1]):
            raise ValueError(f"time index entry ({timestamp}, {offset}) does not follow the "
                             f"previous one")
        prev = (timestamp, rel)
        out += TIME_ENTRY.pack(timestamp, rel)
    return bytes(out)


def decode_time_index(data: bytes | bytearray | memoryview, base_offset: int,
                      *, source: str | None = None) -> list[TimeEntry]:
    """Entries of a ``.timeindex``, stopping at trailing zero (non-increasing) entries."""
    n = _check_entry_size(data, TIME_ENTRY_SIZE, "time index", source)
    out: list[TimeEntry] = []
    prev = -1
    for i in range(n):
        timestamp, rel = TIME_ENTRY.unpack_from(data, i * TIME_ENTRY_SIZE)
        if rel <= prev:
            break
        prev = rel
        out.append(TimeEntry(timestamp, base_offset + rel))
    return out


def build_indexes(segment: bytes | bytearray | memoryview, base_offset: int, *,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                  source: str | None = None,
                  verify_crc: bool = True) -> tuple[list[OffsetEntry], list[TimeEntry]]:
    """Kafka's sparse entries for a closed segment (LogSegment.recover + roll).

    Per batch, once more than ``index_interval_bytes`` were seen since the last entry, add
    ``(batch.lastOffset -> batch position)`` and a time entry with the max timestamp so far
    (only if it grew). On close one more time entry is forced for the final maximum.
    """
    from .records import iter_batches  # records imports nothing from here; keep it lazy

    offsets: list[OffsetEntry] = []
    times: list[TimeEntry] = []
    max_ts, max_ts_offset = NO_TIMESTAMP, base_offset
    last_time_ts = NO_TIMESTAMP
    last_entry_pos = 0
    for batch in iter_batches(segment, source=source, verify_crc=verify_crc):
        _relative(batch.last_offset, base_offset, "batch")
        if batch.max_timestamp > max_ts:
            max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
        if batch.position - last_entry_pos > index_interval_bytes:
            offsets.append(OffsetEntry(batch.last_offset, batch.position))
            if max_ts > last_time_ts:
                times.append(TimeEntry(max_ts, max_ts_offset))
                last_time_ts = max_ts
            last_entry_pos = batch.position
    if max_ts > last_time_ts:
        times.append(TimeEntry(max_ts, max_ts_offset))
    return offsets, times


def lookup_offset(entries: Sequence[OffsetEntry], target: int, base_offset: int) -> OffsetEntry:
    """Greatest entry with offset <= ``target``, else (base_offset, 0) (OffsetIndex.lookup)."""
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].offset <= target:
            lo = mid + 1
        else:
            hi = mid
    return entries[lo - 1] if lo else OffsetEntry(base_offset, 0)


def lookup_timestamp(entries: Sequence[TimeEntry], timestamp: int,
                     base_offset: int) -> TimeEntry:
    """Greatest entry with timestamp <= ``timestamp``, else (-1, base_offset) (TimeIndex.lookup).

    A reader scans forward from this entry's offset for the first record with timestamp
    >= ``timestamp`` (LogSegment.findOffsetByTimestamp).
    """
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].timestamp <= timestamp:
            lo = mid + 1
        else:
            hi = mid
    return entries[lo - 1] if lo else TimeEntry(NO_TIMESTAMP, base_offset)


def find_offset_by_timestamp(segment: bytes | bytearray | memoryview, timestamp: int,
                             base_offset: int, *,
                             offset_index: Sequence[OffsetEntry] = (),
                             time_index: Sequence[TimeEntry] = (),
                             starting_offset: int = 0,
                             source: str | None = None) -> int | None:
    """First offset in the segment whose record timestamp is >= ``timestamp``, or None.

    Uses the indexes (when given) to skip ahead, then scans batches and their records,
    as LogSegment.findOffsetByTimestamp does (``starting_offset``: the log start offset).
    Control records count like any record.
    """
    from .records import decode_batch, iter_batches

    start = lookup_timestamp(time_index, timestamp, base_offset)
    position = lookup_offset(offset_index, start.offset, base_offset).position
    view = memoryview(segment)[position:]
    for batch in iter_batches(view, source=source):
        if batch.max_timestamp < timestamp:
            continue
        for rec in decode_batch(view, batch.position, source=source, verify_crc=False):
            if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                return rec.offset
    return None
