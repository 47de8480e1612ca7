"""One partition, straight from storage: offset range -> Arrow, with Kafka's isolation levels.

A reader needs storage only. It trusts the latest stable snapshot (DESIGN.md 5.4): it reads
`[start, LSO)` under read_committed (the default) or `[start, HW)` under read_uncommitted,
never past it, so it never waits for anything. Offsets are not dense (markers, aborted
batches, compacted records, 0-byte fence objects), so progress is tracked as "next offset to
read", never as a record count: a marker at the end of a range is consumed, not re-read.

Under read_committed the aborted transactions come from `.txnindex` objects (and, for the
tail in shared objects, from the entries the stable head publishes with an abort's
markers), collected the way Kafka's broker does for a fetch (walk the index objects from the
one holding the start offset, stop once an entry's lastStableOffset reaches the upper
bound) and applied by
`AbortedFilter`, Kafka's consumer algorithm, carried across objects.

Objects are fetched in byte pieces of at most `chunk_bytes` on a small shared thread pool,
a few pieces ahead of the decoder, so storage latency overlaps decoding.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from .codec.batch_header import CONTROL_FLAG
from .codec.indexes import (
    AbortedTxn,
    OffsetEntry,
    collect_aborted_txns,
    decode_offset_index,
    decode_time_index,
    decode_txn_index,
    lookup_offset,
    lookup_timestamp,
)
from .codec.records import iter_batches
from .errors import CorruptBatchError, OffsetOutOfRangeError, TruncatedBatchError, TxnlogError
from .layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_DIGITS,
    SHARED_DIR,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    parse_segment_name,
    partition_dir,
    validate_partition,
)
from .manifest import (
    MIN_GRACE_MS,
    UNINDEXED_RUN_MAX_BYTES,
    PartitionManifest,
    read_latest_manifest,
)
from .planted_bugs import enabled as planted_bug_enabled
from .planted_bugs import unconfirmed_runs
from .stable import StableSnapshot, read_latest_stable
from .storage import Storage

if TYPE_CHECKING:
    from .arrow.arrow_codec import AbortedFilter


def _codec() -> ModuleType:
    """The compiled codec (numba, its kernels), loaded on the first decode: the driver-side
    planning that only lists objects and reads offsets (a stream's latestOffset and
    partitions) never pays for it."""
    from .arrow import arrow_codec

    return arrow_codec

IsolationLevel = Literal["read_committed", "read_uncommitted"]
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
DEFAULT_CHUNK_BYTES = 16 << 20
DEFAULT_PREFETCH = 4
READ_ATTEMPTS = 5  # listings of one read (objects merged away under it make it list again)
_BATCH_OVERHEAD = 12  # baseOffset int64 + batchLength int32: what batchLength does not count
_MIN_BATCH_LENGTH = 49  # a 61-byte header minus the 12 above

_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def io_pool() -> ThreadPoolExecutor:
    """One small process-wide pool for storage reads (rebuilt after a fork)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            workers = int(os.environ.get("TXNLOG_IO_THREADS", "8"))
            _pool = (os.getpid(), ThreadPoolExecutor(workers, thread_name_prefix="txnlog-io"))
        return _pool[1]


def check_isolation_level(level: str) -> IsolationLevel:
    if level not in ISOLATION_LEVELS:
        raise ValueError(f"isolation level {level!r} is not one of {ISOLATION_LEVELS}")
    return level  # type: ignore[return-value]


@dataclass(frozen=True)
class Segment:
    """A `.log` object: offsets [base_offset, end_offset) live in it (end None: up to HW)."""

    base_offset: int
    size: int
    path: str
    end_offset: int | None
    has_index: bool = False
    has_timeindex: bool = False
    merged: bool = False  # a merged object named by the manifest (not a small object)
    position: int = 0  # where its bytes start in the object (a run in a shared object)

    def sibling(self, suffix: str) -> str:
        """The path of its index of ``suffix`` (beside it, same base offset)."""
        return self.path[:-len(LOG_SUFFIX)] + suffix

    @property
    def in_shared_object(self) -> bool:
        """A run in a shared object: its bytes are a range of an object holding others'."""
        return self.path.startswith(SHARED_DIR + "/")

    def read_all(self, storage: Storage) -> bytes:
        """Its bytes, and only its: a ranged GET of a run, the whole object otherwise."""
        if self.in_shared_object:
            return storage.get(self.path, self.position, self.position + self.size)
        return storage.get(self.path)


class _StaleListing(Exception):
    """A listing older than the grace period may not be trusted for small objects."""


@dataclass(frozen=True)
class ReadChunk:
    """Decoded records, and the offset to continue from after them."""

    batch: pa.RecordBatch
    next_offset: int


@dataclass(frozen=True)
class RawRead:
    """Stored batches of one partition, verbatim, and the offset after the last one."""

    data: bytes
    next_offset: int


@dataclass(frozen=True)
class _Piece:
    segment: Segment
    start: int  # byte range [start, end) of the object
    end: int
    last: bool  # last piece of its object


def complete_prefix(buf: bytes | memoryview, source: str | None = None) -> int:
    """Length of the longest prefix of `buf` made of whole batches (by their length fields)."""
    pos, n = 0, len(buf)
    while pos + _BATCH_OVERHEAD <= n:
        length = int.from_bytes(buf[pos + 8:pos + 12], "big", signed=True)
        if length < _MIN_BATCH_LENGTH:
            raise CorruptBatchError(f"batch length {length} is below the minimum "
                                    f"{_MIN_BATCH_LENGTH}", position=pos, source=source)
        if pos + _BATCH_OVERHEAD + length > n:
            break
        pos += _BATCH_OVERHEAD + length
    return pos


class PartitionReader:
    """Read one partition of a topic under a root; cheap to build, holds no connections."""

    def __init__(self, storage: Storage, topic: str, partition: int, *,
                 isolation_level: IsolationLevel = "read_committed",
                 include_headers: bool = False, verify_crc: bool = True,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, prefetch: int = DEFAULT_PREFETCH,
                 snapshot: StableSnapshot | None = None) -> None:
        self.storage = storage
        self.topic = topic
        self.partition = validate_partition(partition)
        self.dir = partition_dir(topic, partition)
        self.isolation_level = check_isolation_level(isolation_level)
        self.include_headers = include_headers
        self.verify_crc = verify_crc
        if chunk_bytes < 1024:
            raise ValueError(f"chunk_bytes must be >= 1024, got {chunk_bytes}")
        self.chunk_bytes = chunk_bytes
        self.prefetch = max(1, prefetch)
        self._snapshot = snapshot
        self._segments: list[Segment] = []
        # (base offset, .txnindex object's path or the entries a tail run publishes)
        self._txnindexes: list[tuple[int, str | list[AbortedTxn]]] = []
        self._listed_hw: int | None = None
        self._listed_at = 0.0  # time.monotonic() of the listing
        self._manifest: PartitionManifest | None = None
        self._txn_cache: dict[str, list[AbortedTxn]] = {}
        self._index_cache: dict[str, list[OffsetEntry]] = {}

    # ---- bounds ------------------------------------------------------------------------
    def refresh(self) -> StableSnapshot | None:
        """Read the newest stable snapshot (never older than the one held)."""
        self._snapshot = read_latest_stable(self.storage, not_below=self._snapshot)
        return self._snapshot

    def advance_snapshot(self, snapshot: StableSnapshot | None) -> None:
        """Adopt a snapshot read elsewhere (one per poll for many partitions); never older."""
        if snapshot is not None and (self._snapshot is None
                                     or snapshot.key > self._snapshot.key):
            self._snapshot = snapshot

    @property
    def snapshot(self) -> StableSnapshot | None:
        if self._snapshot is None:
            self.refresh()
        return self._snapshot

    def high_watermark(self) -> int:
        snap = self.snapshot
        return 0 if snap is None else snap.hw(self.topic, self.partition)

    def last_stable_offset(self) -> int:
        snap = self.snapshot
        return 0 if snap is None else snap.lso(self.topic, self.partition)

    def latest_offset(self) -> int:
        """The end of what this reader may read: LSO (read_committed) or HW."""
        if self.isolation_level == "read_committed" and not planted_bug_enabled("ignore_lso"):
            return self.last_stable_offset()
        return self.high_watermark()

    def earliest_offset(self) -> int:
        """Kafka's log start offset: the manifest's (retention and DeleteRecords move it),
        else the first object's (0 if empty)."""
        self.segments()
        return self._log_start()

    def _log_start(self) -> int:
        """The log start offset of the listing held."""
        if self._manifest is not None:
            return self._manifest.log_start_offset
        return self._segments[0].base_offset if self._segments else 0

    # ---- listing -----------------------------------------------------------------------
    def segments(self) -> list[Segment]:
        """The `.log` objects, ascending; listed again once the HW moved past the listing."""
        hw = self.high_watermark()
        if self._listed_hw is None or hw > self._listed_hw:
            self._list(hw)
        return self._segments

    def _list(self, hw: int) -> None:
        """The newest manifest's merged objects below its merged end M, then the small
        objects at or above M: a LIST of at most one key, a GET, and a LIST that starts at
        M (S3 StartAfter) — bounded whatever the history. Small objects below M
        are never used: their names may have been freed and taken by a zombie."""
        listed_at = time.monotonic()
        man = read_latest_manifest(self.storage, self.topic, self.partition)
        if man is not None and planted_bug_enabled("trust_merged_away"):
            # planted bug (chaos self-test): the small objects, as if nothing were merged —
            # deleted ones leave holes, a zombie's late write into a freed name shows
            man = None
        merged_end = man.end_offset if man is not None else 0
        segs: list[Segment] = []
        txn: list[tuple[int, str | list[AbortedTxn]]] = []
        if man is not None:
            for o in man.objects:
                path = o.path(self.topic, self.partition)
                segs.append(Segment(o.base_offset, o.size, path, o.end_offset, o.indexed,
                                    o.indexed, merged=True))
                if o.has_txnindex:
                    txn.append((o.base_offset, o.path(self.topic, self.partition,
                                                      TXNINDEX_SUFFIX)))
        logs: list[tuple[int, int]] = []
        index: set[int] = set()
        timeindex: set[int] = set()
        after = f"{merged_end:0{OFFSET_DIGITS}d}" if merged_end > 0 else None
        for obj in self.storage.list(self.dir, start_after=after):
            parsed = parse_segment_name(obj.name)
            if parsed is None or parsed.base_offset < merged_end:
                continue
            if parsed.suffix == LOG_SUFFIX:
                logs.append((parsed.base_offset, obj.size))
            elif parsed.suffix == TXNINDEX_SUFFIX:
                txn.append((parsed.base_offset, f"{self.dir}/{obj.name}"))
            elif parsed.suffix == INDEX_SUFFIX:
                index.add(parsed.base_offset)
            elif parsed.suffix == TIMEINDEX_SUFFIX:
                timeindex.add(parsed.base_offset)
        # Runs in shared objects: the tail the snapshot publishes (the runs of a flush that
        # wrote one object for all its partitions), never listed
        tail = [t for t in (self._snapshot.tail(self.topic, self.partition)
                            if self._snapshot is not None else ())
                if t.base >= merged_end]
        runs = [(t.base, t.size, t.path, t.position) for t in tail]
        # an abort's .txnindex entries come with its markers' run (an object of the
        # partition's own at the same base, from before they did, says the same)
        inline = {t.base: [AbortedTxn(*a) for a in t.aborted] for t in tail if t.aborted}
        if planted_bug_enabled("tail_aborts_ignored"):  # planted bug (chaos self-test)
            inline = {}
        if inline:
            txn = [x for x in txn if x[0] not in inline] + list(inline.items())
        if planted_bug_enabled("trust_unconfirmed_runs"):
            runs += unconfirmed_runs(self.storage, SHARED_DIR, self.topic, self.partition,
                                     {r[0] for r in runs})
        rows = sorted([(base, size, f"{self.dir}/{base:020d}{LOG_SUFFIX}", 0)
                       for base, size in logs] + runs)
        for i, (base, size, path, position) in enumerate(rows):
            end = rows[i + 1][0] if i + 1 < len(rows) else None
            segs.append(Segment(base, size, path, end, base in index and not position,
                                base in timeindex and not position, position=position))
        self._segments = segs
        self._manifest = man
        self._txnindexes = sorted(txn, key=lambda x: x[0])
        self._listed_hw = hw
        self._listed_at = listed_at

    def _max_listing_age(self) -> float:
        """How long a listing may be trusted for small objects: half the grace period after
        which merged small objects are deleted (the manifest carries it), and half the
        shortest one before anything was merged."""
        grace_ms = self._manifest.grace_ms if self._manifest is not None else MIN_GRACE_MS
        return max(0.0, grace_ms / 2000.0)

    def _relist(self) -> None:
        self._list(self.high_watermark())

    def _listing_stale(self) -> bool:
        """The listing is older than a small object's name may be trusted for."""
        return time.monotonic() - self._listed_at > self._max_listing_age()

    def _renew_listing(self, cursor: int) -> bool:
        """Trust a listing too old for small objects again, from now, if the newest
        manifest shows nothing merged past the first small object still to read: small
        objects at or above the merged end are never deleted (cleanup deletes below it,
        a grace period after the manifest that moved it was written), so none of those
        listed can have been freed and taken by a zombie. One LIST of one key and one GET
        instead of listing the whole tail again, which, once a LIST took longer than half
        the grace period (a slow store, a long tail), made a reader relist for ever and
        never read (found by the chaos harness: a final read at 7 offsets/s). False:
        something moved (merged past it, a new log start — retention, DeleteRecords — or a
        shorter grace): list again."""
        renewed_at = time.monotonic()
        first_small = next((s.base_offset for s in self._segments if not s.merged
                            and (s.end_offset is None or s.end_offset > cursor)), None)
        if first_small is None:
            return False
        man = read_latest_manifest(self.storage, self.topic, self.partition)
        old = self._manifest
        if man is None:
            if old is not None:
                return False
        elif (man.end_offset > first_small
              or man.log_start_offset != (old.log_start_offset if old is not None else 0)
              or (old is not None and man.start_offset != old.start_offset)
              or man.grace_ms < (old.grace_ms if old is not None else MIN_GRACE_MS)):
            return False
        self._listed_at = renewed_at
        return True

    def _first_segment(self, offset: int) -> int:
        """Index of the segment holding `offset` (0 if it lies before every segment)."""
        bases = [s.base_offset for s in self._segments]
        return max(0, bisect.bisect_right(bases, offset) - 1)

    # ---- aborted transactions ----------------------------------------------------------
    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Kafka's fetch-side collection (LocalLog.addAbortedTransactions) for [start, end)."""
        segs = self.segments()
        from_base = segs[self._first_segment(start)].base_offset if segs else 0
        paths = [p for b, p in self._txnindexes if b >= from_base]
        found: list[AbortedTxn] = []
        pool = io_pool()
        for i in range(0, len(paths), self.prefetch):
            group = paths[i:i + self.prefetch]
            missing = [p for p in group if isinstance(p, str) and p not in self._txn_cache]
            futures = {p: pool.submit(self.storage.get, p) for p in missing}
            for p, fut in futures.items():
                self._txn_cache[p] = decode_txn_index(
                    fut.result(), source=f"{self.storage.url}/{p}")
            for p in group:
                entries, complete = collect_aborted_txns(
                    self._txn_cache[p] if isinstance(p, str) else p, start, end)
                found.extend(entries)
                if complete:
                    return found
        return found

    # ---- where the visible records end ----------------------------------------------
    def visible_end(self, start: int, end: int, *, max_objects: int = 16,
                    max_bytes: int = 256 << 10) -> int:
        """The lowest offset ``d`` in ``[start, end]`` (``end`` capped at LSO/HW) such that
        ``[d, end)`` holds no record this reader returns: only control batches (COMMIT and
        ABORT markers), batches without records, gaps, 0-byte fences and, under
        read_committed, aborted data. ``d == start`` means the whole range holds none.

        A stream's admission control asks it where a partition's data ends, so that a
        budget boundary that leaves only such a tail behind takes the tail into the
        micro-batch instead of spending a whole trigger (and a sink transaction) on it.
        It must be cheap: it walks the partition's objects back from ``end`` reading batch
        headers only, at most ``max_objects`` GETs of at most ``max_bytes`` in all (an
        indexed object too big for that is read from its last index entry below ``end``,
        a merged one below ``UNINDEXED_RUN_MAX_BYTES``, perhaps without indexes, whole;
        under read_committed a transactional batch also needs the ``.txnindex`` objects
        from its object on, as a read does), and stops at the first visible batch.
        Whatever it does not look at counts as data, so the answer may be above the true
        one, never below it.
        """
        end = self.bounded_end(end)
        if start >= end:
            return start
        self.segments()
        stale = self._listing_stale()
        if stale and not self._renew_listing(start):
            self._relist()
        segs = self._segments
        verified = end  # [verified, end) holds nothing visible
        i = bisect.bisect_left([s.base_offset for s in segs], end) - 1
        fetched = objects = 0
        while i >= 0 and verified > start:
            seg = segs[i]
            i -= 1
            if seg.size == 0:  # a fence: resolved offsets without records
                verified = seg.base_offset
                continue
            if not seg.merged and self._listing_stale():
                break  # a small object's name may have been freed and taken since: not trusted
            if objects >= max_objects:
                break
            pos = 0
            try:
                if seg.size > max_bytes - fetched and not (  # an unindexed run: whole
                        seg.merged and seg.size < UNINDEXED_RUN_MAX_BYTES):
                    if not seg.has_index:
                        break
                    objects += 1
                    pos = lookup_offset(self._index_entries(seg), end - 1,
                                        seg.base_offset).position
                    if seg.size - pos > max_bytes - fetched:
                        break
                data = self.storage.get_view(seg.path, seg.position + pos,
                                             seg.position + seg.size)
            except FileNotFoundError:
                break  # merged away under us: what was verified still holds
            objects += 1
            fetched += len(data)
            source = f"{self.storage.url}/{seg.path}"
            headers = []
            for h in iter_batches(data, source=source, verify_crc=False):
                if h.base_offset >= end:
                    break
                headers.append(h)
            aborted: list[AbortedTxn] | None = None
            for h in reversed(headers):
                if h.is_control or h.records_count == 0:
                    continue
                if self.isolation_level == "read_committed" and h.is_transactional:
                    if aborted is None:  # the .txnindex objects from this one on (cached)
                        aborted = self.aborted_transactions(headers[0].base_offset, end)
                    if any(a.producer_id == h.producer_id and a.first_offset <= h.last_offset
                           and a.last_offset >= h.base_offset for a in aborted):
                        continue
                return max(start, min(end, h.next_offset))
            verified = headers[0].base_offset if pos > 0 and headers else seg.base_offset
            if pos > 0:
                break  # the object's bytes before its last index entry count as data
        return max(start, verified)

    # ---- reading -----------------------------------------------------------------------
    def bounded_end(self, end: int | None = None) -> int:
        """`end` capped at what the isolation level allows (LSO or HW)."""
        bound = self.latest_offset()
        return bound if end is None else min(end, bound)

    def read(self, start: int | None = None, end: int | None = None) -> Iterator[ReadChunk]:
        """Records in `[start, end)` (end capped at LSO/HW), as non-empty Arrow batches;
        `start` None: the log start offset.

        The last chunk's `next_offset` is the capped end: the whole range was consumed, even
        if it ends on markers, aborted batches or a fence. A start below the log start
        offset — asked for, or found so after objects were deleted under the read — is
        Kafka's OffsetOutOfRange (`OffsetOutOfRangeError`), never a silent skip.
        """
        follow = start is None  # from the earliest: follow the log start if it moves
        if start is None:
            start = self.earliest_offset()
        if start < 0:
            raise ValueError(f"start offset must be >= 0, got {start}")
        end = self.bounded_end(end)
        if start >= end:
            return
        pending: ReadChunk | None = None
        cursor = start
        relist = False
        missing = 0  # objects found gone in a row, without progress in between
        while True:
            segs = self.segments()
            stale = self._listing_stale()
            if relist or (stale and not self._renew_listing(cursor)):
                self._relist()
                segs = self._segments
            log_start = self._log_start()
            if cursor < log_start and follow and pending is None:
                cursor = log_start
            if cursor < log_start and not planted_bug_enabled("read_below_log_start"):
                raise OffsetOutOfRangeError(self.topic, self.partition, cursor, log_start)
            if not segs:
                if log_start >= end:
                    break  # everything up to the end was deleted (DeleteRecords at the HW)
                raise TxnlogError(
                    f"{self.storage.url}/{self.dir}: stable snapshot says offsets up to {end} "
                    "are resolved, but the partition has no segment objects")
            cursor = max(cursor, segs[0].base_offset)
            aborted = None
            before = cursor
            try:
                if self.isolation_level == "read_committed":
                    aborted = _codec().AbortedFilter(self.aborted_transactions(cursor, end))
                for chunk in self._decode_pieces(self._plan(cursor, end), cursor, end,
                                                 aborted):
                    if pending is not None:
                        yield pending
                    pending = chunk
                    cursor = chunk.next_offset
                break
            except _StaleListing:
                # a listing too old to trust for small objects: renewed through the
                # manifest, or listed again; go on from the cursor (merged objects hold the
                # same bytes; compacted ones the same records at the same offsets, less the
                # superseded ones)
                relist = False
            except FileNotFoundError:
                # an object merged away and deleted under us: read the newest manifest
                missing = 0 if cursor > before else missing + 1
                if missing >= READ_ATTEMPTS:
                    raise
                relist = True
        if pending is not None:
            yield ReadChunk(pending.batch, end)

    def read_raw(self, start: int, max_bytes: int, end: int | None = None) -> RawRead:
        """Whole stored batches (data, markers, aborted ones alike) as they are in storage,
        for serving Kafka's Fetch verbatim: from the batch holding ``start`` up to ``end``
        capped at LSO/HW, at most ``max_bytes`` except that a first batch larger than that is
        given whole (Kafka's KIP-74, so a consumer always makes progress).

        ``next_offset`` is the offset after the last batch given (``start`` when none).
        Nothing is decoded or re-encoded; CRCs are the client's to check, as with a broker.
        """
        if start < 0:
            raise ValueError(f"start offset must be >= 0, got {start}")
        end = self.bounded_end(end)
        if start >= end:
            return RawRead(b"", start)
        relist = False
        missing = 0
        while True:
            segs = self.segments()
            stale = self._listing_stale()
            if relist or (stale and not self._renew_listing(start)):
                self._relist()
                segs = self._segments
            if not segs:
                raise TxnlogError(
                    f"{self.storage.url}/{self.dir}: stable snapshot says offsets up to {end} "
                    "are resolved, but the partition has no segment objects")
            try:
                return self._raw_pieces(self._plan(max(start, segs[0].base_offset), end),
                                        start, end, max_bytes)
            except _StaleListing:
                relist = False  # renewed through the manifest, or listed again
            except FileNotFoundError:
                missing += 1
                if missing >= READ_ATTEMPTS:
                    raise
                relist = True

    def _raw_pieces(self, plan: Iterator[_Piece], start: int, end: int,
                    max_bytes: int) -> RawRead:
        out: list[memoryview | bytes] = []
        size = 0
        cursor = start
        carry = b""
        for piece in plan:
            source = f"{self.storage.url}/{piece.segment.path}"
            at = piece.segment.position
            data = self.storage.get_view(piece.segment.path, at + piece.start, at + piece.end)
            if len(data) != piece.end - piece.start:
                raise TruncatedBatchError(
                    f"object is shorter than listed: got {len(data)} bytes for "
                    f"[{piece.start}, {piece.end})", position=piece.start, source=source)
            buf = memoryview(b"".join((carry, data)) if carry else data)
            cut = len(buf) if piece.last else complete_prefix(buf, source)
            carry = bytes(buf[cut:])
            if cut == 0:
                continue
            index = _codec().scan_batches(buf[:cut], source=source, verify_crc=False)
            for row in index:
                base = int(row["base_offset"])
                last = base + int(row["last_offset_delta"])
                if base >= end:
                    return RawRead(b"".join(out), cursor)
                if last < cursor:
                    continue
                n = int(row["size"])
                if out and size + n > max_bytes:
                    return RawRead(b"".join(out), cursor)
                pos = int(row["position"])
                out.append(buf[pos:pos + n])
                size += n
                cursor = last + 1
        return RawRead(b"".join(out), cursor)

    def read_table(self, start: int | None = None, end: int | None = None) -> pa.Table:
        batches = [c.batch for c in self.read(start, end)]
        return pa.Table.from_batches(batches, schema=_codec().read_schema(self.include_headers))

    def _plan(self, start: int, end: int) -> Iterator[_Piece]:
        first = self._first_segment(start)
        for seg in self._segments[first:]:
            if seg.base_offset >= end:
                return
            if seg.size == 0:  # a fence: an empty segment
                continue
            if not seg.merged and self._listing_stale():
                raise _StaleListing()
            pos = 0
            bounds: list[int] = []
            if seg.has_index and seg.size > self.chunk_bytes:
                # a big segment: start at the index entry below `start`, and cut pieces at
                # batch starts the index names, so no piece ends inside a batch (a partial
                # batch would be carried and copied into the next piece, every piece)
                entries = self._index_entries(seg)
                if start > seg.base_offset:
                    pos = lookup_offset(entries, start, seg.base_offset).position
                bounds = [e.position for e in entries]
            while pos < seg.size:
                stop = min(seg.size, pos + self.chunk_bytes)
                if stop < seg.size and bounds:
                    i = bisect.bisect_right(bounds, stop) - 1
                    if i >= 0 and bounds[i] > pos:
                        stop = bounds[i]
                yield _Piece(seg, pos, stop, stop == seg.size)
                pos = stop

    def _index_entries(self, seg: Segment) -> list[OffsetEntry]:
        """A segment's ``.index`` entries ([] without one), kept for the reader's life."""
        path = seg.sibling(INDEX_SUFFIX)
        entries = self._index_cache.get(path)
        if entries is None:
            try:
                entries = decode_offset_index(self.storage.get(path), seg.base_offset,
                                              source=f"{self.storage.url}/{path}")
            except FileNotFoundError:
                entries = []
            self._index_cache[path] = entries
        return entries

    def _decode_pieces(self, plan: Iterator[_Piece], start: int, end: int,
                       aborted: AbortedFilter | None) -> Iterator[ReadChunk]:
        pool = io_pool()
        window: deque[tuple[_Piece, Future[bytes | memoryview]]] = deque()
        plan_iter = iter(plan)

        def fill() -> None:
            while len(window) < self.prefetch:
                piece = next(plan_iter, None)
                if piece is None:
                    return
                at = piece.segment.position
                window.append((piece, pool.submit(self.storage.get_view, piece.segment.path,
                                                  at + piece.start, at + piece.end)))

        decode_to_arrow = _codec().decode_to_arrow
        carry = b""
        cursor = start
        try:
            fill()
            while window:
                piece, fut = window.popleft()
                data = fut.result()
                fill()
                source = f"{self.storage.url}/{piece.segment.path}"
                if len(data) != piece.end - piece.start:
                    raise TruncatedBatchError(
                        f"object is shorter than listed: got {len(data)} bytes for "
                        f"[{piece.start}, {piece.end})", position=piece.start, source=source)
                buf = b"".join((carry, data)) if carry else data
                cut = len(buf) if piece.last else complete_prefix(buf, source)
                carry = buf[cut:]
                if cut == 0:
                    continue
                res = decode_to_arrow(
                    memoryview(buf)[:cut], topic=self.topic, partition=self.partition,
                    start_offset=cursor, end_offset=end, aborted=aborted,
                    include_headers=self.include_headers, verify_crc=self.verify_crc,
                    source=source)
                cursor = max(cursor, res.next_offset)
                if res.batch.num_rows:
                    yield ReadChunk(res.batch, cursor)
                if cursor >= end:
                    return
                if piece.last:
                    # whatever the object did not hold up to the next object is resolved too
                    nxt = piece.segment.end_offset
                    if nxt is not None:
                        cursor = max(cursor, min(nxt, end))
        finally:
            for _, fut in window:
                fut.cancel()

    # ---- timestamps ----------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """First readable offset whose record timestamp is >= `timestamp_ms` (Kafka's
        ListOffsets by time), or None when no record below the bound is that late.

        Uses a segment's `.timeindex` where present, else the batches' maxTimestamp.
        """
        bound = self.latest_offset()
        for seg in self.segments():
            if seg.base_offset >= bound:
                return None
            if seg.size == 0:
                continue
            found = self._timestamp_in_segment(seg, timestamp_ms, bound)
            if found is not None:
                return found
        return None

    def _timestamp_in_segment(self, seg: Segment, ts: int, bound: int) -> int | None:
        if seg.has_timeindex:
            path = seg.sibling(TIMEINDEX_SUFFIX)
            try:
                entries = decode_time_index(self.storage.get(path), seg.base_offset)
            except FileNotFoundError:
                entries = []
            if entries and entries[-1].timestamp < ts:
                return None  # the last entry is the segment's max timestamp
            start_at = lookup_timestamp(entries, ts, seg.base_offset).offset
        else:
            start_at = seg.base_offset
        codec = _codec()
        data = seg.read_all(self.storage)
        source = f"{self.storage.url}/{seg.path}"
        index = codec.scan_batches(data, source=source, verify_crc=False)
        last = index["base_offset"] + index["last_offset_delta"]
        rows = ((index["max_timestamp"] >= ts) & (last >= start_at)
                & (index["base_offset"] < bound) & ((index["attributes"] & CONTROL_FLAG) == 0)
                & (index["records_count"] > 0))
        for row in index[rows]:
            pos, size = int(row["position"]), int(row["size"])
            res = codec.decode_to_arrow(memoryview(data)[pos:pos + size], topic=self.topic,
                                        partition=self.partition, start_offset=start_at,
                                        end_offset=bound, verify_crc=self.verify_crc,
                                        source=source)
            tss = res.batch.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)
            hits = (tss >= ts * 1000).nonzero()[0]
            if len(hits):
                return int(res.batch.column("offset")[int(hits[0])].as_py())
        return None
