"""The driver of the multi-host test (test_multi_host.py), run as its own process against a
Spark cluster (standalone master + workers, or ``local-cluster``).

It passes no ``coordinator`` option: it resolves the root's registered coordinator (the
advertised URL) itself, and its token comes from its own environment
(``TXNLOG_COORDINATOR_TOKEN``) — the executors have neither, so both must travel with the
job. Tasks run a slow ``mapInArrow`` that drops a marker file when it starts, so the test can
SIGKILL an executor while tasks are writing (``txnlog.write.flushBytes=1``: every Arrow batch
is on storage before the next is taken).

Steps, each printing ``OK <step> ...``:
1. a batch write of ROWS rows in 4 partitions (markers ``batch-*``), then a read of them;
2. input for the stream (keyed ``k<i>:<seq>`` records, the producer API);
3. an exactly-once stream (markers ``stream-*``) to the ``out`` topic, AvailableNow.
"""

from __future__ import annotations

import os
import sys
import time

ROWS = 4000
DELAY_S = 0.4
FLUSH_PROPERTY = "txnlog.write.flushBytes"


def slow_stage(work_dir: str, phase: str):  # type: ignore[no-untyped-def]
    """A mapInArrow function: marks the task's start, then passes batches on slowly."""
    def run(batches):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        ctx = TaskContext.get()
        name = f"{phase}-p{ctx.partitionId()}-a{ctx.attemptNumber()}-{os.getpid()}"
        with open(os.path.join(work_dir, name), "w") as f:
            f.write(str(os.getppid()))
        for batch in batches:
            time.sleep(DELAY_S)
            yield batch
    return run


def main(master: str, driver_host: str, root: str, ckpt: str, work_dir: str) -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from pyspark.sql import SparkSession
    from stream_helpers import produce_keyed
    from txnlog.coordinator.client.embedded import coordinator_for_root

    builder = (SparkSession.builder.master(master).appName("txnlog-multi-host")
               .config("spark.ui.enabled", "false")
               .config("spark.executor.memory", "768m")
               .config("spark.executor.cores", "1")
               .config("spark.cores.max", "2")
               .config("spark.task.maxFailures", "8")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
               .config("spark.python.worker.reuse", "true"))
    if driver_host:
        builder = builder.config("spark.driver.host", driver_host) \
            .config("spark.driver.bindAddress", driver_host)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    endpoint = coordinator_for_root(root, start=False)
    print(f"OK resolved {endpoint}", flush=True)

    sc.setLocalProperty(FLUSH_PROPERTY, "1")
    df = spark.range(0, ROWS, numPartitions=4).selectExpr(
        "CAST(id % 16 AS STRING) AS key", "CONCAT('r', CAST(id AS STRING)) AS value")
    df = df.mapInArrow(slow_stage(work_dir, "batch"), df.schema)
    df.write.format("txnlog").option("topic", "batch").option("partitions", "2") \
        .mode("append").save(root)
    print("OK batch_write", flush=True)
    values = [r.v for r in spark.read.format("txnlog").option("subscribe", "batch")
              .load(root).selectExpr("CAST(value AS STRING) AS v").collect()]
    assert len(values) == ROWS and set(values) == {f"r{i}" for i in range(ROWS)}, \
        (len(values), len(set(values)))
    print(f"OK batch_read {len(values)}", flush=True)

    from txnlog.coordinator.client.coordinator_client import CoordinatorClient

    CoordinatorClient(endpoint).create_topic("in", 3, exist_ok=True)
    expected = produce_keyed(root, endpoint, "in", keys=12, per_key=150, txns=6)
    with open(os.path.join(work_dir, "expected.txt"), "w") as f:
        f.write(repr(expected))
    print(f"OK input {sum(expected.values())}", flush=True)

    src = (spark.readStream.format("txnlog").option("subscribe", "in")
           .option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", "600").load(root)
           .selectExpr("key", "CONCAT('out:', CAST(value AS STRING)) AS value"))
    src = src.mapInArrow(slow_stage(work_dir, "stream"), src.schema)
    query = (src.writeStream.format("txnlog").option("topic", "out")
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start(root))
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()
    print("OK stream", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
