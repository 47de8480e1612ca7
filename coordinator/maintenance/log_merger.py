"""Merging small objects into Kafka segments, and deleting what was merged.

Kafka's brokers append to a segment file and roll it at ``segment.bytes``/``segment.ms``;
object storage has no append, so every commit leaves small objects. The coordinator is the
one writer of a root and is fenced by its log, so it is the natural owner of what a broker's
``LocalLog``/``LogCleaner`` threads do: this role, running in the background of the
coordinator's loop, turns the small objects below the published LSO into runs and closed
Kafka segments (``merge_policy``), and deletes what was merged once the grace period for
readers in flight (``file.delete.delay.ms``) has passed.

One merge of a partition, in order (``merge_state`` holds the records):

1. list the partition's small objects from its merged end M (S3 StartAfter: bounded by what
   is not merged yet, not by history); choose (``merge_policy.choose_merge``);
2. read the inputs and build the output (``log_format.segment_merge``: batches byte for
   byte, with ``.index``/``.timeindex``/``.txnindex``);
3. log ``merge`` with every input's size and CRC32C and the output's size: from here a
   restarted coordinator finishes the same merge with the same bytes (it reads the inputs
   again and refuses them if a CRC differs);
4. write the output put-if-absent, then the next manifest (which names it);
5. log ``merged``: M moves, the replaced objects become garbage with a due time.

Deleting is idempotent and runs after the due time; ``cleaned`` records what is gone. A
name freed that way can be taken by a zombie's late put-if-absent: readers never look below
M, and every cleanup deletes all small objects below what it cleans, whatever wrote them.

Merging never holds the commit path: every storage request of a merge goes through a
``MergeStore`` (on remote storage in a worker process, coordinator/merge_worker.py; on a
local root on this process's threads), the merger appends three records per merge (merge,
merged, cleaned), and one partition is merged at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from txnlog.log_format import layout, planted_bugs
from txnlog.log_format.errors import LogFormatError
from txnlog.log_format.manifest import DEFAULT_GRACE_MS, MIN_GRACE_MS, MergedObject
from txnlog.log_format.segments.log_cleaner import DEFAULT_MAX_COMPACTION_LAG_MS
from txnlog.log_format.storage import StorageError

from .. import faults
from ..state.coordinator_state import CoordinatorState
from ..state.merge_state import SMALL, MergeInput, MergePlan, PartitionMerges
from ..state.partition_state import partition_key
from ..state.runtime import Commits, Observer, StorageIO
from ..state.txn_log_records import LogRecord
from ..topic_config import compacts
from ..transaction.stable_changes import touched
from .merge_policy import (
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    Choice,
    MergeSettings,
    SmallObject,
    choose_merge,
    io_parallelism,
    open_since,
    roll_ms,
    unindexed_run,
)
from .merge_worker import IO_THREADS, Built, MergeStore, MergeWorker, Row, txnindex_of

log = logging.getLogger("txnlog.coordinator.maintenance.log_merger")

MERGES_PER_TICK = 64  # merges before the loop yields to a cleanup pass and a new tick
ORPHAN_SWEEP_S = 60.0  # how often _wal/ is listed for shared objects no confirm named


class MergeRefused(Exception):
    """A merge that must not go on: an input changed since it was planned, or an output
    name holds other bytes. The partition is left alone (logged, counted)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def _config_int(config: dict[str, Any], name: str, default: int, minimum: int) -> int:
    raw = config.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw))
    except ValueError:
        log.warning("topic config %s=%r is not an integer; using %d", name, raw, default)
        return default
    return max(minimum, value)


class LogMerger:
    """The background merge-and-delete loop of one coordinator."""

    def __init__(self, state: CoordinatorState, commits: Commits, io: StorageIO,
                 published_lso: Any, published: Any, observer: Observer,
                 settings: MergeSettings | None = None, enabled: bool = True) -> None:
        self.state = state
        self.commits = commits
        # every request of a merge goes through the store below, not the coordinator's IO
        # pool: only the root is taken from it
        self.storage = io.storage
        self.published_lso = published_lso  # (topic, partition) -> the published LSO
        self.published = published  # () -> True once this coordinator published a head
        self.observer = observer
        self.settings = settings or MergeSettings()
        self.enabled = enabled
        # partition key -> [records that touched it since it was looked at, first ms]
        self.dirty: dict[str, list[int]] = {}
        # When the offsets not merged yet were appended, so that a tail too small for a run
        # still closes by age (segment.ms) and merges when idle, on a timer, with no more
        # appends: partition key -> [[offset, ms]], ascending; the offsets from ``offset``
        # on were not appended before ``ms`` (the LEO seen by the first record after it
        # moved). This process's clock: a coordinator that starts counts its backlog from
        # its start (``_mark_backlog``).
        self.appends: dict[str, list[list[int]]] = {}
        self.last_append: dict[str, int] = {}  # partition key -> ms of the last touch
        # partitions whose look found nothing to merge (no small object with a successor
        # below the published LSO, no run): the published LSO then; looked at again once
        # it moves or a record touches them, not at every tick
        self.quiet: dict[str, int] = {}
        # shared objects some partition merged runs out of (only the planted bug
        # shared_deleted_early reads it)
        self._merged_from: set[str] = set()
        # shared objects seen named by nothing: path -> when first seen (orphan sweep)
        self._orphans: dict[str, float] = {}
        self._orphan_listed = 0.0
        self.on_merged: Callable[[], None] | None = None  # asks for a stable head
        self.idle_looked: set[str] = set()  # looked at idle since their last touch
        self.sweep: list[str] = []  # every partition, once, at start (old roots convert)
        self.refused: set[str] = set()
        self.merges_done = 0
        self._task: asyncio.Task[None] | None = None
        # a merge's requests go out up to merge_policy.io_parallelism at a time
        self._pool = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="coord-merge")
        # on remote storage, a merge's requests go out from a worker process (see
        # merge_worker: the S3 client's CPU would hold the GIL against the commit path);
        # on a local root, from this store on this process's threads
        self._store = MergeStore(self.storage, self._pool)
        spec = getattr(self.storage, "spec", None)
        isolate = self.settings.isolate
        if isolate is None:
            isolate = not self.storage.url.startswith("file:")
        self.worker = MergeWorker(*spec, timeout_s=self.settings.worker_timeout_s) \
            if isolate and spec is not None else None
        self._wake: asyncio.Event | None = None
        # other roles run in this loop, between finishing planned merges and new ones, so
        # they never interleave with a merge of the partition: retention and the
        # log cleaner (it shares the manifest sequence too). They return the merges they
        # count against the tick's budget; ``blocked`` holds a partition's merges back
        # while a role has work planned there.
        self.hooks: list[Callable[[], Awaitable[Any]]] = []
        self.blocked: list[Callable[[str], bool]] = []
        state.observers.append(self.observe)

    # ------------------------------------------------------------------ what to look at
    def observe(self, state: CoordinatorState, rec: LogRecord) -> None:
        """Count the records touching each partition (a commit leaves objects there)."""
        if rec.kind == "topic":
            return  # a new topic's partitions hold no objects yet
        keys = touched(state, rec)
        if not keys:
            return
        ms = now_ms()
        for key in keys:
            entry = self.dirty.get(key)
            if entry is None:
                self.dirty[key] = [1, ms]
            else:
                entry[0] += 1
            part = state.partitions.get(key)
            self._note_append(key, part.leo if part is not None else 0, ms)

    def _note_append(self, key: str, leo: int, ms: int) -> None:
        """A record touched ``key`` at ``ms`` with its LEO at ``leo`` (before the record)."""
        marks = self.appends.setdefault(key, [])
        if not marks or leo > marks[-1][0]:
            marks.append([leo, ms])
        self.last_append[key] = ms
        self.quiet.pop(key, None)
        self.idle_looked.discard(key)

    def appended_ms(self, key: str, offset: int) -> int:
        """When ``offset`` (the first small object's, M) was appended, as far as this
        process knows (0: not known); forgets what lies below it."""
        marks = self.appends.get(key)
        if not marks:
            return 0
        i = 0
        while i + 1 < len(marks) and marks[i + 1][0] <= offset:
            i += 1
        del marks[:i]
        return marks[0][1]

    def _roll_ms(self, topic: str) -> int:
        """The open segment's roll age for ``topic`` (``merge_policy.roll_ms``)."""
        cfg = self._config(topic)
        return roll_ms(_config_int(cfg, "segment.ms", DEFAULT_SEGMENT_MS, 1), compacts(cfg),
                       _config_int(cfg, "max.compaction.lag.ms", DEFAULT_MAX_COMPACTION_LAG_MS,
                                   1))

    def _candidates(self, now: int) -> list[str]:
        """The partitions to look at this tick: touched ``min_objects`` times; or whose open
        segment's first record (its runs', else its first small object's) is older than
        the roll age; or idle for ``idle_ms`` and not looked at since. The last two are
        timers: they hold with no more appends."""
        s = self.settings
        due = [k for k, (n, _) in self.dirty.items() if n >= s.min_objects]
        rolls: dict[str, int] = {}
        for key in list(self.appends):
            topic, p = self._split(key)
            if topic not in self.state.topics:
                self._forget(key)
                continue
            if key in self.quiet:
                if self.quiet[key] == self.published_lso(topic, p):
                    continue
                del self.quiet[key]
            pm = self.state.merges.get(key) or PartitionMerges()
            if pm.planned is not None:
                continue
            since = open_since(pm.open_since_ms if pm.open_runs() else 0,
                               self.appended_ms(key, pm.merged_end))
            if topic not in rolls:
                rolls[topic] = self._roll_ms(topic)
            aged = bool(since) and now - since >= rolls[topic]
            idle = key not in self.idle_looked and \
                now - self.last_append.get(key, now) >= s.idle_ms
            if aged or idle:
                due.append(key)
        for key, pm in self.state.merges.items():
            if pm.open_since_ms and pm.planned is None and pm.open_runs():
                topic, _ = self._split(key)
                if topic not in rolls:
                    rolls[topic] = self._roll_ms(topic)
                if now - pm.open_since_ms >= rolls[topic]:
                    due.append(key)
        while self.sweep and len(due) < MERGES_PER_TICK:
            due.append(self.sweep.pop())
        return [k for k in dict.fromkeys(due) if k not in self.refused]

    def _forget(self, key: str) -> None:
        """Drop what is known of a deleted topic's partition's appends."""
        self.appends.pop(key, None)
        self.last_append.pop(key, None)
        self.quiet.pop(key, None)
        self.idle_looked.discard(key)

    def _split(self, key: str) -> tuple[str, int]:
        parsed = layout.parse_partition_dir(key)
        if parsed is None:
            raise ValueError(f"not a partition key: {key!r}")
        return parsed

    def _config(self, topic: str) -> dict[str, Any]:
        meta = self.state.topics.get(topic)
        return dict(meta.get("config") or {}) if meta else {}

    # ------------------------------------------------------------------------ the loop
    def start(self) -> None:
        if not self.enabled and not self.hooks:
            return
        if not self.state.merge_swept:  # a root written before merging: look at all once
            self.sweep = [partition_key(t, p) for t, meta in self.state.topics.items()
                          for p in range(int(meta["partitions"]))]
        self._mark_backlog()
        if self.enabled and self.worker is not None:
            self.worker.start()  # its start now, not among commits at the first merge
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="merger")

    def _mark_backlog(self) -> None:
        """Partitions with offsets above their merged end are looked at: what is dirty is
        this process's memory, so a coordinator that starts (a restart, a takeover) knows
        nothing of what its predecessor left unmerged, and without this a partition that
        no commit touches again kept its backlog for good (found by the chaos harness:
        600+ small objects left after a coordinator-kill run, every fresh reader listing
        them). The count is the offsets above M, at least the objects there (records
        replayed at start may have counted a few already)."""
        now = now_ms()
        for key, part in self.state.partitions.items():
            pm = self.state.merges.get(key)
            merged_end = pm.merged_end if pm is not None else 0
            backlog = part.leo - merged_end
            if backlog > 0:
                entry = self.dirty.setdefault(key, [backlog, now])
                entry[0] = max(entry[0], backlog)
                # appended before this process started: counted from now (a bound that
                # restarts with the coordinator, never one that is lost)
                if key not in self.appends:
                    self._note_append(key, merged_end, now)

    def kick(self) -> None:
        """Look at partitions now (tests and benches; the loop also ticks by itself)."""
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:  # storage is down or slow: merging waits, commits go on
                self.observer.storage_error()
                log.warning("merging paused by a storage error: %s", exc)
            # Anything else ends the task, and the server stops the process (a supervisor
            # restarts it, the next coordinator finishes the planned merge): never a
            # coordinator that serves on with merging silently dead.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.interval_s)
            self._wake.clear()

    async def tick(self) -> int:
        """Finish planned merges, merge what is due, delete what is due; merges done."""
        done = 0
        if not self.published():
            return done  # no LSO of this coordinator's yet: nothing is known to be below it
        for key, pm in list(self.state.merges.items()):
            # A planned merge is finished even with --no-merge: it is in the log (a
            # predecessor's), and retention and compaction of the partition wait for it.
            if pm.planned is not None and key not in self.refused:
                await self._guarded(key, self._finish(pm.planned))
                done += 1
        for hook in self.hooks:
            done += int(await hook() or 0)
        if not self.enabled:  # --no-merge: retention's deletions still happen
            await self.clean_due()
            return done
        for key in self._candidates(now_ms()):
            if done >= MERGES_PER_TICK:
                break  # the rest stay due: looked at next tick
            if any(held(key) for held in self.blocked):
                continue
            self.dirty.pop(key, None)
            if now_ms() - self.last_append.get(key, now_ms()) >= self.settings.idle_ms:
                self.idle_looked.add(key)
            more = True
            while more and done < MERGES_PER_TICK:
                more = await self._guarded(key, self.merge_once(key))
                done += more
            if more:  # the tick's budget ran out, not the partition's merges
                self.dirty.setdefault(key, [self.settings.min_objects, now_ms()])
        await self.clean_due()
        if not self.state.merge_swept and not self.sweep:
            await self.commits.commit([LogRecord("swept", {"id": ""})])
        return done

    async def _guarded(self, key: str, coro: Any) -> bool:
        try:
            return bool(await coro)
        except MergeRefused as exc:
            self.refused.add(key)
            self.observer.storage_error()
            log.error("merging %s stopped: %s", key, exc)
            return False

    # ----------------------------------------------------------------------- one merge
    async def merge_once(self, key: str) -> bool:
        """Plan, log, write and publish one merge of partition ``key``; False: none due."""
        topic, p = self._split(key)
        if topic not in self.state.topics:
            return False
        pm = self.state.merges.get(key) or PartitionMerges()
        if pm.planned is not None:
            await self._finish(pm.planned)
            return True
        lso = self.published_lso(topic, p)
        if planted_bugs.enabled("merge_above_lso"):  # planted bug: past the LSO
            lso = 1 << 62
        merged_end = pm.merged_end
        small = await self._list_small(topic, p, merged_end if pm.seq else None, lso)
        if pm.seq and small and small[0].base_offset != merged_end:
            raise MergeRefused(f"the first object above the merged end {merged_end} is at "
                               f"{small[0].base_offset}")
        if not small and not pm.open_runs():
            self.quiet[key] = lso  # nothing to merge until the LSO moves or a record comes
        cfg = self._config(topic)
        now = now_ms()
        first_small_ms = self.appended_ms(key, merged_end)
        choice = choose_merge(
            pm.open_runs(), small,
            segment_bytes=_config_int(cfg, "segment.bytes", DEFAULT_SEGMENT_BYTES, 1),
            segment_ms=self._roll_ms(topic), open_since_ms=pm.open_since_ms, now_ms=now,
            settings=self.settings, first_small_ms=first_small_ms,
            idle=now - self.last_append.get(key, now) >= self.settings.idle_ms)
        if choice is None:
            return False
        parallel = io_parallelism(len(small), self.settings.min_objects)
        inputs, built = await self._build(topic, p, choice, parallel)
        grace = _config_int(cfg, "file.delete.delay.ms", DEFAULT_GRACE_MS, MIN_GRACE_MS)
        remaining_runs = [r for r in pm.open_runs() if r not in choice.runs]
        if choice.level == 0:
            since_ms = pm.open_since_ms if remaining_runs else 0
        else:  # the open segment's age is its first record's, as Kafka's roll counts it
            since_ms = pm.open_since_ms if pm.open_runs() else (first_small_ms or now)
        output = MergedObject(choice.level, built.base_offset, built.end_offset,
                              built.size, built.has_txnindex, built.max_timestamp,
                              indexed=not unindexed_run(choice.level, built.size))
        plan = MergePlan(topic, p, pm.seq + 1, tuple(inputs), output, since_ms, grace, now)
        await self.commits.commit([LogRecord("merge", plan.to_record())])
        faults.point("after_merge_plan")
        await self._publish(plan)
        return True

    async def _list_small(self, topic: str, p: int, merged_end: int | None,
                          lso: int) -> list[SmallObject]:
        """The small objects from M whose successor exists at or below the published LSO."""
        after = f"{merged_end:0{layout.OFFSET_DIGITS}d}" if merged_end else None
        listing = await self._call("list", layout.partition_dir(topic, p), after)
        logs: list[tuple[int, int]] = []
        txn: set[int] = set()
        for name, size in listing:
            parsed = layout.parse_segment_name(name)
            if parsed is None or (merged_end is not None and parsed.base_offset < merged_end):
                continue
            if parsed.suffix == layout.LOG_SUFFIX:
                logs.append((parsed.base_offset, size))
            elif parsed.suffix == layout.TXNINDEX_SUFFIX:
                txn.add(parsed.base_offset)
        # the partition's runs in shared objects (its tail in the state): never listed
        key = partition_key(topic, p)
        tail = [t for t in self.state.shared.tail(key)
                if merged_end is None or t.base >= merged_end]
        runs = [(t.base, t.size, (t.path, t.position), t.end) for t in tail]
        aborted = {t.base: t.aborted for t in tail if t.aborted}
        rows = sorted([(base, size, None, None) for base, size in logs] + runs)

        def small(base: int, end: int, size: int, loc: tuple[str, int] | None) -> SmallObject:
            # an abort's markers in a shared object carry their .txnindex entries
            return SmallObject(base, end, size, base in txn or base in aborted, loc,
                               aborted.get(base, ()))

        out = []
        for (base, size, loc, _), (nxt, _, _, _) in itertools.pairwise(rows):
            if nxt > lso:
                break
            out.append(small(base, nxt, size, loc))
        else:
            # the last one, if a run: its end is known exactly (an object of the partition's
            # own is named by its base only, so it waits for a successor), so an idle
            # partition's last run merges too and its shared object can go
            if rows and rows[-1][2] is not None and rows[-1][3] <= lso:
                base, size, loc, end = rows[-1]
                out.append(small(base, end, size, loc))
        return out

    async def _call(self, method: str, *args: Any) -> Any:
        """``MergeStore.<method>(*args)``: in the worker process on remote storage, else on
        this process's threads."""
        if self.worker is not None:
            return await self.worker.call(method, *args)
        return await asyncio.to_thread(getattr(self._store, method), *args)

    async def _read_and_merge(self, topic: str, p: int, rows: list[Row], parallel: int
                              ) -> tuple[list[tuple[int, int]], Built]:
        """Each input's (size, CRC32C) and what the merged segment is (the store holds
        its bytes until ``_publish`` writes them); ``parallel`` requests at a time."""
        try:
            return await self._call("build", topic, p, rows, parallel)
        except LogFormatError as exc:
            raise MergeRefused(f"inputs cannot be merged: {exc}") from exc

    async def _build(self, topic: str, p: int, choice: Choice, parallel: int
                     ) -> tuple[list[MergeInput], Built]:
        rows: list[Row] = [(r.level, r.base_offset, r.end_offset, r.has_txnindex, None)
                           for r in choice.runs]
        rows += [(SMALL, s.base_offset, s.end_offset, txnindex_of(s.has_txnindex, s.aborted),
                  None if s.location is None else (*s.location, s.size))
                 for s in choice.small]
        metas, built = await self._read_and_merge(topic, p, rows, parallel)
        self._merged_from.update(row[4][0] for row in rows if row[4] is not None)
        aborted = [()] * len(choice.runs) + [s.aborted for s in choice.small]
        inputs = [MergeInput(row[0], row[1], row[2], size, crc, bool(row[3]),
                             None if row[4] is None else (row[4][0], row[4][1]), ab)
                  for row, (size, crc), ab in zip(rows, metas, aborted, strict=True)]
        return inputs, built

    async def _finish(self, plan: MergePlan) -> bool:
        """A merge logged but not published (a restart): the same inputs, checked against
        their CRCs, give the same bytes."""
        rows: list[Row] = [(i.level, i.base_offset, i.end_offset,
                            txnindex_of(i.has_txnindex, i.aborted),
                            None if i.location is None else (*i.location, i.size))
                           for i in plan.inputs]
        try:
            metas, built = await self._read_and_merge(
                plan.topic, plan.partition, rows,
                io_parallelism(len(rows), self.settings.min_objects))
        except FileNotFoundError as exc:
            raise MergeRefused(f"an input of planned merge #{plan.seq} is gone: {exc}") from exc
        for inp, (size, crc) in zip(plan.inputs, metas, strict=True):
            if size != inp.size or crc != inp.crc:
                raise MergeRefused(f"input at {inp.base_offset} (level {inp.level}) of planned "
                                   f"merge #{plan.seq} holds other bytes than were planned")
        if built.size != plan.output.size:
            raise MergeRefused(f"planned merge #{plan.seq} rebuilt to {built.size} bytes, "
                               f"not {plan.output.size}")
        await self._publish(plan)
        return True

    async def _publish(self, plan: MergePlan) -> None:
        """Write the output and its indexes (built and held by the store), then the
        manifest naming it; log ``merged``."""
        topic, p, out = plan.topic, plan.partition, plan.output
        refused, written = await self._call("write_built", topic, p, out)
        if refused:
            raise MergeRefused(f"{self.storage.url}/{refused[0]} holds other bytes than the "
                               "merge computes")
        faults.point("after_merge_output")
        if not self._still_planned(plan):
            return  # the topic was deleted meanwhile (DeleteTopics drops the plan)
        pm = self.state.merges[partition_key(topic, p)]
        manifest = pm.manifest_after(plan)
        if not await self._call("put_if_absent", manifest.path, manifest.to_json()):
            raise MergeRefused(f"{self.storage.url}/{manifest.path} holds other bytes than "
                               "the merge computes")
        faults.point("after_merge_manifest")
        if not self._still_planned(plan):
            return  # deleted while the manifest was written: the delete's sweep removes it
        await self.commits.commit([LogRecord("merged", {
            "id": partition_key(topic, p), "seq": plan.seq, "ms": now_ms()})])
        self.merges_done += 1
        self.observer.merge_written(out.level, written)
        self.observer.object_written("manifest")
        if any(i.location is not None for i in plan.inputs) and self.on_merged is not None:
            # runs left the tail: the next head drops them (readers ignore runs below M
            # anyway; this keeps heads short and names no object that will be deleted)
            self.on_merged()

    def _still_planned(self, plan: MergePlan) -> bool:
        """Whether ``plan`` is still the partition's planned merge. By its number and output,
        not by identity: the state holds the plan parsed back from its log record, an equal but
        other object (compared by identity, every merge stopped here once and was built and
        written a second time by the next look, as after a restart)."""
        pm = self.state.merges.get(partition_key(plan.topic, plan.partition))
        return (pm is not None and pm.planned is not None and pm.planned.seq == plan.seq
                and pm.planned.output == plan.output)

    async def _put_all(self, files: list[tuple[str, bytes]]) -> None:
        """Put-if-absent ``files`` in parallel on this process's threads (the log
        cleaner's outputs, built here)."""
        loop = asyncio.get_running_loop()
        oks = await asyncio.gather(*(loop.run_in_executor(
            self._pool, self.storage.put_if_absent, path, data) for path, data in files))
        for (path, _), ok in zip(files, oks, strict=True):
            if not ok:
                raise MergeRefused(f"{self.storage.url}/{path} holds other bytes than the "
                                   "merge computes")

    # ------------------------------------------------------------------------- deleting
    async def clean_due(self, now: int | None = None) -> int:
        """Delete every garbage row past its due time; objects deleted."""
        now = now_ms() if now is None else now
        if planted_bugs.enabled("delete_before_grace"):  # planted bug: no grace at all
            now = 1 << 62
        deleted = 0
        for key, pm in list(self.state.merges.items()):
            due = 0
            while due < len(pm.garbage) and pm.garbage[due].due_ms <= now:
                due += 1
            if not due:
                continue
            topic, p = self._split(key)
            rows = pm.garbage[:due]
            paths = [path for row in rows for o in row.merged for path in o.paths(topic, p)]
            paths += [layout.manifest_path(topic, p, seq) for row in rows
                      for seq in range(row.manifest_lo, row.manifest_hi)]
            await self._call("delete_many", paths)
            small = await self._call("delete_small_below", topic, p, rows[-1].small_below)
            await self.commits.commit([LogRecord("cleaned", {"id": key, "n": due})])
            deleted += len(paths) + small
            self.observer.object_written("deleted", len(paths) + small)
        return deleted + await self.clean_shared(now)

    async def clean_shared(self, now: int) -> int:
        """Delete the shared objects no partition's tail names any more whose grace period
        is over (every partition they held runs of has merged past them), and log it."""
        doomed_orphans = await self._orphans_due()
        if planted_bugs.enabled("shared_deleted_early"):
            # planted bug (chaos self-test): a shared object deleted as soon as one of its
            # partitions merged past it; the others still read their runs from it
            doomed = sorted({e.path for tail in self.state.shared.tails.values()
                             for e in tail if e.path in self._merged_from})
            doomed += self.state.shared.due(1 << 62)
        else:
            doomed = self.state.shared.due(now)
        doomed = sorted(set(doomed) | set(doomed_orphans))
        if not doomed:
            return 0
        await self._call("delete_many", doomed)
        await self.commits.commit([LogRecord("shared_cleaned", {"id": "", "paths": doomed})])
        self.observer.object_written("deleted", len(doomed))
        return len(doomed)

    async def _orphans_due(self) -> list[str]:
        """Shared objects no tail and no garbage row names, seen so by this process for
        ``orphan_age_s`` (one LIST of ``_wal/`` per ORPHAN_SWEEP_S): a zombie's object, a
        writer's killed between its put and its confirm. A restarted coordinator starts
        counting again (what it saw is memory, never the log): later, never wrong."""
        now = time.monotonic()
        if now - self._orphan_listed < min(ORPHAN_SWEEP_S, self.settings.orphan_age_s / 2):
            return []
        self._orphan_listed = now
        listing = await self._call("list", layout.SHARED_DIR, None)
        shared = self.state.shared
        # a transaction still being completed names its marker object before its markers
        # are part of any tail (Prepare to Complete)
        markers = {t.plan.marker_object for t in self.state.txns.values()
                   if t.plan is not None and t.plan.marker_object is not None}
        seen: dict[str, float] = {}
        due = []
        for name, _size in listing:
            path = f"{layout.SHARED_DIR}/{name}"
            if path in shared.refs or path in shared.garbage or path in markers:
                continue
            first = self._orphans.get(path, now)
            seen[path] = first
            if now - first >= self.settings.orphan_age_s:
                due.append(path)
        self._orphans = seen
        return due

    # ------------------------------------------------------------------------ lifecycle
    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._pool.shutdown(wait=False)
        if self.worker is not None:
            self.worker.close()
