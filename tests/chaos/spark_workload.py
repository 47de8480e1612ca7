"""A Spark driver as a chaos workload process: batch writes, batch reads and a stream.

Run as ``python -m chaos.spark_workload --root ROOT --history DIR --worker N ...`` (with
``tests/`` on PYTHONPATH); the harness (run.py) starts it, SIGKILLs or SIGSTOPs it (or its
JVM, or the executors' Python workers) and starts it again on the same checkpoint.

- Batch writer: repeated ``df.write.format("txnlog").save(root)`` jobs of integer-valued
  keyed records over random partitions of both chaos topics; each job is one transaction
  ``s<worker>:<n>`` in the history. Every send is recorded before the job runs; ``save()``
  returning is ``ok``. A job planted to fail (a task raises after handing rows to the
  writer, on every attempt) is ``fail``: Spark never calls ``commit()`` after a failed task,
  so it cannot have committed. Any other error, or a driver killed mid-job, is ``unknown``
  (the final read decides: all visible or none).
- Batch reads: every few jobs a ``spark.read.format("txnlog")`` of both topics, recorded as
  a ``poll`` with mode ``spark`` (a full read for the checker).
- Stream: ``readStream`` of both chaos topics -> ``out:<tp>:<offset>:<value>`` ->
  ``writeStream`` to ``chaos-out`` with a checkpoint; restarted in-process when it dies.
  ``--drain`` runs it once with ``availableNow`` (after every fault healed) and exits, so
  the harness can check the output against the input exactly once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from .history import HistoryWriter, tp_key
from .workload import TOPICS, discover, err, partitions

OUT_TOPIC = "chaos-out"
OUT_PARTITIONS = 2
PLANTED = "CHAOS-PLANTED-TASK-FAILURE"
SCHEMA = "topic string, partition int, key string, value string"


def session(app: str) -> Any:
    """A lean local session: two cores, up to three attempts per task (so a killed Python
    worker's task is retried and its rows aborted, as on a cluster)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, not eth0
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", '--driver-java-options '
                          '"-XX:+UseSerialGC -XX:TieredStopAtLevel=1" pyspark-shell')
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2,3]").appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.driver.memory", "768m")
             .config("spark.python.worker.reuse", "true")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _fail_after_handing_rows(rows: Any) -> Any:
    """A planted task failure, after the rows went downstream to the writer (RDD code: the
    Arrow-based mapInArrow would need pandas, which this environment does not have)."""
    yield from rows
    raise RuntimeError(PLANTED)


class SparkWorker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = args.root
        self.proc = f"s{args.worker}"
        self.hist = HistoryWriter(Path(args.history) / f"{self.proc}.jsonl", self.proc)
        self.rng = random.Random(args.seed * 1000 + 500 + args.worker)
        self.counter = 0
        self.query: Any = None
        self.spark: Any = None

    def next_value(self) -> int:
        self.counter += 1
        return self.args.worker * 10**7 + self.counter

    def options(self) -> dict[str, str]:
        """The registered coordinator, looked up here: Spark must never start its own."""
        return {"coordinator": discover(self.root, timeout=60.0)}

    # ---- stream -------------------------------------------------------------------------
    def start_stream(self, available_now: bool) -> None:
        opts = self.options()
        src = (self.spark.readStream.format("txnlog")
               .option("subscribe", ",".join(TOPICS))
               .option("startingOffsets", "earliest")
               # small batches while faults fly (more commits to hit), one big one to drain
               .option("maxOffsetsPerTrigger", "100000" if available_now else "400")
               .option("coordinator", opts["coordinator"])
               .load(self.root))
        out = src.selectExpr(
            "key", "concat('out:', topic, '-', CAST(partition AS STRING), ':', "
            "CAST(offset AS STRING), ':', CAST(value AS STRING)) AS value")
        writer = (out.writeStream.format("txnlog").outputMode("append")
                  .option("topic", OUT_TOPIC)
                  .option("coordinator", opts["coordinator"])
                  .option("transaction.timeout.ms", str(self.args.txn_timeout_ms))
                  .option("checkpointLocation", self.args.checkpoint))
        writer = (writer.trigger(availableNow=True) if available_now
                  else writer.trigger(processingTime="500 milliseconds"))
        self.query = writer.start(self.root)
        self.hist.write("info", what="stream-start", query=str(self.query.id),
                        available_now=available_now)

    def keep_stream_alive(self) -> None:
        if self.query is not None and self.query.isActive:
            return
        if self.query is not None:
            exc = self.query.exception()
            self.hist.write("info", what="stream-died", error=str(exc)[:500] if exc else None)
        try:
            self.start_stream(available_now=False)
        except Exception as exc:
            self.hist.write("info", what="stream-start-failed", error=err(exc))

    # ---- batch --------------------------------------------------------------------------
    def one_job(self, n: int) -> None:
        rng = self.rng
        txn = f"{self.proc}:{n}"
        planted = rng.random() < self.args.fail_p
        rows = []
        for topic, p in rng.sample(partitions(), rng.randint(1, 4)):
            for _ in range(rng.randint(1, 4)):
                rows.append((topic, p, f"k{rng.randrange(4)}", str(self.next_value())))
        t0 = time.time()
        try:
            opts = self.options()
        except Exception as exc:
            self.hist.write("info", what="no-coordinator", error=err(exc))
            return
        for topic, p, key, value in rows:
            self.hist.write("send", txn=txn, topic=topic, partition=p, key=key,
                            value=int(value), t0=time.time())
        try:
            rdd = self.spark.sparkContext.parallelize(rows, 2)
            if planted:
                rdd = rdd.mapPartitions(_fail_after_handing_rows)
            df = self.spark.createDataFrame(rdd, SCHEMA)
            (df.write.format("txnlog").mode("append")
             .option("coordinator", opts["coordinator"])
             .option("transactional.id", f"chaos-{self.args.run}-spark")
             .option("transaction.timeout.ms", str(self.args.txn_timeout_ms))
             .save(self.root))
            self.hist.write("commit", txn=txn, outcome="ok", t0=t0)
        except Exception as exc:
            # only our planted task failure is decided: no task succeeded, so no commit()
            outcome = "fail" if PLANTED in str(exc) else "unknown"
            self.hist.write("commit", txn=txn, outcome=outcome, error=err(exc), t0=t0,
                            planted=planted)

    def spark_read(self, isolation: str) -> None:
        t0 = time.time()
        try:
            opts = self.options()
            rows = (self.spark.read.format("txnlog")
                    .option("subscribe", ",".join(TOPICS))
                    .option("isolation.level", isolation)
                    .option("coordinator", opts["coordinator"])
                    .load(self.root)
                    .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS v")
                    .collect())
        except Exception as exc:
            self.hist.write("poll", mode="spark", isolation=isolation, outcome="fail",
                            error=err(exc), t0=t0)
            return
        reads: dict[str, list[list[int]]] = {}
        for r in sorted(rows, key=lambda r: (r.topic, r.partition, r.offset)):
            reads.setdefault(tp_key(r.topic, r.partition), []).append([r.offset, int(r.v)])
        self.hist.write("poll", mode="spark", isolation=isolation, outcome="ok", t0=t0,
                        snapshot=None, bounds={}, ranges=None, reads=reads)

    # ---- main ---------------------------------------------------------------------------
    def run(self) -> int:
        """Jobs until the workload's end; then wait for the harness's drain request (or
        exit): the final drain needs the input settled, and a JVM start costs ~15 s."""
        args = self.args
        ctl = Path(args.ctl)
        self.spark = session(f"txnlog-chaos-{self.proc}")
        (ctl / f"ready-{args.worker}").write_text(str(time.time()))
        self.hist.write("info", what="spark-ready", pid=os.getpid())
        try:
            if args.drain:
                return self.drain(ctl)
            deadline = time.monotonic() + args.duration
            n = 0
            while n < args.jobs and time.monotonic() < deadline:
                if args.stream:
                    self.keep_stream_alive()
                self.one_job(n)
                n += 1
                (ctl / f"progress-{args.worker}").write_text(str(n))
                if n % args.read_every == 0:
                    self.spark_read("read_committed" if (n // args.read_every) % 2
                                    else "read_uncommitted")
            self.hist.write("info", what="jobs-done", jobs=n)
            (ctl / f"done-{args.worker}").write_text(str(n))
            if not args.stream:
                return 0
            wait_until = time.monotonic() + args.drain_wait
            while time.monotonic() < wait_until and not (ctl / "drain").exists():
                self.keep_stream_alive()
                time.sleep(0.5)
            if not (ctl / "drain").exists():
                return 0
            if self.query is not None:
                with contextlib.suppress(Exception):
                    self.query.stop()
            return self.drain(ctl)
        finally:
            if self.query is not None:
                with contextlib.suppress(Exception):
                    self.query.stop()
            self.hist.write("info", what="spark-exit")
            self.hist.close()

    def drain(self, ctl: Path) -> int:
        """One availableNow run of the stream from its checkpoint; exit 0 once it drained."""
        self.start_stream(available_now=True)
        self.query.awaitTermination(self.args.drain_timeout)
        if self.query.isActive:
            self.hist.write("info", what="drain-timeout", seconds=self.args.drain_timeout)
            return 2
        exc = self.query.exception()
        if exc is not None:
            self.hist.write("info", what="drain-failed", error=str(exc)[:500])
            return 1
        self.hist.write("info", what="drained")
        (ctl / f"drained-{self.args.worker}").write_text(str(time.time()))
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="chaos.spark_workload")
    ap.add_argument("--root", required=True)
    ap.add_argument("--history", required=True)
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--run", default="run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--fail-p", type=float, default=0.1)
    ap.add_argument("--read-every", type=int, default=4)
    ap.add_argument("--txn-timeout-ms", type=int, default=10000)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--ctl", required=True, help="directory for ready/done/drain files")
    ap.add_argument("--drain-wait", type=float, default=300.0)
    ap.add_argument("--drain-timeout", type=float, default=600.0)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--drain", action="store_true")
    args = ap.parse_args(argv)
    return SparkWorker(args).run()


if __name__ == "__main__":
    sys.exit(main())
