"""Spark read/write throughput through txnlog vs. the Python Data Source ceiling and Parquet.

    python bench/spark_rw.py [--rows 10000000] [--repeat 3] [--dir DIR]

Rows: 16-byte random keys, 100-byte random values (spark-python-datasource.md section 4).

Read (-> write.format("noop"), which materialises every column):
  ceiling   a Python source yielding pre-built Arrow batches of txnlog's 7 read columns
  txnlog    spark.read.format("txnlog") of the topic the first txnlog write produced
  parquet   Spark's native scan of the same 7 columns
Write (the input is a Parquet copy of key+value, what a user writes):
  ceiling   a Python Arrow sink that only counts rows
  txnlog    df.write.format("txnlog"): one transaction, commit included
  parquet   df.write.parquet
Each op: one small warm-up, then --repeat timed runs; the table shows the median and the
ratio to the ceiling of its kind. The machine is shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

READ_DDL = ("key binary, value binary, topic string, partition int, offset long, "
            "timestamp timestamp, timestampType int")
BATCH = 10_000


def prebuilt_batch(n: int, seed: int, partition: int) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)

    def fixed_binary(width: int) -> pa.Array:
        data = pa.py_buffer(rng.integers(0, 256, n * width, dtype=np.uint8).tobytes())
        offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes())
        return pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])

    return pa.RecordBatch.from_arrays(
        [fixed_binary(16), fixed_binary(100), pa.array(["bench"] * n),
         pa.array(np.full(n, partition, np.int32)), pa.array(np.arange(n, dtype=np.int64)),
         pa.array(np.arange(n, dtype=np.int64) + 1_700_000_000_000_000,
                  pa.timestamp("us", tz="UTC")),
         pa.array(np.zeros(n, np.int32))],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"])


class _Part(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        super().__init__(index)
        self.index, self.rows = index, rows


class _Reader(DataSourceReader):
    def __init__(self, rows: int, names: list[str]) -> None:
        self.rows, self.names = rows, names

    def partitions(self) -> list[InputPartition]:
        return [_Part(i, self.rows // 2 + (self.rows % 2 if i == 0 else 0)) for i in range(2)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Part)
        batches = [prebuilt_batch(BATCH, partition.index * 1000 + k, partition.index)
                   for k in range(16)]
        if batches[0].schema.names != self.names:
            batches = [b.select(self.names) for b in batches]
        full, rest = divmod(partition.rows, BATCH)
        for j in range(full):
            yield batches[j % 16]
        if rest:
            yield batches[0].slice(0, rest)


class _Count(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class _CountingWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return _Count(rows)


class BenchSource(DataSource):
    """``format("txnlog_bench")``: the pre-built-batch source and the counting sink."""

    @classmethod
    def name(cls) -> str:
        return "txnlog_bench"

    def schema(self) -> str:
        return READ_DDL

    def reader(self, schema) -> DataSourceReader:
        return _Reader(int(self.options["rows"]), schema.fieldNames())

    def writer(self, schema, overwrite: bool) -> DataSourceArrowWriter:
        return _CountingWriter()


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work folder (default: a temp dir, removed)")
    ap.add_argument("--only", default="", help="comma-separated op names to run")
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import us
    work = Path(args.dir or tempfile.mkdtemp(prefix="txnlog-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    root = (work / f"txnlog-{os.getpid()}-{time.time_ns()}").as_uri()  # fresh topics each run
    pq_kv, pq_read, pq_out = (str(work / n) for n in ("kv.parquet", "read.parquet", "out"))

    spark = (SparkSession.builder.master("local[2]").appName("txnlog-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BenchSource)
    n = args.rows
    print(f"rows={n:,} repeat={args.repeat} load average before: {loadavg()}", flush=True)

    src = spark.read.format("txnlog_bench").option("rows", n)
    src.load().write.mode("overwrite").parquet(pq_read)
    src.schema("key binary, value binary").load().write.mode("overwrite").parquet(pq_kv)
    kv = spark.read.parquet(pq_kv)
    writes = iter(range(1_000_000))

    def txnlog_write() -> None:
        topic = f"bench-{next(writes)}"
        kv.write.format("txnlog").option("topic", topic).option("partitions", "2") \
            .mode("append").save(root)

    # The first txnlog write (the warm-up) must be a full one: it is what the read op reads.
    txnlog_write()

    ops: dict[str, tuple[str, Callable[[], object]]] = {
        "read ceiling": ("read", lambda: src.load().write.format("noop").mode("overwrite")
                         .save()),
        "read txnlog": ("read", lambda: spark.read.format("txnlog")
                        .option("subscribe", "bench-0").load(root)
                        .write.format("noop").mode("overwrite").save()),
        "read parquet": ("read", lambda: spark.read.parquet(pq_read).write.format("noop")
                         .mode("overwrite").save()),
        "write ceiling": ("write", lambda: kv.write.format("txnlog_bench").mode("append")
                          .save()),
        "write txnlog": ("write", txnlog_write),
        "write parquet": ("write", lambda: kv.write.mode("overwrite").parquet(pq_out)),
    }
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    results: dict[str, list[float]] = {}
    for name, (_, fn) in ops.items():
        if only and name not in only:
            continue
        if name != "write txnlog":
            fn()  # warm-up
        results[name] = timed(fn, args.repeat)
        print(f"{name:14s} runs {' / '.join(f'{t:.2f}' for t in results[name])} s "
              f"(load {loadavg()})", flush=True)
    assert spark.read.format("txnlog").option("subscribe", "bench-0").load(root).count() == n

    print("\n| op | runs (s) | median s | M rows/s | MB/s key+value | vs ceiling |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        kind = ops[name][0]
        med = statistics.median(runs)
        ceiling = results.get(f"{kind} ceiling")
        ratio = f"{statistics.median(ceiling) / med:.0%}" if ceiling else "-"
        print(f"| {name} | {' / '.join(f'{t:.2f}' for t in runs)} | {med:.2f} | "
              f"{n / med / 1e6:.2f} | {n * 116 / med / 1e6:.0f} | {ratio} |")
    print(f"\nload average after: {loadavg()} (2 cores)")
    spark.stop()
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
