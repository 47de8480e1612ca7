"""A Spark Connect client (``SparkSession.builder.remote("local[2]")``) using txnlog: batch
write, batch read and an exactly-once stream. Run by test_spark_connect.py as its own
process (a Connect session cannot share a Python process with a classic one); prints one
``OK <step> <numbers>`` line per step."""

from __future__ import annotations

import sys
from collections import Counter


def main(root: str, ckpt: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.remote("local[2]")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    df = spark.range(200).selectExpr("CAST(id % 10 AS STRING) AS key",
                                     "CONCAT('v', CAST(id AS STRING)) AS value")
    df.write.format("txnlog").option("topic", "in").option("partitions", "3") \
        .mode("append").save(root)
    print("OK batch_write 200", flush=True)

    rows = spark.read.format("txnlog").option("subscribe", "in").load(root) \
        .selectExpr("CAST(value AS STRING) AS v").collect()
    values = sorted(r.v for r in rows)
    assert values == sorted(f"v{i}" for i in range(200)), values[:5]
    print(f"OK batch_read {len(values)}", flush=True)

    def run_stream() -> None:
        q = (spark.readStream.format("txnlog").option("subscribe", "in")
             .option("startingOffsets", "earliest").load(root)
             .selectExpr("key", "CONCAT('out:', CAST(value AS STRING)) AS value")
             .writeStream.format("txnlog").option("topic", "out")
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start(root))
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()

    run_stream()
    df2 = spark.range(200, 300).selectExpr("CAST(id % 10 AS STRING) AS key",
                                           "CONCAT('v', CAST(id AS STRING)) AS value")
    df2.write.format("txnlog").option("topic", "in").mode("append").save(root)
    run_stream()  # restarts from the checkpoint: only the new 100 records
    out = spark.read.format("txnlog").option("subscribe", "out").load(root) \
        .selectExpr("CAST(value AS STRING) AS v").collect()
    counts = Counter(r.v for r in out)
    dups = [v for v, n in counts.items() if n > 1]
    assert not dups, dups[:5]
    assert set(counts) == {f"out:v{i}" for i in range(300)}, len(counts)
    print(f"OK stream {len(out)} exactly_once", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
