"""A Python consumer over storage: Kafka's consumer API shape, no broker, no coordinator.

For tests, examples and users outside Spark. It reads one stable snapshot per poll for all
assigned partitions, so (like the Spark reader) it sees a transaction in all partitions or in
none. Positions are "next offset to read"; they move past markers, aborted batches and
fences, so polling never stalls on a log that ends with control records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .errors import OffsetOutOfRangeError, TxnlogError
from .layout import TopicPartition, validate_partition, validate_topic
from .reader import IsolationLevel, PartitionReader, check_isolation_level
from .stable import StableSnapshot, read_latest_stable
from .storage import Storage
from .topics import read_topic

AUTO_OFFSET_RESETS = ("earliest", "latest", "none")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConsumerRecord:
    """One record, as Kafka's consumer hands it out (timestamp in epoch milliseconds)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def records_of(batch: pa.RecordBatch) -> list[ConsumerRecord]:
    """Arrow rows (read_schema) -> ConsumerRecord objects (small paths only)."""
    cols = batch.to_pydict()
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
    headers = cols.get("headers") or [None] * batch.num_rows
    return [ConsumerRecord(cols["topic"][i], cols["partition"][i], cols["offset"][i],
                           -1 if ts[i] is None else ts[i] // 1000, cols["timestampType"][i],
                           cols["key"][i], cols["value"][i],
                           [(h["key"], h["value"]) for h in headers[i] or []])
            for i in range(batch.num_rows)]


def _as_tp(item: Any) -> TopicPartition:
    if isinstance(item, TopicPartition):
        tp = item
    elif isinstance(item, tuple | list) and len(item) == 2:
        tp = TopicPartition(item[0], item[1])
    else:
        raise ValueError(f"a partition is (topic, partition) or a TopicPartition, got {item!r}")
    return TopicPartition(validate_topic(tp.topic), validate_partition(tp.partition))


class Consumer:
    """Consume topics (all their partitions) or an explicit assignment under a root.

    `assignment` may map partitions to starting offsets; partitions without one start at
    `auto_offset_reset` ("earliest" or "latest").
    """

    def __init__(self, root: str, topics: str | Iterable[str] | None = None, *,
                 assignment: Iterable[Any] | Mapping[Any, int] | None = None,
                 isolation_level: IsolationLevel = "read_committed",
                 storage_options: Mapping[str, Any] | None = None,
                 auto_offset_reset: str = "earliest", include_headers: bool = False,
                 max_poll_records: int = 10_000) -> None:
        if (topics is None) == (assignment is None):
            raise ValueError("give either topics or assignment (not both, not neither)")
        if auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be one of {AUTO_OFFSET_RESETS}, "
                             f"got {auto_offset_reset!r}")
        if max_poll_records < 1:
            raise ValueError("max_poll_records must be >= 1")
        self.storage = Storage.for_url(root, storage_options)
        self.isolation_level = check_isolation_level(isolation_level)
        self.include_headers = include_headers
        self.max_poll_records = max_poll_records
        self.auto_offset_reset = auto_offset_reset
        self._snapshot: StableSnapshot | None = None
        self._readers: dict[TopicPartition, PartitionReader] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._next_rr = 0
        starts: dict[TopicPartition, int | None] = {}
        if topics is not None:
            names = [topics] if isinstance(topics, str) else list(topics)
            for name in names:
                meta = read_topic(self.storage, name)
                for p in range(meta.partitions):
                    starts[TopicPartition(name, p)] = None
        elif isinstance(assignment, Mapping):
            starts = {_as_tp(k): int(v) for k, v in assignment.items()}
        else:
            starts = {_as_tp(item): None for item in assignment or ()}
        self.assign(starts)

    # ---- assignment and positions --------------------------------------------------------
    def assign(self, partitions: Iterable[Any] | Mapping[Any, int | None]) -> None:
        """Replace the assignment (optionally with starting offsets)."""
        items = (partitions.items() if isinstance(partitions, Mapping)
                 else ((p, None) for p in partitions))
        self._readers.clear()
        self._positions.clear()
        for item, offset in items:
            tp = _as_tp(item)
            self._readers[tp] = PartitionReader(self.storage, tp.topic, tp.partition,
                                                isolation_level=self.isolation_level,
                                                include_headers=self.include_headers)
            if offset is not None:
                self.seek(tp, offset)
        self.refresh()
        for tp in self._readers:
            if tp not in self._positions:
                if self.auto_offset_reset == "none":
                    raise TxnlogError(f"{tp.topic}-{tp.partition} has no starting offset and "
                                      "auto_offset_reset is 'none' (Kafka's "
                                      "NoOffsetForPartition)")
                self._positions[tp] = (self._readers[tp].earliest_offset()
                                       if self.auto_offset_reset == "earliest"
                                       else self._readers[tp].latest_offset())

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._readers)

    def _reader(self, tp: Any) -> tuple[TopicPartition, PartitionReader]:
        tp = _as_tp(tp)
        if tp not in self._readers:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return tp, self._readers[tp]

    def seek(self, tp: Any, offset: int) -> None:
        tp, _ = self._reader(tp)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self._positions[tp] = offset

    def seek_to_beginning(self, *tps: Any) -> None:
        for tp in tps or self.assignment():
            tp, reader = self._reader(tp)
            self._positions[tp] = reader.earliest_offset()

    def seek_to_end(self, *tps: Any) -> None:
        self.refresh()
        for tp in tps or self.assignment():
            tp, reader = self._reader(tp)
            self._positions[tp] = reader.latest_offset()

    def position(self, tp: Any) -> int:
        tp, _ = self._reader(tp)
        return self._positions[tp]

    def beginning_offsets(self, tps: Iterable[Any] | None = None) -> dict[TopicPartition, int]:
        return {tp: r.earliest_offset()
                for tp, r in (self._reader(t) for t in (tps or self.assignment()))}

    def end_offsets(self, tps: Iterable[Any] | None = None) -> dict[TopicPartition, int]:
        """LSO (read_committed) or HW per partition, from a fresh snapshot."""
        self.refresh()
        return {tp: r.latest_offset()
                for tp, r in (self._reader(t) for t in (tps or self.assignment()))}

    def offsets_for_times(self, times: Mapping[Any, int]) -> dict[TopicPartition, int | None]:
        """First offset with timestamp >= the given epoch ms, per partition (None if none)."""
        return {tp: r.offset_for_timestamp(ts)
                for tp, r, ts in ((*self._reader(t), ts) for t, ts in times.items())}

    def at_end(self, tp: Any) -> bool:
        """True when the position reached the end offset of the last snapshot read."""
        tp, reader = self._reader(tp)
        return self._positions[tp] >= reader.latest_offset()

    # ---- reading -----------------------------------------------------------------------
    def refresh(self) -> StableSnapshot | None:
        """Read the newest stable snapshot once and hand it to every partition reader."""
        self._snapshot = read_latest_stable(self.storage, not_below=self._snapshot)
        for reader in self._readers.values():
            reader.advance_snapshot(self._snapshot)
        return self._snapshot

    def poll_arrow(self, timeout_s: float = 0.0,
                   max_records: int | None = None) -> dict[TopicPartition, list[pa.RecordBatch]]:
        """Up to `max_records` records as Arrow batches per partition; waits up to
        `timeout_s` for new data when every partition is at its end."""
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while True:
            self.refresh()
            out = self._fetch(limit)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)

    def _fetch(self, limit: int) -> dict[TopicPartition, list[pa.RecordBatch]]:
        out: dict[TopicPartition, list[pa.RecordBatch]] = {}
        tps = self.assignment()
        if not tps:
            return out
        remaining = limit
        advanced: dict[TopicPartition, int] = {}
        # round-robin start so one busy partition does not starve the others
        order = tps[self._next_rr % len(tps):] + tps[:self._next_rr % len(tps)]
        self._next_rr += 1
        for tp in order:
            if remaining <= 0:
                break
            reader = self._readers[tp]
            pos = self._positions[tp]
            # offsets are not dense, so `remaining` offsets hold at most `remaining` records
            end = reader.bounded_end(pos + remaining)
            if pos >= end:
                continue
            try:
                for chunk in reader.read(pos, end):
                    out.setdefault(tp, []).append(chunk.batch)
                    remaining -= chunk.batch.num_rows
            except OffsetOutOfRangeError as exc:
                advanced[tp] = self._reset(tp, exc)
                continue
            advanced[tp] = end
        # Positions move only once every read succeeded: a poll that fails part-way must not
        # skip the records it read before the failure (it returned none of them).
        self._positions.update(advanced)
        return out

    def _reset(self, tp: TopicPartition, exc: OffsetOutOfRangeError) -> int:
        """Kafka's consumer on OFFSET_OUT_OF_RANGE: ``auto_offset_reset`` "earliest" goes
        on at the log start, "latest" at the end; "none" raises it."""
        if self.auto_offset_reset == "none":
            raise exc
        reader = self._readers[tp]
        to = exc.log_start if self.auto_offset_reset == "earliest" else reader.latest_offset()
        log.warning("%s; resetting %s to offset %d (auto_offset_reset=%s)", exc, tp, to,
                    self.auto_offset_reset)
        return to

    def poll(self, timeout_s: float = 0.0,
             max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Like Kafka's poll: records per partition (empty dict when nothing is new)."""
        return {tp: [r for b in batches for r in records_of(b)]
                for tp, batches in self.poll_arrow(timeout_s, max_records).items()}

    def iter_batches(self) -> Iterator[tuple[TopicPartition, pa.RecordBatch]]:
        """Everything from the positions up to the end offsets of one snapshot, then stop."""
        self.refresh()
        for tp in self.assignment():
            reader = self._readers[tp]
            end = reader.latest_offset()
            pos = self._positions[tp]
            if pos >= end:
                continue
            while pos < end:
                try:
                    for chunk in reader.read(pos, end):
                        self._positions[tp] = pos = chunk.next_offset
                        yield tp, chunk.batch
                    break
                except OffsetOutOfRangeError as exc:
                    # deleted under the read (retention): on from the reset position
                    self._positions[tp] = pos = self._reset(tp, exc)
            self._positions[tp] = max(pos, end)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records up to the current end of every partition (a bounded read)."""
        for _, batch in self.iter_batches():
            yield from records_of(batch)

    def read_table(self) -> pa.Table:
        """All records from the positions to the current ends, as one table."""
        from .arrow.arrow_codec import read_schema

        return pa.Table.from_batches([b for _, b in self.iter_batches()],
                                     schema=read_schema(self.include_headers))

    def close(self) -> None:
        self._readers.clear()
        self._positions.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
