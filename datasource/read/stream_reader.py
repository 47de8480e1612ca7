"""``spark.readStream.format("txnlog")``: micro-batches of offset ranges, with admission control.

Offsets are per topic-partition next offsets (``stream_offsets``), bounded by each
partition's LSO (read_committed) or HW, all taken from one stable snapshot per call — so a
batch never ends inside an undecided transaction and, because one snapshot moves every
partition at once, a batch holds a committed transaction in all its partitions or in none.

Where things run (PySpark 4.3): ``initialOffset``/``latestOffset``/``partitions``/``commit``
in one long-lived driver-side Python process per query run (so ``self`` may cache the last
snapshot and the AvailableNow target), ``read`` in executors (stateless). ``stop()`` is never
called, so nothing here needs it; ``commit(end)`` arrives one batch late and only matters for
``groupId``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from .. import stream_offsets
from ..options import ReadOptions
from ..stream_offsets import TopicPartition
from .planning import (
    DataLossError,
    OffsetRange,
    partition_snapshot,
    plan_ranges,
    split_ranges,
    subscribed_partitions,
)
from .projection import check_requested_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType
    from txnlog.log_format.stable import StableSnapshot
    from txnlog.log_format.storage import Storage

log = logging.getLogger(__name__)


def rate_limit(begin: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               budget: int) -> dict[TopicPartition, int]:
    """Advance ``budget`` offsets in total, split in proportion to each partition's backlog.

    As Spark's KafkaMicroBatchStream.rateLimit, a share below 1 rounds up, so a small
    partition is never starved, and the other shares round down. Unlike it, the offsets
    the rounding down leaves over go to the partitions with the largest fractional shares
    (largest remainders, ties in partition order), so a batch carries exactly ``budget``
    offsets: a backlog of N x maxOffsetsPerTrigger drains in N micro-batches, where the
    floor alone leaves up to one offset per partition behind in each and a last
    micro-batch of leftovers pays a whole trigger's fixed cost."""
    sizes = {tp: max(0, end[tp] - begin[tp]) for tp in end}
    total = sum(sizes.values())
    if total <= budget:
        return dict(end)
    steps: dict[TopicPartition, int] = {}
    remainders: list[tuple[float, int, TopicPartition]] = []
    for i, (tp, size) in enumerate(sizes.items()):
        share = budget * (size / total)
        steps[tp] = min(size, math.ceil(share) if share < 1 else math.floor(share))
        if share >= 1 and steps[tp] < size:
            remainders.append((share - steps[tp], -i, tp))
    left = budget - sum(steps.values())
    for _, _, tp in sorted(remainders, reverse=True)[:max(0, left)]:
        steps[tp] += 1
    return {tp: min(end[tp], begin[tp] + steps[tp]) for tp in end}


def take_tails(cut: Mapping[TopicPartition, int], data_end: Mapping[TopicPartition, int],
               end: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """A partition whose ``cut`` reached the end of its visible records (``data_end``)
    takes the offsets after them up to ``end``: markers, aborted or compacted-away data,
    nothing a micro-batch of its own would return a row for. Any other partition ends at
    its cut."""
    return {tp: end[tp] if cut[tp] >= data_end[tp] else cut[tp] for tp in end}


class TxnlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        # key.format/value.format: planned once per query run, keeping the column types
        # the query was started with (the newest schema version that still makes them)
        self.decodings: dict[str, Any] = {}
        if opts.framings:
            from .value_decoding import plan_all

            self.decodings = plan_all(opts, {f.name: f.dataType for f in schema.fields
                                             if f.name in ("key", "value")})
        check_requested_schema(
            schema, opts.include_headers,
            *(d.value_type() if (d := self.decodings.get(c)) is not None else None
              for c in ("value", "key")))
        self.opts = opts
        self.schema = schema
        self._snapshot: StableSnapshot | None = None  # never go backwards within a run
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow
        self._latest: dict[TopicPartition, int] | None = None  # for reportLatestOffset
        self._group_producer: tuple[int, int] | None = None
        # minOffsetsPerTrigger: when the last batch was let through (None: never, so the
        # first trigger runs at once, as Spark's Kafka source with lastTriggerMillis = 0).
        self._last_trigger_s: float | None = None

    # ---- helpers (driver) --------------------------------------------------------------
    def _storage(self) -> Storage:
        from txnlog.log_format.storage import Storage

        return Storage.for_url(self.opts.root, self.opts.storage_options)

    def _group_meta(self) -> dict[str, str] | None:
        if not self.opts.group_id:
            return None
        return {"id": self.opts.group_id, "root": self.opts.root}

    def _encode(self, offsets: Mapping[TopicPartition, int]) -> dict:
        return stream_offsets.encode(offsets, self._group_meta())

    def _refresh(self) -> StableSnapshot | None:
        from txnlog.log_format.stable import read_latest_stable

        self._snapshot = read_latest_stable(self._storage(), not_below=self._snapshot)
        return self._snapshot

    def _reader(self, topic: str, partition: int) -> Any:
        from txnlog.log_format.reader import PartitionReader

        return PartitionReader(self._storage(), topic, partition,
                               isolation_level=self.opts.isolation_level,
                               snapshot=partition_snapshot(self._snapshot, topic, partition))

    def _available(self) -> dict[TopicPartition, int]:
        """Every subscribed partition's LSO (read_committed) or HW, from a fresh snapshot.

        Listing topics again each time is how new partitions and new topics matching
        ``subscribePattern`` are picked up while the query runs."""
        snap = self._refresh()
        out = {}
        for topic, p in subscribed_partitions(self._storage(), self.opts):
            if snap is None:
                out[(topic, p)] = 0
            elif self.opts.read_committed:
                out[(topic, p)] = snap.lso(topic, p)
            else:
                out[(topic, p)] = snap.hw(topic, p)
        return out

    def _earliest(self, tp: TopicPartition, latest: int) -> int:
        return min(self._reader(*tp).earliest_offset(), latest)

    # ---- DataSourceStreamReader ---------------------------------------------------------
    def initialOffset(self) -> dict:
        ranges, snapshot = plan_ranges(self._storage(), self.opts)
        if snapshot is not None and (self._snapshot is None
                                     or snapshot.key > self._snapshot.key):
            self._snapshot = snapshot
        return self._encode({(r.topic, r.partition): r.start for r in ranges})

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark's Kafka source: min and max together are a composite limit. PySpark has
        no CompositeReadLimit, so with both the default is ReadMaxRows and ``latestOffset``
        applies the minimum from the options (ReadMaxRows only ever arrives as this
        default: Trigger.Once passes ReadAllAvailable, which waives both, as in Kafka)."""
        if self.opts.min_offsets_per_trigger is not None \
                and self.opts.max_offsets_per_trigger is None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else self._encode(self._latest)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        available = self._available()
        self._latest = available
        begin = self._begin(stream_offsets.decode(start), available)
        end = dict(available)
        if self._target is not None:
            # AvailableNow: never past the target; partitions born since then stay put.
            end = {tp: min(off, self._target.get(tp, begin[tp])) for tp, off in end.items()}
        end = {tp: max(begin[tp], off) for tp, off in end.items()}
        if isinstance(limit, ReadMinRows | ReadMaxRows) and self._target is None \
                and self.opts.min_offsets_per_trigger is not None \
                and self._delay_batch(begin, available):
            return start
        if isinstance(limit, ReadMaxRows | ReadMaxBytes):
            end = self._admit(begin, end, limit)
        return self._encode(end)

    def _admit(self, begin: dict[TopicPartition, int], end: dict[TopicPartition, int],
               limit: ReadMaxRows | ReadMaxBytes) -> dict[TopicPartition, int]:
        """Admission control that counts data: the budget is split over each partition's
        backlog up to where its visible records end (``_data_ends``), and a partition cut
        there takes the rest up to ``end`` with it - a tail of COMMIT/ABORT markers (and,
        under read_committed, aborted data) that alone would cost a micro-batch, a whole
        trigger and a sink transaction for no record. So N budgets of data drain in N
        micro-batches, where Spark's Kafka source, counting every offset, runs one more
        for the markers the budget left behind."""
        if isinstance(limit, ReadMaxRows) and \
                sum(max(0, end[tp] - begin[tp]) for tp in end) <= limit.max_rows:
            return end  # everything fits: no need to know where the data ends
        data = self._data_ends(begin, end)
        if isinstance(limit, ReadMaxRows):
            cut = rate_limit(begin, data, limit.max_rows)
        else:
            cut = self._byte_limit(begin, data, limit.max_bytes)
        return take_tails(cut, data, end)

    def _data_ends(self, begin: Mapping[TopicPartition, int],
                   end: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the offset in ``[begin, end]`` after which ``[.., end)`` holds no
        visible record (``PartitionReader.visible_end``: the last objects' batch headers,
        a few small GETs). Remembered per partition with the ``end`` it was found for:
        offsets below an LSO never change, so AvailableNow (one target) asks storage once
        per partition and run, and a moving end only has its new tail read."""
        from txnlog.log_format.errors import TxnlogError

        tails: dict[TopicPartition, tuple[int, int]] = self.__dict__.setdefault("_tails", {})
        out = {}
        for tp, e in end.items():
            b = begin[tp]
            known = tails.get(tp)
            if e <= b:
                out[tp] = e
                continue
            if known is not None and known[0] == e:
                out[tp] = max(b, known[1])
                continue
            # [known d, known end) holds nothing visible: look at what came after it only
            floor = known[0] if known is not None and b <= known[0] < e else b
            try:
                d = self._partition_reader(tp).visible_end(floor, e)
            except (TxnlogError, OSError) as exc:
                # only an optimisation: the batch then ends where the budget says
                log.warning("%s-%d: where its data ends could not be read (%s); the budget "
                            "counts its tail's offsets", tp[0], tp[1], exc)
                out[tp] = e
                continue
            if known is not None and d == floor == known[0]:
                d = known[1]
            tails[tp] = (e, d)
            out[tp] = max(b, d)
        return out

    def _partition_reader(self, tp: TopicPartition) -> Any:
        """A driver-side reader per partition, kept across triggers with its listing (listed
        again when the HW moves) and index caches, on the latest snapshot."""
        readers: dict[TopicPartition, Any] = self.__dict__.setdefault("_readers", {})
        reader = readers.get(tp)
        if reader is None:
            reader = readers[tp] = self._reader(*tp)
        else:
            reader.advance_snapshot(self._snapshot)
        return reader

    def _delay_batch(self, begin: Mapping[TopicPartition, int],
                     available: Mapping[TopicPartition, int]) -> bool:
        """Spark's KafkaMicroBatchStream.delayBatch: skip this trigger while fewer than
        minOffsetsPerTrigger offsets are available, unless maxTriggerDelay has passed since
        the last batch. (Not under Trigger.AvailableNow, which must end: it reads all.)"""
        assert self.opts.min_offsets_per_trigger is not None
        now = time.monotonic()
        if self._last_trigger_s is None or \
                (now - self._last_trigger_s) * 1000 >= self.opts.max_trigger_delay_ms:
            self._last_trigger_s = now
            return False
        new = sum(max(0, off - begin.get(tp, 0)) for tp, off in available.items())
        if new < self.opts.min_offsets_per_trigger:
            return True
        self._last_trigger_s = now
        return False

    def _begin(self, start: dict[TopicPartition, int], available: dict[TopicPartition, int]
               ) -> dict[TopicPartition, int]:
        """Where each partition continues: its offset in ``start``, else (a partition or
        topic that appeared while running) its earliest offset, as Spark's Kafka source."""
        gone = sorted(set(start) - set(available))
        if gone:
            msg = (f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} were read by this "
                   "query but no longer exist (topic deleted or root replaced)")
            if self.opts.fail_on_data_loss:
                raise DataLossError(msg + "; set failOnDataLoss=false to go on without them")
            log.warning("%s; going on without them (failOnDataLoss=false)", msg)
        begin = {}
        for tp, latest in available.items():
            if tp in start:
                off = start[tp]
                if off > latest:
                    msg = (f"{tp[0]}-{tp[1]}: the query's offset {off} is beyond the "
                           f"partition's end {latest} (was the root replaced?)")
                    if self.opts.fail_on_data_loss:
                        raise DataLossError(msg + "; set failOnDataLoss=false to go on from "
                                            "the partition's end")
                    # Spark's Kafka source: "offset was changed ..., some data may have been
                    # missed"; the batch ends at the partition's end and the next one starts
                    # there (never waiting for an offset that may never come)
                    log.warning("%s; going on from %d (failOnDataLoss=false)", msg, latest)
                    off = latest
                begin[tp] = off
            else:
                begin[tp] = self._earliest(tp, latest)
        return begin

    def _byte_limit(self, begin: dict[TopicPartition, int], end: dict[TopicPartition, int],
                    budget: int) -> dict[TopicPartition, int]:
        """ReadMaxBytes: estimate each backlog's bytes from segment sizes (bytes per offset
        of the objects it spans), split the byte budget in proportion, convert back."""
        per_offset: dict[TopicPartition, float] = {}
        for tp in end:
            if end[tp] <= begin[tp]:
                continue
            total_bytes = total_offsets = 0
            for seg in self._partition_reader(tp).segments():
                seg_end = seg.end_offset if seg.end_offset is not None else end[tp]
                if seg_end <= begin[tp] or seg.base_offset >= end[tp] or seg.size == 0:
                    continue
                total_bytes += seg.size
                total_offsets += max(1, seg_end - seg.base_offset)
            per_offset[tp] = total_bytes / total_offsets if total_offsets else 1.0
        backlog = {tp: (end[tp] - begin[tp]) * per_offset[tp] for tp in per_offset}
        total = sum(backlog.values())
        if total <= budget:
            return dict(end)
        out = dict(end)
        for tp in end:
            if tp not in backlog:
                continue
            share = budget * (backlog[tp] / total) / per_offset[tp]
            step = max(1, math.floor(share))
            out[tp] = min(end[tp], begin[tp] + step)
        return out

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """The batch's tasks: no storage request for partitions the query already reads.

        Spark calls this right after ``latestOffset``, whose snapshot covers ``end``; only a
        replayed batch (after a restart) may need a newer one. Whether a range's first
        offsets still exist is checked by its task, which lists the partition anyway (as
        Spark's Kafka source leaves data loss to its executors' fetches): per batch that
        saves a manifest LIST and a partition LIST for every partition, 8 of the 15
        requests of a 4-partition batch. Partitions new to the query start at their log
        start, which is listed here (once)."""
        from .batch_reader import input_partitions

        begin, stop = stream_offsets.decode(start), stream_offsets.decode(end)
        if begin == stop:
            return []
        if not self._covers(stop):
            self._refresh()
        ranges = []
        for tp, e in stop.items():
            s = begin.get(tp)
            if s is None:
                s = self._earliest(tp, e)
            if e > s:
                ranges.append(OffsetRange(tp[0], tp[1], s, e))
        pieces = split_ranges(ranges, self.opts.min_partitions,
                              self.opts.max_records_per_partition)
        # Planned without listing the partitions: each task finds out whether its first
        # offsets still exist (batch_reader._read_range: failOnDataLoss), as Spark's Kafka
        # source leaves that to its executors.
        return input_partitions(pieces, self._snapshot, self.opts)

    def _covers(self, end: Mapping[TopicPartition, int]) -> bool:
        """Whether the snapshot held bounds every partition at or past ``end``."""
        snap = self._snapshot
        if snap is None:
            return False
        bound = snap.lso if self.opts.read_committed else snap.hw
        return all(bound(t, p) >= off for (t, p), off in end.items())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # The batch reader's read path is stateless per partition: reuse it as is.
        from .batch_reader import TxnlogBatchReader

        return TxnlogBatchReader(self.opts, self.schema, self.decodings).read(partition)

    def commit(self, end: dict) -> None:
        """With ``groupId``: commit the group's offsets unless a txnlog sink already did
        (inside its transaction, in step with the output); never moves them backwards.

        Spark calls this between micro-batches (``end`` of the batch before, while writing
        the next batch's offsets) and waits for it: the check (a coordinator round trip)
        and, with another sink, a whole transaction would delay every batch. So a thread
        of this long-lived process does it; the newest ``end`` supersedes one not yet
        committed (offsets only grow). A commit still in flight when the query stops is
        redone by the next run's first commit, as a failed one is by the next batch's."""
        if not self.opts.group_id:
            return
        committer = self.__dict__.get("_group_committer")
        if committer is None:
            committer = self._group_committer = _GroupCommitter(self)
        committer.submit(stream_offsets.decode(end))

    def flush_group_commits(self, timeout: float = 60.0) -> bool:
        """Wait until the group commits submitted so far are done (tests, shutdown)."""
        committer = self.__dict__.get("_group_committer")
        return committer is None or committer.flush(timeout)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_group_committer", None)  # a thread of the driver-side process only
        state.pop("_readers", None)  # the planner's listings and caches, not a task's
        return state

    def _commit_group_now(self, end: dict[TopicPartition, int]) -> None:
        try:
            self._commit_group(end)
        except Exception as exc:  # progress reporting must not stop the query; retried
            self._group_producer = None
            log.warning("txnlog source: committing group %r offsets failed (retried with "
                        "the next batch): %s", self.opts.group_id, exc)

    def _commit_group(self, end: dict[TopicPartition, int]) -> None:
        from txnlog.coordinator.client.coordinator_client import CoordinatorClient
        from txnlog.coordinator.client.embedded import coordinator_for_root

        group = self.opts.group_id
        assert group is not None
        creds = self.opts.coordinator_credentials
        endpoint = self.opts.coordinator or coordinator_for_root(
            self.opts.root, self.opts.storage_options, ca_file=creds.ca_file)
        client = CoordinatorClient(endpoint, credentials=creds, root=self.opts.root,
                                   storage_options=self.opts.storage_options)
        committed = client.committed_offsets(group)
        behind = {tp: off for tp, off in end.items() if committed.get(tp, -1) < off}
        if not behind:
            return
        tid = f"txnlog-group-{group}"
        if self._group_producer is None:
            self._group_producer = client.init_producer_id(tid)
        pid, epoch = self._group_producer
        client.add_offsets(tid, pid, epoch, group, behind)
        result = client.end_txn(tid, pid, epoch, commit=True)
        self._group_producer = (result["producer_id"], result["epoch"])


class _GroupCommitter:
    """One background thread committing a stream source's group offsets, newest first."""

    def __init__(self, reader: TxnlogStreamReader) -> None:
        import threading

        self._reader = reader
        self._cond = threading.Condition()
        self._pending: dict[TopicPartition, int] | None = None
        self._busy = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="txnlog-group-commit")
        self._thread.start()

    def submit(self, end: dict[TopicPartition, int]) -> None:
        with self._cond:
            self._pending = end
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                end, self._pending, self._busy = self._pending, None, True
            try:
                self._reader._commit_group_now(end)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
