"""Exactly-once consume-transform-produce with Spark Structured Streaming on a local folder.

    python examples/streaming_exactly_once.py [FOLDER]

Reads topic ``orders`` with ``readStream.format("txnlog")``, enriches each record, and
writes topic ``orders-enriched`` with ``writeStream.format("txnlog")``: one transaction per
micro-batch. The consumer group ``enricher``'s offsets commit inside the same transactions,
so a read_committed reader and the group's offsets are always in step. Kill it at any
moment and run it again on the same folder: the output stays exactly once (the checkpoint
replays the batch; the coordinator remembers which batches committed).

No broker, no set-up: the folder's coordinator starts on 127.0.0.1 by itself.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def produce(url: str, n: int) -> None:
    """Some input: JSON orders keyed by customer, in one Kafka-style transaction."""
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient
    from txnlog.coordinator.client.embedded import coordinator_for_root
    from txnlog.coordinator.client.producer import TransactionalProducer

    CoordinatorClient(coordinator_for_root(url)).create_topic("orders", 3, exist_ok=True)
    with TransactionalProducer(url, f"order-source-{os.getpid()}") as prod:
        prod.init_transactions()
        prod.begin_transaction()
        for i in range(n):
            order = {"order": i, "customer": f"c{i % 7}", "amount": (i * 37) % 500}
            prod.send("orders", json.dumps(order).encode(), key=order["customer"].encode())
        prod.commit_transaction()


def main(folder: str | None = None) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need the txnlog interpreter
    from pyspark.sql import SparkSession

    root = Path(folder or tempfile.mkdtemp(prefix="txnlog-streaming-")).absolute()
    root.mkdir(parents=True, exist_ok=True)
    url, checkpoint = root.as_uri(), str(root / "_checkpoints" / "enricher")
    print(f"txnlog root: {url}")
    produce(url, 1000)

    spark = (SparkSession.builder.master("local[2]").appName("txnlog-streaming")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    orders = (spark.readStream.format("txnlog")
              .option("subscribe", "orders")
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "400")   # admission control: <= 400 per batch
              .option("groupId", "enricher")           # committed with the output
              .load(url))
    enriched = (orders
                .selectExpr("key", "offset", "from_json(CAST(value AS STRING), "
                            "'order INT, customer STRING, amount INT') AS o")
                .selectExpr("key", "to_json(named_struct('order', o, 'big', o.amount >= 250, "
                            "'source_offset', offset)) AS value"))
    # A driver killed while Spark wrote the checkpoint's first offset-log entry leaves a
    # file Spark >= 4.1 refuses to restart with; this removes it (docs/streaming.md).
    from txnlog.datasource.read.stream_checkpoint import clear_abandoned_first_batch

    clear_abandoned_first_batch(checkpoint)
    query = (enriched.writeStream.format("txnlog")
             .option("topic", "orders-enriched")
             .option("checkpointLocation", checkpoint)
             .outputMode("append")
             .trigger(availableNow=True)       # drain what is there, in bounded batches
             .start(url))
    query.awaitTermination()
    print(f"micro-batches this run: {len(query.recentProgress)}")

    out = (spark.read.format("txnlog").option("subscribe", "orders-enriched").load(url)
           .selectExpr("CAST(value AS STRING) AS v"))
    n = out.count()
    distinct = out.selectExpr("get_json_object(v, '$.order.order') AS o").distinct().count()
    print(f"orders-enriched: {n} records, {distinct} distinct orders (exactly once: "
          f"{n == distinct})")
    print("first:", out.first().v)

    from txnlog.coordinator.client.coordinator_client import CoordinatorClient
    from txnlog.coordinator.client.embedded import coordinator_for_root

    offsets = CoordinatorClient(coordinator_for_root(url)).committed_offsets("enricher")
    print("group 'enricher' committed offsets:",
          {f"{t}-{p}": o for (t, p), o in sorted(offsets.items())})
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
