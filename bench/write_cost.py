"""What a write costs the root: objects (PUTs) and coordinator calls per MB, by partitions.

Object stores bill per request, so the cost of a write is the objects it leaves and the
calls it makes, not its bytes. Each scenario writes through real processes (a coordinator,
a gateway) on a fresh root and counts what the root gained (every object: shared objects,
partition objects, the coordinator's log, stable heads, merging's output; nothing is deleted
within a run, whose grace period is a minute) and the coordinator's requests (its
``/metrics``):

- ``gateway``: librdkafka's idempotent producer with its default settings through
  ``txnlog gateway``, offering ``--rate`` records/s of ``--value-bytes`` with random keys
  (spread over every partition) for ``--seconds``; delivered records/s and produce-to-ack
  p50/p99 from its delivery reports;
- ``producer``: txnlog's ``IdempotentProducer`` flushing every ``--flush-records`` records
  spread over every partition;
- ``transactions``: txnlog's ``TransactionalProducer``, transactions of one record per
  partition: objects and calls per transaction;
- ``aborts``: the same, each flushed and then aborted (data, ABORT markers and their
  ``.txnindex`` entries);
- ``spark`` (``--spark``): one Spark batch write of ``--spark-records`` rows over the
  partitions with 4 tasks: objects per write.

Run it before/after a change with ``bench/ab.py --script-from-working-tree`` (same
machine, same load, interleaved):

    python bench/ab.py --rev 6c556a4 --rounds 1 --script-from-working-tree \
        --metric objects_per_mb --metric records_per_s -- write_cost.py --partitions 1,16,64
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from txnlog.log_format.storage import Storage


def count_objects(storage: Storage, skip: str | None = None) -> int:
    """Every object under the root (a recursive walk of its listing); ``skip``: but those
    of the top-level directories starting with this (another topic's partitions)."""
    n, todo = 0, [""]
    while todo:
        d = todo.pop()
        n += len(storage.list(d))
        todo += [f"{d}/{sub}".strip("/") for sub in storage.list_dirs(d)
                 if skip is None or d or not sub.startswith(skip)]
    return n


def coordinator_calls(endpoint: str) -> float:
    text = urllib.request.urlopen(f"{endpoint}/metrics").read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith("txnlog_coordinator_requests_total{"))


def run_gateway(root: str, coord: CoordinatorProc, partitions: int, rate: int,
                value_bytes: int, seconds: float) -> dict[str, Any]:
    from confluent_kafka import Producer

    topic = f"g{partitions}"
    coord.client().create_topic(topic, partitions)
    with GatewayProc(root) as gw:
        storage = Storage.for_url(root)
        before, calls0 = count_objects(storage), coordinator_calls(coord.endpoint)
        p = Producer({"bootstrap.servers": gw.bootstrap, "enable.idempotence": True})
        sent: dict[int, float] = {}
        acked: list[float] = []
        failed = [0]

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failed[0] += 1
                return
            i = int.from_bytes(msg.value()[:8], "big")
            acked.append(time.perf_counter() - sent.pop(i))

        pad = os.urandom(max(0, value_bytes - 8))
        t0 = time.perf_counter()
        i = 0
        while (now := time.perf_counter()) - t0 < seconds:
            due = int((now - t0) * rate)
            while i < due:
                try:
                    sent[i] = time.perf_counter()
                    p.produce(topic, i.to_bytes(8, "big") + pad,
                              key=random.randbytes(8), on_delivery=report)
                    i += 1
                except BufferError:  # the client's queue is full: the gateway is behind
                    sent.pop(i, None)
                    break
            p.poll(0.005)
        offered_s = time.perf_counter() - t0
        in_time = len(acked)
        p.flush(300)
        drained_s = time.perf_counter() - t0
        mb = len(acked) * value_bytes / 1e6
        objects = count_objects(storage) - before
        calls = coordinator_calls(coord.endpoint) - calls0
    q = statistics.quantiles(acked, n=100) if len(acked) > 1 else [0.0] * 99
    return {"scenario": "gateway", "partitions": partitions, "offered_per_s": rate,
            "records": len(acked), "failed": failed[0],
            "records_per_s": round(in_time / offered_s, 1),
            "drained_s": round(drained_s, 2), "objects": objects,
            "objects_per_mb": round(objects / mb, 1) if mb else None,
            "objects_per_s": round(objects / drained_s, 1),
            "calls_per_mb": round(calls / mb, 1) if mb else None,
            "ack_p50_ms": round(q[49] * 1000, 1), "ack_p99_ms": round(q[98] * 1000, 1)}


def run_producer(root: str, coord: CoordinatorProc, partitions: int, records: int,
                 value_bytes: int, flush_records: int) -> dict[str, Any]:
    from txnlog.coordinator.client.producer import IdempotentProducer

    topic = f"p{partitions}"
    coord.client().create_topic(topic, partitions)
    storage = Storage.for_url(root)
    before, calls0 = count_objects(storage), coordinator_calls(coord.endpoint)
    value = os.urandom(value_bytes)
    t0 = time.perf_counter()
    with IdempotentProducer(root, coordinator=coord.endpoint) as p:
        for i in range(records):
            p.send(topic, value, partition=i % partitions)
            if i % flush_records == flush_records - 1:
                p.flush()
        p.flush()
    dt = time.perf_counter() - t0
    mb = records * value_bytes / 1e6
    objects = count_objects(storage) - before
    calls = coordinator_calls(coord.endpoint) - calls0
    return {"scenario": "producer", "partitions": partitions, "records": records,
            "flushes": -(-records // flush_records),
            "records_per_s": round(records / dt, 1), "objects": objects,
            "objects_per_mb": round(objects / mb, 1),
            "objects_per_flush": round(objects / -(-records // flush_records), 2),
            "calls_per_mb": round(calls / mb, 1)}


def run_transactions(root: str, coord: CoordinatorProc, partitions: int, txns: int,
                     value_bytes: int, abort: bool = False) -> dict[str, Any]:
    """``txns`` transactions of one record per partition, committed, or (``abort``) flushed
    and then aborted: what an aborted transaction leaves (data, markers, their .txnindex)."""
    from txnlog.coordinator.client.producer import TransactionalProducer

    topic = f"{'a' if abort else 't'}{partitions}"
    coord.client().create_topic(topic, partitions)
    storage = Storage.for_url(root)
    before, calls0 = count_objects(storage), coordinator_calls(coord.endpoint)
    value = os.urandom(value_bytes)
    t0 = time.perf_counter()
    with TransactionalProducer(root, f"bench-{partitions}", coordinator=coord.endpoint) as p:
        p.init_transactions()
        for _ in range(txns):
            p.begin_transaction()
            for part in range(partitions):
                p.send(topic, value, partition=part)
            if abort:
                p.flush()
                p.abort_transaction()
            else:
                p.commit_transaction()
    dt = time.perf_counter() - t0
    objects = count_objects(storage) - before
    calls = coordinator_calls(coord.endpoint) - calls0
    return {"scenario": "aborts" if abort else "transactions", "partitions": partitions,
            "transactions": txns,
            "txn_per_s": round(txns / dt, 2), "objects": objects,
            "objects_per_txn": round(objects / txns, 2),
            "calls_per_txn": round(calls / txns, 2)}


def run_spark(root: str, coord: CoordinatorProc, partitions: int, rows: int
              ) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    topic = f"s{partitions}"
    coord.client().create_topic(topic, partitions)
    spark = (SparkSession.builder.master("local[4]").appName("write-cost")
             .config("spark.ui.enabled", "false").getOrCreate())
    df = spark.range(rows, numPartitions=4).selectExpr(
        "CAST(id AS STRING) AS key", "repeat('x', 100) AS value")
    storage = Storage.for_url(root)
    before, calls0 = count_objects(storage), coordinator_calls(coord.endpoint)
    t0 = time.perf_counter()
    (df.write.format("txnlog").option("topic", topic)
       .option("coordinator", coord.endpoint).mode("append").save(root))
    dt = time.perf_counter() - t0
    objects = count_objects(storage) - before
    calls = coordinator_calls(coord.endpoint) - calls0
    return {"scenario": "spark", "partitions": partitions, "tasks": 4, "rows": rows,
            "seconds": round(dt, 2), "objects": objects, "calls": calls}


def run_spark_stream(root: str, coord: CoordinatorProc, partitions: int, rows: int,
                     batches: int = 4) -> dict[str, Any]:
    """A txnlog -> txnlog stream into ``partitions`` partitions: ``rows`` records (written
    by one batch write into a 4-partition source first) in ``batches`` micro-batches; the
    objects the root gains while it runs (but the source topic's), per micro-batch."""
    from pyspark.sql import SparkSession

    src, out = f"src{partitions}", f"st{partitions}"
    coord.client().create_topic(src, 4)
    coord.client().create_topic(out, partitions)
    spark = (SparkSession.builder.master("local[4]").appName("write-cost")
             .config("spark.ui.enabled", "false").getOrCreate())
    (spark.range(rows, numPartitions=4)
       .selectExpr("CAST(id AS STRING) AS key", "repeat('x', 100) AS value")
       .write.format("txnlog").option("topic", src).option("coordinator", coord.endpoint)
       .mode("append").save(root))
    storage = Storage.for_url(root)
    # the source's own merging (its partitions go idle while the stream reads them) is not
    # the stream's cost
    skip = f"{src}-"
    before, calls0 = count_objects(storage, skip), coordinator_calls(coord.endpoint)
    t0 = time.perf_counter()
    query = (spark.readStream.format("txnlog").option("subscribe", src)
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", -(-rows // batches)).load(root)
             .selectExpr("key", "value").writeStream.format("txnlog").option("topic", out)
             .option("coordinator", coord.endpoint)
             .option("checkpointLocation", tempfile.mkdtemp(prefix="txnlog-wc-ck-"))
             .trigger(availableNow=True).start(root))
    query.awaitTermination()
    dt = time.perf_counter() - t0
    done = [p for p in query.recentProgress if p["numInputRows"] > 0]
    objects = count_objects(storage, skip) - before
    calls = coordinator_calls(coord.endpoint) - calls0
    return {"scenario": "spark-stream", "partitions": partitions, "rows": rows,
            "micro_batches": len(done), "seconds": round(dt, 2), "objects": objects,
            "objects_per_batch": round(objects / max(1, len(done)), 2),
            "calls_per_batch": round(calls / max(1, len(done)), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", default="1,16,64",
                    help="comma-separated partition counts (default 1,16,64)")
    ap.add_argument("--scenarios", default="gateway,producer,transactions",
                    help="comma-separated: gateway, producer, transactions (spark: --spark)")
    ap.add_argument("--rate", type=int, default=5000, help="gateway: records/s offered")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=10.0, help="gateway: offering time")
    ap.add_argument("--records", type=int, default=50_000, help="producer: records")
    ap.add_argument("--flush-records", type=int, default=5_000, help="producer: per flush")
    ap.add_argument("--transactions", type=int, default=20)
    ap.add_argument("--spark", action="store_true", help="also one Spark write per count")
    ap.add_argument("--spark-records", type=int, default=200_000)
    ap.add_argument("--spark-stream", action="store_true",
                    help="also a txnlog -> txnlog stream (4 micro-batches) per count")
    ap.add_argument("--s3", action="store_true", help="a SeaweedFS S3 root, not a folder")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON last")
    args = ap.parse_args()
    counts = [int(x) for x in args.partitions.split(",")]
    scenarios = [s for s in args.scenarios.split(",") if s]
    rows: list[dict[str, Any]] = []
    server = None
    if args.s3:
        from s3_server import S3Server
        server = S3Server.start()
        server.create_bucket("bench")
        os.environ.update(server.env())
    try:
        for n in counts:
            base = (f"s3://bench/w{n}-{time.time_ns()}" if server is not None
                    else Path(tempfile.mkdtemp(prefix="txnlog-wc-")).as_uri())
            with CoordinatorProc(base) as coord:
                if "gateway" in scenarios:
                    rows.append(run_gateway(base, coord, n, args.rate, args.value_bytes,
                                            args.seconds))
                if "producer" in scenarios:
                    rows.append(run_producer(base, coord, n, args.records, args.value_bytes,
                                             args.flush_records))
                if "transactions" in scenarios:
                    rows.append(run_transactions(base, coord, n, args.transactions,
                                                 args.value_bytes))
                if "aborts" in scenarios:
                    rows.append(run_transactions(base, coord, n, args.transactions,
                                                 args.value_bytes, abort=True))
                if args.spark:
                    rows.append(run_spark(base, coord, n, args.spark_records))
                if args.spark_stream:
                    rows.append(run_spark_stream(base, coord, n, args.spark_records))
            for r in rows[-len(scenarios) - int(args.spark) - int(args.spark_stream):]:
                r["backend"] = "s3" if server is not None else "file"
                print("# " + json.dumps(r), flush=True)
    finally:
        if server is not None:
            server.stop()
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} cpus, load {os.getloadavg()}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
