"""txnlog in one minute: transactional Spark writes to a Kafka-format log in a local folder.

    python examples/quickstart.py [FOLDER]

No broker and no set-up: the first write starts the folder's coordinator on 127.0.0.1 (it
exits on its own when idle). Shows a transactional write, a read_committed read, and that
a failed Spark job and an aborted producer transaction stay invisible.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path


def main(folder: str | None = None) -> None:
    # Spark's Python workers must run this interpreter (the one with txnlog installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    warnings.filterwarnings("ignore", module="pyspark")  # UDF type-hint/Arrow notes
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    root = Path(folder or tempfile.mkdtemp(prefix="txnlog-quickstart-")).absolute()
    root.mkdir(parents=True, exist_ok=True)
    url = root.as_uri()
    print(f"txnlog root: {url}")

    spark = (SparkSession.builder.master("local[2]").appName("txnlog-quickstart")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")  # keep the failed job below quiet

    def read(isolation: str = "read_committed"):
        return (spark.read.format("txnlog").option("subscribe", "orders")
                .option("isolation.level", isolation).load(url))

    # 1. One DataFrame write = one Kafka transaction, all partitions at once.
    orders = spark.range(10).select(
        F.format_string("order-%d", "id").alias("key"),
        F.to_json(F.struct("id", (F.col("id") * 2.5).alias("amount"))).alias("value"))
    orders.write.format("txnlog").option("topic", "orders").option("partitions", "2") \
        .mode("append").save(url)
    print("1. wrote 10 orders in one transaction")

    # 2. Read it back: Kafka's schema, read_committed by default, no server needed.
    df = read()
    df.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                  "partition", "offset").orderBy("partition", "offset").show(truncate=False)
    print(f"2. read_committed: {df.count()} rows")

    # 3. A job that fails halfway: its transaction is aborted, nothing becomes visible.
    @F.udf("string")
    def fragile(i: int) -> str:
        if i == 7:
            raise ValueError("order 7 is broken")
        return f'{{"id": {i}}}'

    try:
        failing = spark.range(100, 110, numPartitions=1).select(
            F.format_string("order-%d", "id").alias("key"),
            fragile(F.col("id") - 100).alias("value"))
        failing.write.format("txnlog").option("topic", "orders").mode("append").save(url)
    except Exception as exc:
        print(f"3. a failing job was aborted ({type(exc).__name__}); "
              f"read_committed still: {read().count()} rows")

    # 4. A producer transaction whose records reach storage, then abort_transaction().
    from txnlog import TransactionalProducer

    with TransactionalProducer(url, "quickstart-producer") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send("orders", f'{{"id": {200 + i}}}', key=f"order-{200 + i}")
        producer.flush()  # the records are in the log now ...
        producer.abort_transaction()  # ... and marked aborted
    print(f"4. aborted producer transaction: read_committed {read().count()} rows, "
          f"read_uncommitted {read('read_uncommitted').count()} rows (aborted records "
          "are in the log, but readers that wait for commits never see them)")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
