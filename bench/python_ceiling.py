"""The Python Data Source ceiling of a stream: a source and a sink that do no work.

``format("pyceiling")`` reads as a streaming source that yields Arrow batches built once per
Python worker (txnlog's read schema: key, value, topic, partition, offset, timestamp,
timestampType; 16 B keys, 100 B values) and writes as an Arrow stream sink that only counts
the rows it is given. A query ``pyceiling -> pyceiling`` therefore costs exactly what Spark's
Python Data Source machinery costs (planner and source-runner processes, Arrow hand-off
into the JVM, rows, Arrow hand-off out to the sink's worker, commit round trips) and
nothing of txnlog's: bench/streaming.py runs it beside txnlog's pipelines so their ratio
to parquet -> parquet can be read against what any Python source and sink could reach.

Options: ``rows`` (total records), ``perTrigger`` (records per micro-batch),
``partitions`` (input partitions per micro-batch, default 4), ``columns`` (``kafka`` for
the 7 read columns, ``kv`` for key and value only).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

KAFKA_COLUMNS = ("key binary, value binary, topic string, partition int, offset long, "
                 "timestamp timestamp, timestampType int")
KV_COLUMNS = "key binary, value binary"
_CHUNK = 135_000  # rows per yielded batch, as txnlog's reader yields about


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


def _batch(schema: Any) -> Any:
    """One batch of _CHUNK rows of ``schema``, built once per Python process and schema and
    sliced for every read."""
    cache = sys.__dict__.setdefault("_txnlog_pyceiling_batches", {})
    key = schema.simpleString()
    if key in cache:
        return cache[key]
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    n = _CHUNK
    idx = pa.array(np.arange(n) % 1000)
    key_col = pa.array([b"%016d" % i for i in range(1000)], pa.binary()).take(idx)
    value = pa.array([(b"%d" % i).ljust(100, b"x") for i in range(1000)], pa.binary()).take(idx)
    cols = [key_col, value]
    if len(target) == 7:
        cols += [pa.array(["in"] * n, pa.string()), pa.array(np.zeros(n, np.int32)),
                 pa.array(np.arange(n, dtype=np.int64)),
                 pa.array(np.zeros(n, np.int64)).cast(pa.timestamp("us", tz="UTC")),
                 pa.array(np.zeros(n, np.int32))]
    cache[key] = pa.RecordBatch.from_arrays(cols, schema=target)
    return cache[key]


class CeilingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, schema: Any, rows: int, per_trigger: int, partitions: int) -> None:
        self.schema, self.rows, self.per_trigger = schema, rows, per_trigger
        self.n_partitions = partitions

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.rows
        return {"offset": min(self.rows, start["offset"] + step)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        s, n, k = start["offset"], end["offset"] - start["offset"], self.n_partitions
        return [_Range(s + i * n // k, s + (i + 1) * n // k) for i in range(k)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Range)
        left = partition.end - partition.start
        batch = _batch(self.schema)
        while left > 0:
            take = min(left, batch.num_rows)
            yield batch.slice(0, take)
            left -= take

    def commit(self, end: dict) -> None:
        pass


class _Count(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class CeilingStreamWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return _Count(rows)

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass


class PythonCeiling(DataSource):
    @classmethod
    def name(cls) -> str:
        return "pyceiling"

    def schema(self) -> str:
        return KV_COLUMNS if self.options.get("columns") == "kv" else KAFKA_COLUMNS

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return CeilingStreamReader(schema, int(self.options["rows"]),
                                   int(self.options["perTrigger"]),
                                   int(self.options.get("partitions", "4")))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return CeilingStreamWriter()


def register(spark: Any) -> None:
    """Register the ceiling source with ``spark``. Its Python processes import this module
    by name (no code travels pickled by value: that costs every planner call and task), so
    the bench directory must be on their path: bench/streaming.py puts it on PYTHONPATH
    before the JVM starts, and Spark passes that on to every Python process it starts."""
    spark.dataSource.register(PythonCeiling)


def add_to_python_path() -> None:
    """Put this directory on PYTHONPATH for the Python processes of a JVM started later."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *parts])
