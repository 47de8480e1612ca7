"""Spark and Kafka clients on one root, through ``txnlog gateway``.

What Spark writes, librdkafka and kafka-python consume (read_committed, exactly Spark's
rows); what a Kafka producer writes through the gateway, ``spark.read`` reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

pytestmark = pytest.mark.spark
N = 3_000


@pytest.fixture(scope="module")
def served(spark, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, CoordinatorProc, GatewayProc]]:
    root = (tmp_path_factory.mktemp("gw-spark") / "root").as_uri()
    coord = CoordinatorProc(root)
    coord.wait_healthy()
    gw = GatewayProc(root)
    try:
        from pyspark.sql import functions as F

        df = (spark.range(0, N, numPartitions=3)
              .select(F.format_string("k%05d", "id").alias("key"),
                      F.format_string("v%05d", "id").alias("value")))
        df.write.format("txnlog").option("topic", "sp").option("partitions", "3") \
            .option("coordinator", coord.endpoint).mode("append").save(root)
        gw.wait_listening()
        yield root, coord, gw
    finally:
        gw.stop()
        coord.stop()


def test_kafka_clients_read_what_spark_wrote(served: tuple[str, CoordinatorProc,
                                                           GatewayProc]) -> None:
    _root, _coord, gw = served
    want = sorted(f"v{i:05d}" for i in range(N))
    kc = KafkaConsumer(bootstrap_servers=gw.bootstrap, isolation_level="read_committed",
                       auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=8000)
    kc.assign([KTP("sp", p) for p in range(3)])
    got = sorted(m.value.decode() for m in kc)
    kc.close()
    assert got == want
    cc = CKConsumer({"bootstrap.servers": gw.bootstrap, "group.id": "sp-reader",
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    cc.subscribe(["sp"])
    out: list[str] = []
    deadline = time.monotonic() + 90
    while len(out) < N and time.monotonic() < deadline:
        for m in cc.consume(1000, 1.0):
            assert m.error() is None, m.error()
            out.append(m.value().decode())
    cc.close()
    assert sorted(out) == want


def test_spark_reads_what_a_kafka_producer_wrote(spark, served: tuple[
        str, CoordinatorProc, GatewayProc]) -> None:
    root, coord, gw = served
    coord.client().create_topic("kin", 2)
    p = CKProducer({"bootstrap.servers": gw.bootstrap, "enable.idempotence": True,
                    "linger.ms": 5})
    errors: list[object] = []
    for i in range(1000):
        p.produce("kin", value=f"m{i}".encode(), key=f"k{i % 13}".encode(),
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(120) == 0 and errors == []
    rows = spark.read.format("txnlog").option("subscribe", "kin").load(root) \
        .select("key", "value", "partition", "offset").collect()
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(f"m{i}" for i in range(1000))
    # each key in one partition, offsets unique per partition
    where = {}
    for r in rows:
        where.setdefault(bytes(r.key), set()).add(r.partition)
    assert all(len(ps) == 1 for ps in where.values())
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)
