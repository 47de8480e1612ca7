"""Compacting topics with ``cleanup.policy=compact``: Kafka's LogCleaner as a coordinator
role.

A broker's cleaner threads pick the "filthiest" compacted log (``LogCleanerManager``),
clean its closed segments into ``.cleaned`` files and swap them in. Here the closed
segments are the level-0 objects the merger (``log_merger``) made, and the swap is a new
manifest; the coordinator — the one writer of the root, fenced by its log — plans each
compaction in its log, so a restart finishes it with the same bytes:

1. choose (``choose_cleaning``, pure; Kafka's rules): the closed segments from the log
   start up to the first uncleanable offset — the published LSO, the first segment holding
   a record newer than ``min.compaction.lag.ms`` — are cleaned when the dirty part (above
   the cleaner checkpoint) is at least ``min.cleanable.dirty.ratio`` of them, or when the
   first batch of the oldest dirty segment is older than ``max.compaction.lag.ms``
   (KIP-354; the merger rolls the open segment within the lag, so no record waits longer
   than the lag plus the jobs' intervals);
2. read them (CRC32C each) and the ``.txnindex`` objects beyond them until the aborted
   transactions with data in them are all known (Kafka's collectAbortedTransactions);
   clean (``log_format.log_cleaner.clean_log``);
3. log ``compact`` with everything the bytes depend on (``clean_state.CleanPlan``);
4. write the cleaned segments put-if-absent under new names (``<t>-<p>/cleaned/<seq>/``),
   then the next manifest;
5. log ``compacted``: readers use the cleaned segments; the ones cleaned are deleted after
   ``file.delete.delay.ms`` by the merger's cleanup, as merged-away objects are.

It runs inside the merger's loop (one partition at a time, never beside a merge of the
same partition: they share the manifest sequence), and never holds the commit path.
Topic configs come through ``compaction_config`` alone (one place to point at alterable
configs).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.codec.batch_header import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAGIC_OFFSET,
    BatchHeader,
)
from txnlog.log_format.codec.crc import crc32c
from txnlog.log_format.codec.indexes import AbortedTxn, collect_aborted_txns, decode_txn_index
from txnlog.log_format.errors import LogFormatError
from txnlog.log_format.manifest import DEFAULT_GRACE_MS, MIN_GRACE_MS, MergedObject
from txnlog.log_format.segments.log_cleaner import (
    DEFAULT_DELETE_RETENTION_MS,
    DEFAULT_MAX_COMPACTION_LAG_MS,
    DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
    DEFAULT_MIN_COMPACTION_LAG_MS,
    CleanedLog,
    CleanerInput,
    ProducerLast,
    clean_log,
)

from .. import faults
from ..state.clean_state import CleanPlan, PartitionCleaning
from ..state.coordinator_state import CoordinatorState
from ..state.merge_state import PartitionMerges
from ..state.partition_state import partition_key
from ..state.runtime import Commits, Observer, StorageIO
from ..state.txn_log_records import LogRecord
from ..topic_config import compacts
from .log_merger import LogMerger, MergeRefused, now_ms
from .merge_policy import DEFAULT_SEGMENT_BYTES

log = logging.getLogger("txnlog.coordinator.maintenance.log_cleaner")


@dataclass(frozen=True)
class CompactionConfig:
    """A topic's compaction settings (Kafka's names and defaults)."""

    compact: bool = False
    min_cleanable_dirty_ratio: float = DEFAULT_MIN_CLEANABLE_DIRTY_RATIO
    min_compaction_lag_ms: int = DEFAULT_MIN_COMPACTION_LAG_MS
    max_compaction_lag_ms: int = DEFAULT_MAX_COMPACTION_LAG_MS
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    grace_ms: int = DEFAULT_GRACE_MS


def _number(config: dict[str, Any], name: str, default: float, minimum: float) -> float:
    raw = config.get(name)
    if raw is None:
        return default
    try:
        return max(minimum, float(str(raw)))
    except ValueError:
        log.warning("topic config %s=%r is not a number; using %s", name, raw, default)
        return default


def compaction_config(config: dict[str, Any] | None) -> CompactionConfig:
    """The compaction settings of a topic config as it is stored (``_meta/topics`` and the
    coordinator's ``topic`` record). The one place the cleaner reads topic configs."""
    cfg = dict(config or {})
    return CompactionConfig(
        compact=compacts(cfg),
        min_cleanable_dirty_ratio=_number(cfg, "min.cleanable.dirty.ratio",
                                          DEFAULT_MIN_CLEANABLE_DIRTY_RATIO, 0.0),
        min_compaction_lag_ms=int(_number(cfg, "min.compaction.lag.ms",
                                          DEFAULT_MIN_COMPACTION_LAG_MS, 0)),
        max_compaction_lag_ms=int(_number(cfg, "max.compaction.lag.ms",
                                          DEFAULT_MAX_COMPACTION_LAG_MS, 1)),
        delete_retention_ms=int(_number(cfg, "delete.retention.ms",
                                        DEFAULT_DELETE_RETENTION_MS, 0)),
        segment_bytes=int(_number(cfg, "segment.bytes", DEFAULT_SEGMENT_BYTES, 1)),
        grace_ms=int(_number(cfg, "file.delete.delay.ms", DEFAULT_GRACE_MS, MIN_GRACE_MS)))


FIRST_HEADER_BYTES = HEADER_SIZE  # what a segment's first batch header takes


def first_batch_timestamp(header: bytes) -> int:
    """The maxTimestamp of the first batch of a segment from its first bytes (-1: none):
    Kafka's ``LogSegment.getFirstBatchTimestamp``, what ``max.compaction.lag.ms`` is
    counted from."""
    if len(header) < HEADER_SIZE or header[MAGIC_OFFSET] != MAGIC:
        return -1
    return BatchHeader(*HEADER.unpack_from(header)).max_timestamp


def first_dirty_segment(objects: list[MergedObject], first_dirty: int,
                        lso: int) -> MergedObject | None:
    """The oldest closed segment above the cleaner checkpoint and below the LSO."""
    for o in objects:
        if o.level != 0 or o.end_offset > lso:
            return None
        if o.base_offset >= first_dirty:
            return o
    return None


def choose_cleaning(objects: list[MergedObject], first_dirty: int, lso: int, now: int,
                    cfg: CompactionConfig, first_batch_ms: int = -1
                    ) -> list[MergedObject] | None:
    """The closed segments to clean (from the log start up to the first uncleanable
    offset), or None: nothing due (LogCleanerManager's cleanable ratio and lags).

    ``objects``: the manifest's, in offset order; closed segments are its level-0 prefix.
    ``first_batch_ms``: the first batch timestamp of the oldest dirty segment (-1: not
    read; its largest timestamp stands in, which can only find it overdue later).
    """
    closed: list[MergedObject] = []
    for o in objects:
        if o.level != 0 or o.end_offset > lso:
            break  # the open segment's runs, or past the LSO: never cleaned
        if o.base_offset >= first_dirty and cfg.min_compaction_lag_ms and \
                o.max_timestamp > now - cfg.min_compaction_lag_ms:
            break  # records too young to compact (and everything after them)
        closed.append(o)
    dirty = [o for o in closed if o.base_offset >= first_dirty]
    if not dirty:
        return None
    dirty_bytes = sum(o.size for o in dirty)
    total = sum(o.size for o in closed)
    ratio = dirty_bytes / total if total else 1.0
    oldest = first_batch_ms if first_batch_ms > 0 else dirty[0].max_timestamp
    overdue = oldest >= 0 and now - oldest > cfg.max_compaction_lag_ms
    if ratio >= cfg.min_cleanable_dirty_ratio or overdue:
        return closed
    return None


class LogCleaner:
    """The compaction role of one coordinator; runs in the merger's loop (``tick``)."""

    def __init__(self, state: CoordinatorState, commits: Commits, io: StorageIO,
                 merger: LogMerger, published_lso: Any, observer: Observer,
                 enabled: bool = True) -> None:
        self.state = state
        self.commits = commits
        self.io = io
        self.storage = io.storage
        self.merger = merger
        self.published_lso = published_lso
        self.observer = observer
        self.enabled = enabled
        self.refused: set[str] = set()
        self.compactions_done = 0
        # partition key -> (its oldest dirty segment, that segment's first batch timestamp)
        self._first_batch: dict[str, tuple[MergedObject, int]] = {}
        if enabled:
            merger.hooks.append(self.tick)
            merger.blocked.append(self.busy)

    def busy(self, key: str) -> bool:
        """A compaction of ``key`` is planned: no merge may take the manifest seq."""
        pc = self.state.cleanings.get(key)
        return pc is not None and pc.planned is not None

    def _config(self, topic: str) -> CompactionConfig:
        meta = self.state.topics.get(topic)
        return compaction_config(meta.get("config") if meta else None)

    async def tick(self) -> int:
        """Finish planned compactions, then compact what is due; compactions done."""
        done = 0
        for key, pc in list(self.state.cleanings.items()):
            if pc.planned is not None and key not in self.refused:
                done += await self._guarded(key, self._finish(pc.planned))
        compacted = {t for t, meta in self.state.topics.items()
                     if self._config(t).compact}
        if not compacted:
            return done
        for key, pm in list(self.state.merges.items()):
            if key in self.refused or pm.planned is not None:
                continue
            topic, p = self.merger._split(key)
            if topic in compacted:
                done += await self._guarded(key, self.compact_once(key, topic, p, pm))
        return done

    async def _guarded(self, key: str, coro: Any) -> int:
        try:
            return int(bool(await coro))
        except MergeRefused as exc:
            self.refused.add(key)
            self.observer.storage_error()
            log.error("compacting %s stopped: %s", key, exc)
            return 0

    # ------------------------------------------------------------------ one compaction
    async def compact_once(self, key: str, topic: str, p: int, pm: PartitionMerges) -> bool:
        pc = self.state.cleanings.get(key) or PartitionCleaning()
        cfg = self._config(topic)
        now = now_ms()
        first_dirty = max(pc.first_dirty, pm.start_offset)
        lso = self.published_lso(topic, p)
        chosen = choose_cleaning(pm.objects, first_dirty, lso, now, cfg)
        if chosen is None and cfg.max_compaction_lag_ms < DEFAULT_MAX_COMPACTION_LAG_MS:
            first = await self._first_batch_ms(key, topic, p,
                                               first_dirty_segment(pm.objects, first_dirty, lso))
            chosen = choose_cleaning(pm.objects, first_dirty, lso, now, cfg, first)
        if chosen is None:
            return False
        read = await self._read_all(topic, p, chosen)
        upper = chosen[-1].end_offset
        beyond = await self._aborted_beyond(topic, p, pm, chosen[0].base_offset, upper)
        producers = self._active_producers(key, upper)
        seq = pm.seq + 1
        cleaned = await self._clean(topic, p, chosen, read, first_dirty, beyond, producers,
                                    now, cfg.delete_retention_ms, cfg.segment_bytes)
        outputs = tuple(MergedObject(0, s.base_offset, s.end_offset, len(s.log),
                                     s.txnindex is not None, s.max_timestamp, seq)
                        for s in cleaned.segments)
        plan = CleanPlan(topic, p, seq, tuple(chosen),
                         tuple(crc32c(data) for data, _ in read), outputs,
                         tuple(crc32c(s.log) for s in cleaned.segments), first_dirty, now,
                         cfg.delete_retention_ms, cfg.segment_bytes, tuple(beyond),
                         {pid: (-1 if last.last_data_offset is None else last.last_data_offset,
                                last.epoch) for pid, last in producers.items()},
                         cfg.grace_ms, now)
        await self.commits.commit([LogRecord("compact", plan.to_record())])
        st = cleaned.stats
        log.info("compacting %s #%d: [%d, %d) %d -> %d bytes, %d -> %d records, %d keys",
                 key, seq, chosen[0].base_offset, upper, st.bytes_read, st.bytes_written,
                 st.records_read, st.records_kept, st.map_keys)
        faults.point("after_compact_plan")
        await self._publish(plan, cleaned)
        return True

    async def _first_batch_ms(self, key: str, topic: str, p: int,
                              segment: MergedObject | None) -> int:
        """The first batch timestamp of ``segment`` (-1: none), read once per segment (its
        first bytes): the ratio rule did not make the partition cleanable, and KIP-354
        counts ``max.compaction.lag.ms`` from a dirty segment's first batch, not its last."""
        if segment is None:
            return -1
        known = self._first_batch.get(key)
        if known is not None and known[0] == segment:
            return known[1]
        try:
            header = await self.io.run(self.storage.get, segment.path(topic, p), 0,
                                       FIRST_HEADER_BYTES)
        except FileNotFoundError:
            return -1  # replaced meanwhile: the next tick looks at what replaced it
        ms = first_batch_timestamp(header)
        self._first_batch[key] = (segment, ms)
        return ms

    def _active_producers(self, key: str, upper: int) -> dict[int, ProducerLast]:
        """Kafka's lastRecordsOfActiveProducers: the producers the coordinator still keeps
        sequences for in this partition, with the last offset of their last batch."""
        out = {}
        for prod in self.state.producers.values():
            hist = prod.seqs.get(key)
            if hist:
                last = hist[-1]
                end = last.base_offset + last.count - 1
                if end < upper:
                    out[prod.pid] = ProducerLast(end, last.epoch)
        return out

    async def _read_all(self, topic: str, p: int, objects: list[MergedObject]
                        ) -> list[tuple[bytes, bytes | None]]:
        loop = asyncio.get_running_loop()
        pool = self.merger._pool

        async def one(o: MergedObject) -> tuple[bytes, bytes | None]:
            data_f = loop.run_in_executor(pool, self.storage.get, o.path(topic, p))
            txn_f = loop.run_in_executor(pool, self.storage.get, o.path(
                topic, p, layout.TXNINDEX_SUFFIX)) if o.has_txnindex else None
            data = await data_f
            return data, (await txn_f if txn_f is not None else None)

        try:
            return list(await asyncio.gather(*(one(o) for o in objects)))
        except FileNotFoundError as exc:
            raise MergeRefused(f"a segment to compact is gone: {exc}") from exc

    async def _aborted_beyond(self, topic: str, p: int, pm: PartitionMerges, start: int,
                              upper: int) -> list[AbortedTxn]:
        """Aborted transactions with data in ``[start, upper)`` whose marker lies beyond:
        the ``.txnindex`` objects after ``upper`` (merged ones, then small ones), in
        order, until an entry's LSO reaches ``upper`` (TransactionIndex's rule)."""
        paths = [o.path(topic, p, layout.TXNINDEX_SUFFIX) for o in pm.objects
                 if o.base_offset >= upper and o.has_txnindex]
        found: list[AbortedTxn] = []
        for path in paths:
            entries, complete = await self._txn_entries(path, start, upper)
            found += entries
            if complete:
                return found
        merged_end = pm.merged_end
        after = f"{merged_end:0{layout.OFFSET_DIGITS}d}" if merged_end else None
        listing = await self.io.run(self.storage.list, layout.partition_dir(topic, p), after)
        # beyond the merged end: the small .txnindex objects (roots written before aborts'
        # entries were published) and the entries the tail publishes with abort markers
        beyond: dict[int, str | list[AbortedTxn]] = {}
        for obj in listing:
            parsed = layout.parse_segment_name(obj.name)
            if parsed is None or parsed.suffix != layout.TXNINDEX_SUFFIX \
                    or parsed.base_offset < merged_end:
                continue
            beyond[parsed.base_offset] = f"{layout.partition_dir(topic, p)}/{obj.name}"
        for run in self.state.shared.tail(partition_key(topic, p)):
            if run.aborted and run.base >= merged_end:
                beyond[run.base] = [AbortedTxn(*a) for a in run.aborted]
        for base in sorted(beyond):
            src = beyond[base]
            if isinstance(src, str):
                entries, complete = await self._txn_entries(src, start, upper)
            else:
                entries, complete = collect_aborted_txns(src, start, upper)
            found += entries
            if complete:
                break
        return found

    async def _txn_entries(self, path: str, start: int, upper: int
                           ) -> tuple[list[AbortedTxn], bool]:
        try:
            data = await self.io.run(self.storage.get, path)
        except FileNotFoundError as exc:
            raise MergeRefused(f"{path} vanished while compacting") from exc
        try:
            return collect_aborted_txns(decode_txn_index(data, source=path), start, upper)
        except LogFormatError as exc:
            raise MergeRefused(f"{path}: {exc}") from exc

    async def _clean(self, topic: str, p: int, objects: list[MergedObject] | tuple[
            MergedObject, ...], read: list[tuple[bytes, bytes | None]], first_dirty: int,
            beyond: list[AbortedTxn] | tuple[AbortedTxn, ...],
            producers: dict[int, ProducerLast], now: int, retention_ms: int,
            segment_bytes: int) -> CleanedLog:
        inputs = [CleanerInput(o.base_offset, o.end_offset, data, txn,
                               f"{self.storage.url}/{o.path(topic, p)}")
                  for o, (data, txn) in zip(objects, read, strict=True)]
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.merger._pool, lambda: clean_log(
                    inputs, first_dirty=first_dirty, aborted_beyond=beyond,
                    active_producers=producers, now_ms=now, delete_retention_ms=retention_ms,
                    segment_bytes=segment_bytes))
        except LogFormatError as exc:
            raise MergeRefused(f"segments cannot be compacted: {exc}") from exc

    async def _finish(self, plan: CleanPlan) -> bool:
        """A compaction logged but not published (a restart): the same inputs, checked
        against their CRCs, and the same logged parameters give the same bytes."""
        topic, p = plan.topic, plan.partition
        read = await self._read_all(topic, p, list(plan.inputs))
        for obj, crc, (data, _) in zip(plan.inputs, plan.input_crcs, read, strict=True):
            if len(data) != obj.size or crc32c(data) != crc:
                raise MergeRefused(f"segment at {obj.base_offset} of planned compaction "
                                   f"#{plan.seq} holds other bytes than were planned")
        producers = {pid: ProducerLast(None if last < 0 else last, epoch)
                     for pid, (last, epoch) in plan.producers.items()}
        cleaned = await self._clean(topic, p, plan.inputs, read, plan.first_dirty,
                                    plan.aborted_beyond, producers, plan.now_ms,
                                    plan.delete_retention_ms, plan.segment_bytes)
        if tuple(crc32c(s.log) for s in cleaned.segments) != plan.output_crcs:
            raise MergeRefused(f"planned compaction #{plan.seq} rebuilt to other bytes")
        await self._publish(plan, cleaned)
        return True

    async def _publish(self, plan: CleanPlan, cleaned: CleanedLog) -> None:
        """Write the cleaned segments and their indexes, then the manifest naming them;
        log ``compacted``."""
        topic, p = plan.topic, plan.partition
        files: list[tuple[str, bytes]] = []
        for out, seg in zip(plan.outputs, cleaned.segments, strict=True):
            files += out.files(topic, p, seg)
        await self.merger._put_all(files)
        faults.point("after_compact_output")
        key = partition_key(topic, p)
        manifest = plan.manifest(self.state.merges[key])
        await self.merger._put_all([(manifest.path, manifest.to_json())])
        faults.point("after_compact_manifest")
        await self.commits.commit([LogRecord("compacted", {"id": key, "seq": plan.seq,
                                                           "ms": now_ms()})])
        self.compactions_done += 1
        self.observer.object_written("compacted", len(files))
        self.observer.object_written("manifest")
