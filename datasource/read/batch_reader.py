"""``spark.read.format("txnlog")``: plan on the driver, decode straight to Arrow in tasks."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..options import ReadOptions
from .planning import OffsetRange, pack_ranges, partition_snapshot, plan_ranges, split_ranges
from .projection import arrow_schema, check_requested_schema

# A Spark local property (sc.setLocalProperty) that makes read tasks yield Arrow batches of
# at most this many rows (zero-copy slices of the decoded chunks); unset or 0: whole chunks.
BATCH_ROWS_PROPERTY = "txnlog.read.batchRows"
log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType
    from txnlog.log_format.stable import StableSnapshot

    from .pushdown import RowFilter


@dataclass
class TxnlogInputPartition(InputPartition):
    """One task: offset ranges - one, or several small ones read one after the other
    (planning.pack_ranges) - each with the stable snapshot of its partition it was planned
    against (so every task agrees on where "latest" is)."""

    ranges: tuple[OffsetRange, ...]
    snapshots: tuple[Any, ...]  # a partition_snapshot per range

    def __post_init__(self) -> None:
        InputPartition.__init__(self, self.ranges)


def input_partitions(pieces: list[OffsetRange], snapshot: StableSnapshot | None,
                     opts: ReadOptions) -> list[InputPartition]:
    """The tasks of a read: ``pieces`` (split by minPartitions/maxRecordsPerPartition)
    packed by minRecordsPerPartition (never past maxRecordsPerPartition), each range with
    its partition's snapshot."""
    pack = opts.min_records_per_partition
    if opts.max_records_per_partition:
        pack = min(pack, opts.max_records_per_partition)
    return [TxnlogInputPartition(tuple(group),
                                 tuple(partition_snapshot(snapshot, r.topic, r.partition)
                                       for r in group))
            for group in pack_ranges(pieces, pack)]


class TxnlogBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType,
                 decodings: dict[str, Any] | None = None) -> None:
        """``decodings``: the framed columns' decodings, planned already (a stream plans
        them once, not per micro-batch); else planned here for ``key.format``/
        ``value.format``, keeping the column types ``schema`` was planned with."""
        self.opts = opts
        if decodings is None:
            decodings = {}
            if opts.framings:
                from .value_decoding import plan_all

                want = {f.name: f.dataType for f in schema.fields if f.name in ("key", "value")}
                decodings = plan_all(opts, want)
        self.decodings = decodings
        self.needs_headers = check_requested_schema(
            schema, opts.include_headers,
            *(d.value_type() if (d := decodings.get(c)) is not None else None
              for c in ("value", "key")))
        self.schema = schema
        self.filters: list[RowFilter] = []

    def partitions(self) -> list[InputPartition]:
        from txnlog.log_format.storage import Storage

        storage = Storage.for_url(self.opts.root, self.opts.storage_options)
        ranges, snapshot = plan_ranges(storage, self.opts)
        if self.filters:
            ranges = self._narrow(storage, ranges, snapshot)
        pieces = split_ranges(ranges, self.opts.min_partitions,
                              self.opts.max_records_per_partition)
        return input_partitions(pieces, snapshot, self.opts)

    def _narrow(self, storage: object, ranges: list[OffsetRange],
                snapshot: StableSnapshot | None) -> list[OffsetRange]:
        """Prune by pushed filters; a timestamp lower bound skips whole batches whose
        maxTimestamp is below it (Kafka's offsetsForTimes), which is exact for a floor."""
        from dataclasses import replace

        from txnlog.log_format.reader import PartitionReader

        from .pushdown import narrow, timestamp_floor_ms

        ranges = narrow(ranges, self.filters)
        floor = timestamp_floor_ms(self.filters)
        if floor is None:
            return ranges
        out = []
        for r in ranges:
            reader = PartitionReader(storage, r.topic, r.partition,  # type: ignore[arg-type]
                                     isolation_level=self.opts.isolation_level,
                                     snapshot=partition_snapshot(snapshot, r.topic, r.partition))
            found = reader.offset_for_timestamp(floor)
            start = r.end if found is None else max(r.start, found)
            if start < r.end:
                out.append(replace(r, start=start))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from txnlog.log_format.reader import PartitionReader
        from txnlog.log_format.storage import Storage

        from .projection import project

        if not isinstance(partition, TxnlogInputPartition):
            # PySpark turns an empty partitions() list (nothing to read, or every range
            # pruned by pushed filters) into one InputPartition(None): an empty result.
            return
        target = arrow_schema(self.schema)
        storage = Storage.for_url(self.opts.root, self.opts.storage_options)
        step = _batch_rows()
        decoders = []
        for column, decoding in self.decodings.items():
            if column in target.names:
                from .value_decoding import ValueDecoder

                decoders.append(ValueDecoder(decoding, target.field(column).type))
        for r, snap in zip(partition.ranges, partition.snapshots, strict=True):
            reader = PartitionReader(storage, r.topic, r.partition,
                                     isolation_level=self.opts.isolation_level,
                                     include_headers=self.needs_headers, snapshot=snap)
            for chunk in _read_range(reader, r.start, r.end, self.opts.fail_on_data_loss):
                batch = chunk.batch
                if self.filters:
                    from .pushdown import apply

                    batch = apply(batch, self.filters)
                    if batch.num_rows == 0:
                        continue
                for decoder in decoders:
                    batch = decoder.decode(batch)
                batch = project(batch, target)
                if step and batch.num_rows > step:
                    for start in range(0, batch.num_rows, step):
                        yield batch.slice(start, step)
                else:
                    yield batch


def _read_range(reader: Any, start: int, end: int, fail_on_data_loss: bool) -> Iterator[Any]:
    """``reader.read(start, end)``, with spark-sql-kafka's ``failOnDataLoss`` for records
    deleted (retention, DeleteRecords) after the range was planned: true fails naming the
    lost range; false logs it and goes on from the log start offset."""
    from txnlog.log_format.errors import OffsetOutOfRangeError

    from .planning import DataLossError

    while start < end:
        try:
            for chunk in reader.read(start, end):
                start = chunk.next_offset
                yield chunk
            return
        except OffsetOutOfRangeError as exc:
            msg = (f"{exc.topic}-{exc.partition}: offsets [{exc.offset}, "
                   f"{min(exc.log_start, end)}) were deleted (retention or DeleteRecords) "
                   f"before this task read them; the log start offset is {exc.log_start}")
            if fail_on_data_loss:
                raise DataLossError(msg + ". Set failOnDataLoss=false to skip them") from None
            log.warning("%s; skipping them (failOnDataLoss=false)", msg)
            start = exc.log_start


def _batch_rows() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(BATCH_ROWS_PROPERTY) if ctx else None
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 0


class TxnlogFilteringBatchReader(TxnlogBatchReader):
    """The reader with ``pushFilters`` (option ``pushFilters=true``).

    A separate class because PySpark fails every read of a reader that merely defines
    ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is true.
    """

    def pushFilters(self, filters: list) -> list:
        from .pushdown import accept

        self.filters, rest = accept(filters)
        return rest
