"""Spark read/write throughput through txnlog vs. the Python Data Source ceiling and Parquet.

    python bench/spark_rw.py [--rows 10000000] [--repeat 3] [--dir DIR] [--txnlog-dir DIR]
        [--ops read|write] [--only OP,...] [--breakdown] [--conf KEY=VALUE ...]

Rows: 16-byte random keys, 100-byte random values (spark-python-datasource.md section 4).

Read (-> write.format("noop"), which materialises every column):
  ceiling   a Python source yielding pre-built Arrow batches of txnlog's 7 read columns
  txnlog    spark.read.format("txnlog") of the topic the first txnlog write produced
  parquet   Spark's native scan of the same 7 columns
Write (the input is a Parquet copy of key+value, what a user writes):
  ceiling   a Python Arrow sink that only counts rows
  txnlog    df.write.format("txnlog"): one transaction, commit included
  parquet   df.write.parquet

Method, and why (the VM has 2 cores that other work shares, so load swings by 10x within
minutes):
- Every op runs once untimed first (JVM JIT, Python workers, numba caches; the first txnlog
  write is that op's warm-up, and what the read op reads).
- Then --repeat rounds; each round runs every op once, in an order rotated per round, so
  the ops of one kind see the same load. A ratio is taken *within* each round (ceiling time
  / op time) and the table shows the median of those ratios, not a ratio of medians taken
  minutes apart.
- Besides wall time, each op's CPU time is measured: user+system of every process of the
  run (driver, JVM, Python workers, the embedded coordinator), from /proc. Load from other
  work stretches wall time but barely CPU time, so the CPU ratio (ceiling CPU / op CPU) is
  the load-robust one: on an otherwise idle 2-core machine, where every op keeps both cores
  busy, throughput follows it.
- --breakdown splits each op's CPU by process: the JVM (with the planner Python workers it
  reaped), the executor Python workers (daemon and workers), the coordinator, the driver.
- --conf sets a Spark session option for all ops alike (e.g.
  spark.sql.execution.arrow.maxRecordsPerBatch): never one side only.
- Tasks: both ceilings use as many Spark tasks as their txnlog op (the read ceiling one per
  topic partition: 2; the writes all read the same Parquet input, hence the same tasks).
- Durability: a txnlog write fsyncs every segment object before confirming it (a confirmed
  write must survive a crash); Parquet's writer and the counting sink do not sync. On a
  disk, the txnlog write is then bound by the disk's synchronous write bandwidth (~65 MB/s
  here under load: 1.3 GB of log per 10 M rows). --txnlog-dir on a tmpfs (/dev/shm), where
  fsync costs nothing, measures the engine itself; report both. Each timed write's topic is
  deleted after it (untimed), so a tmpfs holds only the read topic and one write.
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

# Spark binds its driver to this host's first non-loopback address unless told otherwise;
# the bench talks to 127.0.0.0/8 only.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

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


_TICK = os.sysconf("SC_CLK_TCK")


def _run_cpu(root_pid: int, marker: str) -> dict[int, float]:
    """CPU seconds so far per process of the run: ``root_pid``, its descendants and the
    processes whose command line names ``marker`` (the detached embedded coordinator).

    Each process counts user + system time plus that of its children it reaped: Spark's
    daemon forks and reaps Python workers during an op, and a worker's time must not vanish
    with it (summing live processes only gave negative deltas).
    """
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    named: set[int] = set()
    kinds: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        pid = int(entry)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / _TICK
        kinds[pid] = _kind(cmd, marker)
        if marker.encode() in cmd:
            named.add(pid)
    out = {}
    for pid, secs in cpu.items():
        p = pid
        while p > 1 and p != root_pid:
            p = parent.get(p, 0)
        if p == root_pid or pid in named:
            out[pid] = secs
            _KIND[pid] = kinds[pid]
    return out


_KIND: dict[int, str] = {}  # pid -> what it is, for --breakdown


def _kind(cmd: bytes, marker: str) -> str:
    """What a process of the run is (its reaped children count with it: the JVM's are the
    planner Python workers, the daemon's the executor Python workers that ended)."""
    if marker.encode() in cmd:
        return "coordinator"
    if b"java" in cmd.split(b"\0", 1)[0]:
        return "jvm"
    if b"pyspark.daemon" in cmd:
        return "py daemon"
    if b"pyspark.worker" in cmd or b"pyspark" in cmd:
        return "py worker"
    return "other"


def timed(fn: Callable[[], object], marker: str,
          breakdown: dict[str, float] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the run's processes) of one call. A process that ends
    during the call counts through the parent that reaps it (see _run_cpu). ``breakdown``
    receives the CPU seconds per kind of process (see _kind)."""
    before = _run_cpu(os.getpid(), marker)
    t = time.perf_counter()
    fn()
    wall = time.perf_counter() - t
    after = _run_cpu(os.getpid(), marker)
    deltas = {pid: secs - before.get(pid, 0.0) for pid, secs in after.items()}
    if breakdown is not None:
        for pid, secs in deltas.items():
            kind = "driver" if pid == os.getpid() else _KIND.get(pid, "?")
            breakdown[kind] = breakdown.get(kind, 0.0) + secs
    return wall, sum(deltas.values())


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work folder (default: a temp dir, removed)")
    ap.add_argument("--txnlog-dir", default=None,
                    help="folder for the txnlog root (default: the work folder)")
    ap.add_argument("--only", default="", help="comma-separated op names to run")
    ap.add_argument("--ops", choices=("all", "read", "write"), default="all",
                    help="run only the read or the write ops")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark session setting (applies to every op alike)")
    ap.add_argument("--breakdown", action="store_true",
                    help="print each op's CPU per kind of process (JVM, Python workers, ...)")
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import cloudpickle
    from pyspark.sql import DataFrameReader, SparkSession

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import us
    work = Path(args.dir or tempfile.mkdtemp(prefix="txnlog-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    troot = Path(args.txnlog_dir) if args.txnlog_dir else work
    troot.mkdir(parents=True, exist_ok=True)
    root_path = troot / f"txnlog-{os.getpid()}-{time.time_ns()}"  # fresh topics each run
    root = root_path.as_uri()
    pq_kv, pq_read, pq_out = (str(work / n) for n in ("kv.parquet", "read.parquet", "out"))

    builder = (SparkSession.builder.master("local[2]").appName("txnlog-bench")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "4g")
               .config("spark.sql.session.timeZone", "UTC"))
    for setting in args.conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BenchSource)
    n = args.rows
    print(f"rows={n:,} repeat={args.repeat} conf={args.conf} load average before: "
          f"{loadavg()}", flush=True)
    codec_file = spark.sparkContext.parallelize([0], 1).map(
        lambda _: __import__("txnlog.log_format.arrow.arrow_encode",
                             fromlist=["_"]).__file__).first()
    print(f"workers' txnlog codec: {codec_file}", flush=True)

    def src() -> DataFrameReader:
        """A fresh reader each time: DataFrameReader.schema() and .option() mutate the reader
        they are called on, and until this was a function the key+value schema set for the
        write input below stuck to the read ceiling, which then read 2 columns, not 7."""
        return spark.read.format("txnlog_bench").option("rows", n)

    if args.ops != "write":
        src().load().write.mode("overwrite").parquet(pq_read)
        assert len(src().load().columns) == 7, "the read ceiling must read txnlog's 7 columns"
    src().schema("key binary, value binary").load().write.mode("overwrite").parquet(pq_kv)
    kv = spark.read.parquet(pq_kv)
    writes = iter(range(1_000_000))

    def txnlog_write() -> None:
        topic = f"bench-{next(writes)}"
        kv.write.format("txnlog").option("topic", topic).option("partitions", "2") \
            .mode("append").save(root)

    def sliced_read(rows: int) -> None:
        """The txnlog read yielding batches of at most ``rows`` rows (A/B in one run)."""
        sc = spark.sparkContext
        sc.setLocalProperty("txnlog.read.batchRows", str(rows))
        try:
            spark.read.format("txnlog").option("subscribe", "bench-0").load(root) \
                .write.format("noop").mode("overwrite").save()
        finally:
            sc.setLocalProperty("txnlog.read.batchRows", None)

    # The first txnlog write (the warm-up) must be a full one: it is what the read op reads.
    txnlog_write()

    ops: dict[str, tuple[str, Callable[[], object]]] = {
        "read ceiling": ("read", lambda: src().load().write.format("noop").mode("overwrite")
                         .save()),
        "read txnlog": ("read", lambda: spark.read.format("txnlog")
                        .option("subscribe", "bench-0").load(root)
                        .write.format("noop").mode("overwrite").save()),
        "read txnlog sliced": ("read", lambda: sliced_read(16384)),
        "read parquet": ("read", lambda: spark.read.parquet(pq_read).write.format("noop")
                         .mode("overwrite").save()),
        "write ceiling": ("write", lambda: kv.write.format("txnlog_bench").mode("append")
                          .save()),
        "write txnlog": ("write", txnlog_write),
        "write parquet": ("write", lambda: kv.write.mode("overwrite").parquet(pq_out)),
    }
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    names = [name for name in ops if (not only or name in only)
             and args.ops in ("all", ops[name][0])]
    for name in names:
        if name != "write txnlog":
            ops[name][1]()  # warm-up
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.repeat):
        for kind in ("read", "write"):
            group = [name for name in names if ops[name][0] == kind]
            for name in group[r % len(group):] + group[:r % len(group)] if group else []:
                kinds: dict[str, float] = {}
                w, c = timed(ops[name][1], str(root_path), kinds)
                wall[name].append(w)
                cpu[name].append(c)
                split = ("  [" + ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items())
                                           if abs(v) >= 0.005) + "]") if args.breakdown else ""
                print(f"round {r + 1} {name:14s} {w:6.2f} s wall {c:6.2f} s CPU "
                      f"(load {loadavg()}){split}", flush=True)
                if name == "write txnlog":  # committed; only bench-0 is read again
                    for topic_dir in root_path.glob("bench-*-*"):
                        if not topic_dir.name.startswith("bench-0-"):
                            shutil.rmtree(topic_dir, ignore_errors=True)
    assert spark.read.format("txnlog").option("subscribe", "bench-0").load(root).count() == n

    def ratio(name: str, series: dict[str, list[float]]) -> str:
        ceiling = series.get(f"{ops[name][0]} ceiling")
        if not ceiling or name.endswith("ceiling"):
            return "-"
        per_round = sorted(c / t for c, t in zip(ceiling, series[name], strict=True))
        return (f"{statistics.median(per_round):.0%} "
                f"({per_round[0]:.0%}-{per_round[-1]:.0%})")

    print("\n| op | wall s (rounds) | median M rows/s | vs ceiling, wall | CPU s (rounds) "
          "| vs ceiling, CPU |")
    print("|---|---|---:|---|---|---|")
    for name in names:
        med = statistics.median(wall[name])
        print(f"| {name} | {' / '.join(f'{t:.1f}' for t in wall[name])} | "
              f"{n / med / 1e6:.2f} | {ratio(name, wall)} | "
              f"{' / '.join(f'{t:.1f}' for t in cpu[name])} | {ratio(name, cpu)} |")
    print(f"\nload average after: {loadavg()} (2 cores); txnlog root {root}")
    spark.stop()
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    if args.txnlog_dir:
        shutil.rmtree(root_path, ignore_errors=True)


if __name__ == "__main__":
    main()
