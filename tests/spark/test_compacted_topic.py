"""Spark and compacted topics: a write of a null key to a topic with
``cleanup.policy=compact`` fails with Kafka's InvalidRecord reason and leaves nothing
visible; a batch read of a compacted topic gives the same latest-per-key table before and
after the coordinator compacted it (against a real coordinator process)."""

from __future__ import annotations

import time

import pytest
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.log_format.manifest import read_latest_manifest
from txnlog.log_format.storage import Storage

from tests.coordinator_proc import CoordinatorProc

FAST = ["--merge-min-objects", "4", "--merge-fanout", "3", "--merge-interval-s", "0.1"]
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "600",
           "min.cleanable.dirty.ratio": "0.2", "file.delete.delay.ms": "2000"}


def latest_table(spark, root: str, endpoint: str) -> dict[str, str]:
    """The latest value per key of a batch read (Spark: last row per key by offset)."""
    df = (spark.read.format("txnlog").option("subscribe", "ct")
          .option("coordinator", endpoint).load(root))
    rows = sorted(df.select("key", "value", "partition", "offset").collect(),
                  key=lambda r: (r.partition, r.offset))
    out: dict[str, str | None] = {}
    for r in rows:
        out[bytes(r.key).decode()] = None if r.value is None else bytes(r.value).decode()
    return {k: v for k, v in out.items() if v is not None}


def test_null_key_refused_and_latest_per_key_survives_compaction(spark,
                                                                  file_root: str) -> None:
    proc = CoordinatorProc(file_root, extra=FAST)
    try:
        endpoint = proc.wait_healthy()
        CoordinatorClient(endpoint).create_topic("ct", 2, COMPACT)
        with pytest.raises(Exception, match="Compacted topic cannot accept message without "
                                            "key in topic partition 'ct'"):
            (spark.createDataFrame([("a", "1"), (None, "2")], "key string, value string")
             .write.format("txnlog").option("topic", "ct").option("coordinator", endpoint)
             .mode("append").save(file_root))
        assert latest_table(spark, file_root, endpoint) == {}  # nothing of it is visible
        want: dict[str, str] = {}
        for round_ in range(4):  # 4 transactions of 60 updates of 20 keys
            data = [(f"k{(i * 7 + round_) % 20}", f"r{round_}-{i}") for i in range(60)]
            (spark.createDataFrame(data, "key string, value string").coalesce(1)
             .write.format("txnlog").option("topic", "ct").option("coordinator", endpoint)
             .mode("append").save(file_root))
            for k, v in data:
                want[k] = v
        before = latest_table(spark, file_root, endpoint)
        assert before == want
        storage = Storage.for_url(file_root)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            mans = [read_latest_manifest(storage, "ct", p) for p in range(2)]
            if all(m is not None and any(o.gen for o in m.objects) for m in mans):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"never compacted: {proc.log_tail()}")
        assert latest_table(spark, file_root, endpoint) == before
    finally:
        proc.stop()
