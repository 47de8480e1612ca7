"""The driver of test_worker_daemon.py, its own process (the daemon module is a static
Spark setting, so it needs a session of its own): a txnlog batch write, a read, and an
exactly-once txnlog -> txnlog stream, all through ``txnlog.datasource.worker_daemon``.

``python daemon_driver.py ROOT ENDPOINT CHECKPOINT``; prints ``OK <step> ...`` per step and
``DAEMON <json>``: what the task workers' parent (the daemon) has mapped — numba's LLVM
and Arrow libraries are there only if the daemon preloaded them before forking.
"""

from __future__ import annotations

import json
import os
import sys


def probe(_rows):  # type: ignore[no-untyped-def]
    """In a task worker: what its parent process, the daemon, has loaded."""
    with open(f"/proc/{os.getppid()}/maps") as f:
        maps = f.read()
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        cmd = f.read().replace(b"\0", b" ").decode()
    import gc

    import pyspark

    # frozen: the daemon froze what it preloaded (its workers' collections skip it);
    # pyspark: where the worker's pyspark came from (the installed copy, not Spark's zip)
    # kernels: the codec's compiled kernels are mapped (the module compiled ahead of time,
    # or numba's LLVM where there is none)
    yield {"kernels": "txnlog_kernels_" in maps or "llvmlite" in maps,
           "arrow": "libarrow" in maps, "cmd": cmd,
           "frozen": gc.get_freeze_count(), "pyspark": pyspark.__file__}


def main() -> None:
    root, endpoint, checkpoint = sys.argv[1:4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("txnlog-worker-daemon")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.daemon.module", "txnlog.datasource.worker_daemon")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.range(2000, numPartitions=4).selectExpr(
        "CAST(CAST(id % 50 AS STRING) AS BINARY) AS key",
        "CAST(CAST(id AS STRING) AS BINARY) AS value")
    (rows.write.format("txnlog").option("topic", "in").option("partitions", "4")
     .option("coordinator", endpoint).mode("append").save(root))
    got = spark.read.format("txnlog").option("subscribe", "in").load(root)
    values = sorted(int(r.value) for r in got.select("value").collect())
    print("OK batch", json.dumps({"rows": len(values), "exact": values == list(range(2000))}),
          flush=True)
    q = (spark.readStream.format("txnlog").option("subscribe", "in")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "700")
         .option("groupId", "daemon-test").option("coordinator", endpoint).load(root)
         .select("key", "value").writeStream.format("txnlog").option("topic", "out")
         .option("partitions", "2").option("coordinator", endpoint)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(root))
    q.awaitTermination()
    out = spark.read.format("txnlog").option("subscribe", "out").load(root)
    values = sorted(int(r.value) for r in out.select("value").collect())
    batches = len([p for p in q.recentProgress if p["numInputRows"] > 0])
    print("OK stream", json.dumps({"rows": len(values), "exact": values == list(range(2000)),
                                   "batches": batches}), flush=True)
    seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()
    print("DAEMON", json.dumps(seen), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
