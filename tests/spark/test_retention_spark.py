"""Spark sources under retention: spark-sql-kafka's ``failOnDataLoss``.

A running stream that falls behind retention: ``failOnDataLoss=true`` fails naming the lost
range, ``false`` warns and goes on at the log start (never waits, never re-reads); a batch
read asked to start below the log start does the same."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
sys.path.insert(0, os.path.dirname(__file__))

from coordinator_proc import CoordinatorProc
from stream_helpers import wait_for
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

FAST = ["--merge-min-objects", "4", "--merge-fanout", "3", "--merge-interval-s", "0.1",
        "--retention-check-interval-ms", "200"]


@pytest.fixture
def rcoord(file_root: str) -> Iterator[CoordinatorProc]:
    proc = CoordinatorProc(file_root, extra=FAST)
    try:
        proc.wait_healthy()
        yield proc
    finally:
        proc.stop()


def produce(root: str, endpoint: str, topic: str, start: int, n: int) -> None:
    with TransactionalProducer(root, f"gen-{topic}", coordinator=endpoint) as prod:
        prod.init_transactions()
        for i in range(start, start + n):
            prod.begin_transaction()
            prod.send(topic, f"{i:05d}".encode(), partition=0)
            prod.commit_transaction()


def _stream(spark, root: str, endpoint: str, topic: str, fail: bool, got: list[int]):  # type: ignore[no-untyped-def]
    def collect(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        got.extend(int(bytes(r.value)) for r in batch.select("value").collect())

    return (spark.readStream.format("txnlog").option("subscribe", topic)
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "6")
            .option("failOnDataLoss", str(fail).lower()).option("coordinator", endpoint)
            .load(root).writeStream.foreachBatch(collect)
            .trigger(processingTime="700 milliseconds").start())


@pytest.mark.parametrize("fail", [False, True], ids=["skip", "fail"])
def test_stream_behind_retention(spark, file_root: str, rcoord: CoordinatorProc,
                                 fail: bool) -> None:
    client = CoordinatorClient(rcoord.endpoint)
    client.create_topic("r", 1, {"segment.bytes": "1500", "file.delete.delay.ms": "2000"})
    produce(file_root, rcoord.endpoint, "r", 0, 60)
    got: list[int] = []
    q = _stream(spark, file_root, rcoord.endpoint, "r", fail, got)
    try:
        wait_for(lambda: len(got) >= 3, "the first batch")
        # retention by time catches up with the slow stream: closed segments go
        client.alter_configs("r", {"retention.ms": "1"})
        storage = Storage.for_url(file_root)
        wait_for(lambda: PartitionReader(storage, "r", 0).earliest_offset() > 2 * len(got) + 12,
                 "retention ahead of the stream")
        client.alter_configs("r", {"retention.ms": "-1"})
        log_start = PartitionReader(storage, "r", 0).earliest_offset()
        if fail:
            with pytest.raises(Exception, match=r"are gone|were deleted") as exc:
                q.awaitTermination(120)
            assert "failOnDataLoss=false" in str(exc.value)
            return
        produce(file_root, rcoord.endpoint, "r", 60, 5)
        wait_for(lambda: 64 in got, "the records written after retention", timeout=120)
        assert q.isActive
    finally:
        q.stop()
    # no record twice, order kept, and the gap is exactly what retention deleted (every
    # record is one commit: record i at offset 2i)
    assert got == sorted(set(got))
    missing = sorted(set(range(65)) - set(got))
    assert missing and all(2 * i < log_start for i in missing), (missing, log_start)
    assert got[-5:] == [60, 61, 62, 63, 64]


def test_batch_start_below_log_start(spark, file_root: str, rcoord: CoordinatorProc) -> None:
    client = CoordinatorClient(rcoord.endpoint)
    client.create_topic("b", 1)
    produce(file_root, rcoord.endpoint, "b", 0, 10)
    assert client.delete_records({("b", 0): 8}) == {("b", 0): 8}

    def read(fail: bool, start: str = '{"b":{"0":2}}'):  # type: ignore[no-untyped-def]
        return [int(bytes(r.value)) for r in spark.read.format("txnlog")
                .option("subscribe", "b").option("startingOffsets", start)
                .option("failOnDataLoss", str(fail).lower()).load(file_root)
                .select("value").collect()]

    assert read(True, "earliest") == [4, 5, 6, 7, 8, 9]  # earliest is the log start
    with pytest.raises(Exception, match=r"starting offset 2 of b-0 is before the log start 8"):
        read(True)
    assert read(False) == [4, 5, 6, 7, 8, 9]
    time.sleep(0)


def test_running_stream_picks_up_added_partitions_from_earliest(spark, file_root: str,
                                                                rcoord: CoordinatorProc
                                                                ) -> None:
    client = CoordinatorClient(rcoord.endpoint)
    client.create_topic("g", 1)
    got: list[tuple[int, int]] = []

    def collect(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        got.extend((r.partition, int(bytes(r.value))) for r in
                   batch.select("partition", "value").collect())

    # startingOffsets=latest: partitions added later are still read from their earliest
    q = (spark.readStream.format("txnlog").option("subscribe", "g")
         .option("coordinator", rcoord.endpoint).load(file_root)
         .writeStream.foreachBatch(collect).trigger(processingTime="500 milliseconds").start())
    try:
        wait_for(lambda: q.lastProgress is not None, "the first trigger")
        produce(file_root, rcoord.endpoint, "g", 0, 3)
        wait_for(lambda: len(got) >= 3, "records of partition 0")
        client.create_partitions("g", 3)
        with TransactionalProducer(file_root, "gen-new", coordinator=rcoord.endpoint) as prod:
            prod.init_transactions()
            prod.begin_transaction()
            for p in (1, 2):
                for i in range(4):
                    prod.send("g", f"{100 * p + i:05d}".encode(), partition=p)
            prod.commit_transaction()
        wait_for(lambda: len(got) >= 11, "records of the added partitions")
        time.sleep(1.5)
    finally:
        q.stop()
    assert sorted(got) == sorted([(0, i) for i in range(3)]
                                 + [(p, 100 * p + i) for p in (1, 2) for i in range(4)])
