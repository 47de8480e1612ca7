"""Driver-side planning of a read: which partitions, which offset ranges, how many tasks.

Planning needs storage only (topic metadata, one stable snapshot, listings), never the
coordinator. Every range is resolved against the same stable snapshot, and that snapshot
travels to the executors, so all tasks of one read agree on where "latest" is.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.stable import StableSnapshot, read_latest_stable
from txnlog.log_format.storage import Storage
from txnlog.log_format.topics import UnknownTopicError, list_topics, read_topic

from ..options import EARLIEST, LATEST, InvalidOptionError, OffsetSpec, ReadOptions


class DataLossError(InvalidOptionError):
    """Requested offsets are gone (e.g. before the log start); failOnDataLoss=true."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def is_internal(topic: str) -> bool:
    return topic.startswith("__")


def subscribed_partitions(storage: Storage, opts: ReadOptions) -> list[tuple[str, int]]:
    """Topic-partitions the subscription names that exist under the root."""
    sub = opts.subscription
    if sub.kind == "assign":
        out = []
        for topic, p in sub.assign:
            n = _partitions(storage, topic)
            if p >= n:
                raise InvalidOptionError(
                    f"option 'assign' names {topic}-{p}, but topic {topic!r} has {n} partitions")
            out.append((topic, p))
        return out
    if sub.kind == "subscribe":
        names = list(sub.topics)
    else:
        names = [t for t in list_topics(storage) if not is_internal(t) and sub.matches(t)]
    return [(t, p) for t in names for p in range(_partitions(storage, t))]


def _partitions(storage: Storage, topic: str) -> int:
    try:
        return read_topic(storage, topic).partitions
    except UnknownTopicError as exc:
        known = [t for t in list_topics(storage) if not is_internal(t)]
        raise InvalidOptionError(
            f"{exc}; topics under this root: {', '.join(known) or 'none'}") from None


def partition_snapshot(snapshot: StableSnapshot | None, topic: str,
                       partition: int) -> StableSnapshot | None:
    """The stable snapshot cut down to one partition, small enough to ship with a task."""
    if snapshot is None:
        return None
    key = f"{topic}-{partition}"
    parts = {key: snapshot.partitions[key]} if key in snapshot.partitions else {}
    tail = snapshot.tails.get(key)
    return StableSnapshot(snapshot.coordinator_epoch, snapshot.seq, parts, snapshot.written_ms,
                          tails={key: tail} if tail else {})


def _resolve(reader: PartitionReader, spec: OffsetSpec, opts: ReadOptions, *, starting: bool,
             earliest: int, latest: int) -> int:
    tp = (reader.topic, reader.partition)
    name = "starting" if starting else "ending"
    ts = spec.timestamp if spec.timestamp is not None else spec.timestamps.get(tp)
    if ts is not None:
        found = reader.offset_for_timestamp(ts)
        if found is not None:
            return found
        if starting and opts.timestamp_strategy == "error":
            raise InvalidOptionError(
                f"no record in {tp[0]}-{tp[1]} has a timestamp >= {ts} ({name} timestamp); "
                "set startingOffsetsByTimestampStrategy=latest to start at the end instead")
        return latest
    offset = spec.offsets.get(tp, spec.default)
    if offset == EARLIEST:
        return earliest
    if offset == LATEST:
        return latest
    if offset < earliest:
        if opts.fail_on_data_loss:
            raise DataLossError(
                f"{name} offset {offset} of {tp[0]}-{tp[1]} is before the log start {earliest}: "
                "those records are gone. Set failOnDataLoss=false to start at the log start")
        return earliest
    if offset > latest and not starting:
        return latest
    return offset


def plan_ranges(storage: Storage, opts: ReadOptions
                ) -> tuple[list[OffsetRange], StableSnapshot | None]:
    """Resolve every subscribed partition's [start, end) against one stable snapshot."""
    snapshot = read_latest_stable(storage)
    ranges = []
    for topic, p in subscribed_partitions(storage, opts):
        reader = PartitionReader(storage, topic, p, isolation_level=opts.isolation_level,
                                 snapshot=partition_snapshot(snapshot, topic, p))
        latest = reader.latest_offset()
        earliest = min(reader.earliest_offset(), latest)
        start = _resolve(reader, opts.starting, opts, starting=True, earliest=earliest,
                         latest=latest)
        end = _resolve(reader, opts.ending, opts, starting=False, earliest=earliest,
                       latest=latest)
        if start > end:
            if opts.fail_on_data_loss and (topic, p) in opts.starting.offsets:
                raise DataLossError(
                    f"starting offset {start} of {topic}-{p} is after its end {end}. "
                    "Set failOnDataLoss=false to read nothing from it instead")
            start = end
        ranges.append(OffsetRange(topic, p, start, end))
    return ranges, snapshot


def pack_ranges(ranges: list[OffsetRange], min_records: int) -> list[list[OffsetRange]]:
    """Group small ranges into tasks of up to ``min_records`` records, in order.

    A Spark task costs a fixed ~25-50 ms (scheduling, a Python worker round trip on each
    side, a txnlog sink's membership and flush) whatever it reads. Spark's Kafka source
    makes one task per topic-partition, so a micro-batch of 1,000 records over 4 partitions
    ran 4 tasks, two waves on 2 cores: most of its latency. Spark's file sources
    pack small files into one task the same way (``spark.sql.files.openCostInBytes``). A
    range of ``min_records`` or more stays a task of its own (``maxRecordsPerPartition``
    still caps it), so no packed task reads more records than an unpacked range may; the
    small ranges fill tasks greedily in the order given, and a task reads its ranges one
    after another, each partition's records in order.
    ``min_records`` 0: one task per range, as Spark's Kafka source does.
    """
    if min_records <= 0:
        return [[r] for r in ranges]
    tasks: list[list[OffsetRange]] = []
    group: list[OffsetRange] = []
    held = 0
    for r in ranges:
        if r.size >= min_records:
            tasks.append([r])
            continue
        if group and held + r.size > min_records:
            tasks.append(group)
            group, held = [], 0
        group.append(r)
        held += r.size
    if group:
        tasks.append(group)
    return tasks


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None) -> list[OffsetRange]:
    """Split big ranges across tasks, like Spark's KafkaOffsetRangeCalculator.

    ``maxRecordsPerPartition`` caps each piece; ``minPartitions`` then splits the biggest
    ranges further, in proportion to their size, until there are enough pieces.
    """
    nonempty = [r for r in ranges if r.size > 0]
    pieces = {r: max(1, math.ceil(r.size / max_records)) if max_records else 1 for r in nonempty}
    total = sum(pieces.values())
    if min_partitions and total < min_partitions:
        size = sum(r.size for r in nonempty)
        for r in nonempty:
            want = max(1, math.floor(r.size / size * min_partitions)) if size else 1
            pieces[r] = min(r.size, max(pieces[r], want))
        # Rounding down can leave a few short: give them to the biggest ranges.
        for r in sorted(nonempty, key=lambda x: -x.size):
            if sum(pieces.values()) >= min_partitions:
                break
            if pieces[r] < r.size:
                pieces[r] += 1
    out = []
    for r in nonempty:
        n = pieces[r]
        step = r.size / n
        bounds = [r.start + round(i * step) for i in range(n)] + [r.end]
        out.extend(OffsetRange(r.topic, r.partition, a, b)
                   for a, b in itertools.pairwise(bounds) if b > a)
    return out
