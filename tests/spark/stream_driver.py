"""A streaming driver in its own process, for the kill tests: txnlog in -> txnlog out.

    python tests/spark/stream_driver.py ROOT CHECKPOINT '{"subscribe": "in", ...}' OUT_TOPIC
        [--trigger available-now|processing] [--sink-option k=v ...]

The query keeps key and timestamp and rewrites the value to ``out:<value>``, so the
output can be checked record for record against the input. It prints ``STARTED`` once the
query runs and ``DONE`` when an AvailableNow run has drained its input; the test SIGKILLs
the process group at any moment in between and starts it again on the same checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("checkpoint")
    ap.add_argument("source_options")
    ap.add_argument("out_topic")
    ap.add_argument("--trigger", default="available-now")
    ap.add_argument("--sink-option", action="append", default=[])
    ap.add_argument("--run-seconds", type=float, default=0.0)
    ap.add_argument("--go-file", default=None,
                    help="build the session and the query, then wait for this file to "
                    "exist before touching the checkpoint (the test boots the next run while "
                    "the current one still runs)")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # A driver is started ~20 times per test run: the C1 JIT alone starts the JVM faster.
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", '--driver-java-options '
                          '"-XX:+UseSerialGC -XX:TieredStopAtLevel=1" pyspark-shell')
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("txnlog-stream-driver")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    reader = spark.readStream.format("txnlog")
    for k, v in json.loads(args.source_options).items():
        reader = reader.option(k, v)
    df = reader.load(args.root).selectExpr(
        "key", "concat(CAST('out:' AS BINARY), value) AS value", "timestamp")
    writer = (df.writeStream.format("txnlog").outputMode("append")
              .option("topic", args.out_topic)
              .option("checkpointLocation", args.checkpoint))
    for kv in args.sink_option:
        k, _, v = kv.partition("=")
        writer = writer.option(k, v)
    if args.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    if args.go_file:
        print("READY", flush=True)
        while not os.path.exists(args.go_file):
            time.sleep(0.02)
    # What a user's program does before starting a query on an existing checkpoint: a
    # driver killed while Spark wrote offsets/0 leaves a file Spark >= 4.1 refuses to
    # restart with (docs/streaming.md, "Restarting after a crash").
    from txnlog.datasource.read.stream_checkpoint import clear_abandoned_first_batch

    for path in clear_abandoned_first_batch(args.checkpoint):
        print("REMOVED", path, flush=True)
    query = writer.start(args.root)
    print("STARTED", query.id, flush=True)
    try:
        if args.run_seconds:
            query.awaitTermination(args.run_seconds)
            query.stop()
        else:
            query.awaitTermination()
    except Exception as exc:  # the test reads the message
        print("FAILED", type(exc).__name__, str(exc).replace("\n", " ")[:4000], flush=True)
        return 1
    print("DONE", time.time(), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
