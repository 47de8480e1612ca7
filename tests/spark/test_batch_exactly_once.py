"""Exactly-once Spark writes under task retries, failed jobs, duplicate attempts and slow stages.

Each test checks both sides: read_committed shows every input row exactly once, and
read_uncommitted shows that the failed or duplicate attempts really wrote rows to the log
(so the committed result is not exactly-once by accident, e.g. because nothing was flushed).

How a task is made to fail *after* it wrote: the local property ``txnlog.write.flushBytes=1``
makes each task flush every Arrow batch it receives (small batches via
``arrow.maxRecordsPerBatch``), and a UDF in the same task, at the partition's last row, waits
until the partition's first key is in a segment object on storage before it raises.

Speculation: Spark's TaskSchedulerImpl starts its speculation thread only when
``!isLocal && spark.speculation``, so ``local[N,F]`` never runs speculative copies. The
duplicate-attempt test therefore drives two concurrent attempts of one task through the real
task path (``run_task``) and the real ``commit()``, exactly as Spark's driver would.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyspark import cloudpickle

# UDFs defined here run in Spark's Python workers, which cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.spark

FLUSH_PROPERTY = "txnlog.write.flushBytes"
PARTS = 4
PER_PART = 400
VALUE_BYTES = 1000


def key_of(i: int) -> str:
    return f"k{i:06d}"


def objects_holding(root_dir: str, topic: str, needle: bytes) -> int:
    """How many objects hold ``needle`` (uncompressed batches): ``topic``'s segment objects
    and the root's shared objects, where writers put their batches before merging."""
    n = 0
    for seg in [*Path(root_dir).glob(f"{topic}-*/*.log"), *Path(root_dir).glob("_wal/*.wal")]:
        try:
            n += needle in seg.read_bytes()
        except FileNotFoundError:
            continue
    return n


def in_log(root_dir: str, topic: str, needle: bytes) -> bool:
    """Whether any object of ``topic``'s writes holds ``needle``."""
    return objects_holding(root_dir, topic, needle) > 0


def failing_value(root_dir: str, topic: str, fail_parts: set[int], always: bool,
                  per_part: int, wait_s: float = 60.0):
    """A UDF body: the value for id ``i``; fails chosen tasks at their last row, once the
    task's own writer has put rows of the partition in the log."""

    def value(i: int) -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        p = ctx.partitionId()
        if (p in fail_parts and (always or ctx.attemptNumber() == 0)
                and i == (p + 1) * per_part - 1):
            first = key_of(p * per_part).encode()
            deadline = time.monotonic() + wait_s
            while not in_log(root_dir, topic, first) and time.monotonic() < deadline:
                time.sleep(0.05)
            raise RuntimeError(f"injected failure in partition {p}, attempt "
                               f"{ctx.attemptNumber()}, after its rows were written")
        return f"v{i:06d}".ljust(VALUE_BYTES, ".")

    return value


@pytest.fixture
def flush_every_batch(spark) -> Iterator[None]:
    """Small Arrow batches into the sink, each one flushed to storage at once."""
    sc = spark.sparkContext
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    sc.setLocalProperty(FLUSH_PROPERTY, "1")
    try:
        yield
    finally:
        sc.setLocalProperty(FLUSH_PROPERTY, None)
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)


def input_df(spark, value_fn):
    from pyspark.sql import functions as F

    udf = F.udf(value_fn, "string")
    return spark.range(0, PARTS * PER_PART, numPartitions=PARTS).select(
        F.format_string("k%06d", "id").alias("key"), udf("id").alias("value"))


def read_keys(spark, root: str, topic: str, isolation: str = "read_committed") -> Counter:
    rows = (spark.read.format("txnlog").option("subscribe", topic)
            .option("isolation.level", isolation).load(root)
            .selectExpr("CAST(key AS STRING) AS k").collect())
    return Counter(r.k for r in rows)


def test_failed_first_attempts_commit_exactly_once(spark, file_root: str,
                                                   flush_every_batch: None) -> None:
    root_dir = urlparse(file_root).path
    fail = {1, 3}
    df = input_df(spark, failing_value(root_dir, "eo", fail, always=False, per_part=PER_PART))
    df.write.format("txnlog").option("topic", "eo").option("partitions", "3") \
        .mode("append").save(file_root)

    committed = read_keys(spark, file_root, "eo")
    assert sum(committed.values()) == PARTS * PER_PART
    assert set(committed) == {key_of(i) for i in range(PARTS * PER_PART)}
    assert set(committed.values()) == {1}

    # The failed attempts wrote their rows: the first key of each failed partition is in a
    # shared object of attempt 0 (the UDF waited for it) and in attempt 1's. Only the driver's
    # EndTxn confirms runs, naming the successful attempts' alone, so no partition holds the
    # failed attempts' records, not even for read_uncommitted (their objects are orphans,
    # swept by the merger).
    for p in range(PARTS):
        assert objects_holding(root_dir, "eo", key_of(p * PER_PART).encode()) == \
            (2 if p in fail else 1), p
    assert read_keys(spark, file_root, "eo", "read_uncommitted") == committed


def test_job_failing_for_good_leaves_nothing_visible(spark, file_root: str,
                                                     flush_every_batch: None) -> None:
    root_dir = urlparse(file_root).path
    df = input_df(spark, failing_value(root_dir, "dead", {1}, always=True, per_part=PER_PART))
    with pytest.raises(Exception, match="injected failure in partition 1"):
        df.write.format("txnlog").option("topic", "dead").mode("append").save(file_root)

    assert read_keys(spark, file_root, "dead") == Counter()
    # Partition 1's attempts wrote (at least its first attempt's first rows), and the other
    # partitions' successful attempts wrote all their rows; the abort confirmed none of it,
    # so even read_uncommitted sees nothing.
    assert objects_holding(root_dir, "dead", key_of(PER_PART).encode()) >= 1
    assert all(objects_holding(root_dir, "dead", key_of(i).encode()) == 1
               for i in range(PER_PART))
    assert read_keys(spark, file_root, "dead", "read_uncommitted") == Counter()


class _FakeTaskContext:
    """What run_task reads from pyspark.TaskContext, for a hand-driven task attempt."""

    def __init__(self, partition: int, attempt: int, task_attempt_id: int) -> None:
        self._p, self._a, self._t = partition, attempt, task_attempt_id

    def partitionId(self) -> int:
        return self._p

    def attemptNumber(self) -> int:
        return self._a

    def taskAttemptId(self) -> int:
        return self._t

    def getLocalProperty(self, key: str) -> str | None:
        return "1" if key == FLUSH_PROPERTY else None


def test_speculative_duplicate_attempt_commits_once(spark, file_root: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import TaskContext
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StructField, StructType
    from txnlog.coordinator.errors import ProducerFencedError
    from txnlog.datasource.source import TxnlogDataSource

    def batch(lo: int, hi: int) -> pa.RecordBatch:
        return pa.record_batch({
            "key": pa.array([key_of(i).encode() for i in range(lo, hi)], pa.binary()),
            "value": pa.array([f"v{i}".encode() for i in range(lo, hi)], pa.binary())})

    # The driver side, as Spark runs it: the data source, then writer() before any task.
    ds = TxnlogDataSource(CaseInsensitiveDict(
        {"path": file_root, "topic": "spec", "partitions": "2"}))
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    writer = ds.writer(schema, False)

    local = threading.local()
    monkeypatch.setattr(TaskContext, "get", staticmethod(lambda: local.ctx))
    speculative_wrote, committed = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def speculative_input() -> Iterator[pa.RecordBatch]:
        yield batch(0, 50)
        speculative_wrote.set()  # asked for more: the first batch is flushed (not confirmed)
        committed.wait(60)
        yield batch(50, 100)  # the job already committed: this attempt is a zombie now

    def speculative() -> None:
        local.ctx = _FakeTaskContext(0, 1, 101)
        try:
            outcome["speculative"] = writer.write(speculative_input())
        except Exception as exc:
            outcome["speculative"] = exc

    thread = threading.Thread(target=speculative)
    thread.start()
    assert speculative_wrote.wait(60)
    local.ctx = _FakeTaskContext(0, 0, 100)
    original = writer.write(iter([batch(0, 50), batch(50, 100)]))
    writer.commit([original])  # Spark commits the attempt that finished first
    committed.set()
    thread.join(60)

    assert isinstance(outcome["speculative"], ProducerFencedError), outcome
    assert read_keys(spark, file_root, "spec") == Counter(key_of(i) for i in range(100))
    # The zombie's first flush landed in a shared object of its own, but only the driver's
    # EndTxn confirms runs, and it named the original attempt's: no partition holds the
    # zombie's records, not even for read_uncommitted.
    everything = read_keys(spark, file_root, "spec", "read_uncommitted")
    assert everything == Counter(key_of(i) for i in range(100))


_seen: Counter = Counter()  # rows per task attempt, in a (reused) UDF worker


def slow_value(pause_s: float, first_of_partition: int | None, after_rows: int | None):
    """A UDF body that pauses once per task: at the first id of each input partition
    (stage 1), or after ``after_rows`` rows of the task (mid-stream in the write stage)."""

    def value(i: int) -> str:
        from pyspark import TaskContext

        if first_of_partition is not None and i % first_of_partition == 0:
            time.sleep(pause_s)
        if after_rows is not None:
            task = TaskContext.get().taskAttemptId()
            _seen[task] += 1
            if _seen[task] == after_rows:
                time.sleep(pause_s)
        return f"v{i}".ljust(VALUE_BYTES, ".")

    return value


def test_long_upstream_stage_does_not_time_the_transaction_out(spark, file_root: str) -> None:
    from pyspark.sql import functions as F

    timeout_ms, pause_s, n = 3000, 4.5, 800
    # Stage 1 (before the shuffle) sleeps longer than the timeout: writer() already ran, but
    # no member has joined yet, so the transaction's timer must not be running.
    stage1 = F.udf(slow_value(pause_s, n // 2, None), "string")
    # Stage 2 (the write stage) pauses mid-stream, after the task's first batches reached
    # the sink and its member joined: only heartbeats keep the transaction alive.
    stage2 = F.udf(slow_value(pause_s, None, 200), "string")
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        df = (spark.range(0, n, numPartitions=2).select("id", stage1("id").alias("v1"))
              .repartition(2, "id")
              .select(F.format_string("k%06d", "id").alias("key"), stage2("id").alias("value")))
        (df.write.format("txnlog").option("topic", "slow")
           .option("transaction.timeout.ms", str(timeout_ms)).mode("append").save(file_root))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    assert read_keys(spark, file_root, "slow") == Counter(key_of(i) for i in range(n))
