"""Spark's Kafka connector behaviours on format("txnlog") in a running Spark: the guide's
examples with the format swapped, minOffsetsPerTrigger/maxTriggerDelay, and the lag
metrics (min/max/avgOffsetsBehindLatest) of a running query's progress."""

from __future__ import annotations

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
sys.path.insert(0, os.path.dirname(__file__))

from stream_helpers import end_offsets, offsets_log, produce_keyed, read_values, wait_for
from txnlog import TxnlogLagListener, source_lag
from txnlog.datasource.stream_offsets import decode

SERVERS = ("kafka.bootstrap.servers", "host1:port1,host2:port2")


def test_guide_examples_with_the_format_swapped(spark, file_root: str, coord, tmp_path
                                                ) -> None:
    """Each example of the integration guide: as written it fails naming the root; with the
    brokers replaced by the root it reads and writes as the guide documents."""
    client = coord.client()
    client.create_topic("topic1", 2)
    client.create_topic("topic2", 1)
    for t in ("topic1", "topic2"):
        produce_keyed(file_root, coord.endpoint, t, keys=6, per_key=10, txns=2, tid=f"g-{t}")

    # As written: the error names the txnlog way (the root given to load()).
    with pytest.raises(Exception, match=r"no Kafka brokers: pass the log's root"):
        (spark.read.format("txnlog").option(*SERVERS).option("subscribe", "topic1")
         .load(file_root).count())

    # "Subscribe to multiple topics, specifying explicit Kafka offsets"
    df = (spark.read.format("txnlog").option("subscribe", "topic1,topic2")
          .option("startingOffsets", '{"topic1":{"0":23,"1":-2},"topic2":{"0":-2}}')
          .option("endingOffsets", '{"topic1":{"0":50,"1":-1},"topic2":{"0":-1}}')
          .option("coordinator", coord.endpoint).load(file_root))
    rows = df.selectExpr("topic", "partition", "offset", "CAST(key AS STRING)",
                         "CAST(value AS STRING)").collect()
    want = sorted((t, p, off) for t in ("topic1", "topic2")
                  for p, off, _, _ in read_values(file_root, t)
                  if (t, p) != ("topic1", 0) or 23 <= off < 50)
    assert sorted((r.topic, r.partition, r.offset) for r in rows) == want
    assert len(want) < 120  # topic1-0 was cut to [23, 50)

    # "Subscribe to a pattern, at the earliest and latest offsets", and includeHeaders
    n = (spark.read.format("txnlog").option("subscribePattern", "topic.*")
         .option("startingOffsets", "earliest").option("endingOffsets", "latest")
         .option("includeHeaders", "true").option("coordinator", coord.endpoint)
         .load(file_root).select("headers").count())
    assert n == 120

    # Writing: the topic from the option, or from a 'topic' column; kafka.compression.type
    # is txnlog's compression and a tuning option only warns.
    (spark.createDataFrame([("k1", "v1"), ("k2", "v2")], "key string, value string")
     .write.format("txnlog").option("topic", "written").option("coordinator", coord.endpoint)
     .option("kafka.compression.type", "gzip").option("kafka.linger.ms", "5")
     .mode("append").save(file_root))
    (spark.createDataFrame([("written", "k3", "v3")], "topic string, key string, value string")
     .write.format("txnlog").option("coordinator", coord.endpoint).mode("append")
     .save(file_root))
    assert sorted(v for _, _, _, v in read_values(file_root, "written")) == [b"v1", b"v2",
                                                                              b"v3"]

    # Streaming write, the guide's example: checkpointLocation and a topic.
    ckpt = tmp_path / "ckpt"
    q = (spark.readStream.format("txnlog").option("subscribe", "topic2")
         .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed")
         .option("coordinator", coord.endpoint).load(file_root)
         .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
         .writeStream.format("txnlog").option("topic", "copied")
         .option("coordinator", coord.endpoint).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start(file_root))
    q.awaitTermination()
    assert len(read_values(file_root, "copied")) == 60


def test_min_offsets_per_trigger_waits_for_enough_offsets(spark, file_root: str, coord,
                                                          tmp_path) -> None:
    """Spark's Kafka semantics: the first trigger runs at once; later a batch waits until
    minOffsetsPerTrigger offsets are available (maxTriggerDelay far away here)."""
    client = coord.client()
    client.create_topic("mins", 1)
    ckpt = tmp_path / "ckpt"
    q = (spark.readStream.format("txnlog").option("subscribe", "mins")
         .option("startingOffsets", "earliest").option("minOffsetsPerTrigger", "10")
         .option("maxTriggerDelay", "1h").option("coordinator", coord.endpoint)
         .load(file_root).writeStream.format("memory").queryName("mins")
         .option("checkpointLocation", str(ckpt))
         .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: q.lastProgress is not None, "the first trigger")
        # 5 records + a marker = 6 offsets: fewer than 10, so no batch (a wrong source would
        # run one within a trigger or two; give it several).
        produce_keyed(file_root, coord.endpoint, "mins", keys=5, per_key=1, txns=1, tid="a")
        time.sleep(2.0)
        assert spark.sql("select * from mins").count() == 0
        # 6 more offsets: 12 >= 10, one batch with everything.
        produce_keyed(file_root, coord.endpoint, "mins", keys=5, per_key=1, txns=1, tid="b")
        wait_for(lambda: spark.sql("select * from mins").count() == 10, "the batch")
    finally:
        q.stop()
    # Batch 0 is Spark's first batch of a new query (empty: the topic was), then one batch
    # at 12 offsets, none at 6.
    ends = [decode(o) for o in offsets_log(ckpt)]
    assert ends == [{("mins", 0): 0}, {("mins", 0): 12}]


def test_lag_metrics_in_the_progress_of_a_running_query(spark, file_root: str, coord,
                                                        tmp_path) -> None:
    """With maxOffsetsPerTrigger the query runs behind: each batch's progress gives Spark's
    Kafka metrics (latest minus consumed), from source_lag and from the listener."""
    client = coord.client()
    client.create_topic("lag", 1)
    produce_keyed(file_root, coord.endpoint, "lag", keys=4, per_key=3, txns=3)  # 15 offsets
    assert end_offsets(file_root, "lag") == {("lag", 0): 15}
    seen: list[tuple[str, list[dict]]] = []
    listener = TxnlogLagListener(on_lag=lambda qid, name, rows: seen.append((name, rows)))
    spark.streams.addListener(listener)
    try:
        q = (spark.readStream.format("txnlog").option("subscribe", "lag")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "5")
             .option("coordinator", coord.endpoint).load(file_root)
             .writeStream.format("memory").queryName("lagq")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
        lags = [source_lag(p) for p in progress]
        assert [row[0]["metrics"] for row in lags] == [
            {"minOffsetsBehindLatest": str(n), "maxOffsetsBehindLatest": str(n),
             "avgOffsetsBehindLatest": f"{n}.0"} for n in (10, 5, 0)]
        assert {row[0]["description"] for row in lags} == {"txnlog[lag]"}
        wait_for(lambda: len([s for s in seen if s[0] == "lagq"]) >= 3, "the listener's events",
              timeout=60)
        assert listener.lag[str(q.id)][0]["metrics"]["maxOffsetsBehindLatest"] == "0"
    finally:
        spark.streams.removeListener(listener)
