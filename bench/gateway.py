"""What the Kafka-protocol gateway costs, against the direct paths, in one run.

Fetch: the same partition bytes read (a) by librdkafka through ``txnlog gateway`` and (b)
by txnlog's own ``PartitionReader`` straight from storage, rounds interleaved (b a a b ...).
Produce: the same records written (a) by librdkafka's idempotent producer through the
gateway and (b) by txnlog's ``IdempotentProducer``. Prints MB/s and records/s per round,
the medians, and the median of the per-round ratios (gateway / direct), with the load.

    python bench/gateway.py --records 200000 --value-bytes 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTP
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from txnlog import IdempotentProducer
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage


def fetch_gateway(bootstrap: str, topic: str, records: int) -> float:
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                    "enable.auto.commit": False, "isolation.level": "read_committed",
                    "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20})
    c.assign([CKTP(topic, 0, 0)])
    t0 = time.perf_counter()
    n = 0
    while n < records:
        for m in c.consume(10_000, 5.0):
            if m.error() is None:
                n += 1
    dt = time.perf_counter() - t0
    c.close()
    return dt


def fetch_direct(root: str, topic: str, records: int) -> float:
    t0 = time.perf_counter()
    r = PartitionReader(Storage.for_url(root), topic, 0)
    n = sum(c.batch.num_rows for c in r.read(0))
    assert n == records, n
    return time.perf_counter() - t0


def produce_gateway(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    p = CKProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                    "linger.ms": 20, "batch.size": 1 << 20})
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(300) == 0
    return time.perf_counter() - t0


def produce_direct(root: str, endpoint: str, topic: str, records: int, value: bytes) -> float:
    t0 = time.perf_counter()
    with IdempotentProducer(root, coordinator=endpoint) as p:
        for _ in range(records):
            p.send(topic, value, partition=0)
        p.flush()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = "file://" + tempfile.mkdtemp(prefix="bench-gw-")
    value = os.urandom(args.value_bytes)
    mb = args.records * args.value_bytes / 1e6
    rows = []
    with CoordinatorProc(root) as coord, GatewayProc(root) as gw:
        client = coord.client()
        client.create_topic("src", 1)
        produce_direct(root, coord.endpoint or "", "src", args.records, value)
        fetch_gateway(gw.bootstrap, "src", args.records)  # warm both paths once
        fetch_direct(root, "src", args.records)
        for rnd in range(args.rounds):
            order = ("direct", "gateway") if rnd % 2 == 0 else ("gateway", "direct")
            res: dict[str, float] = {}
            for side in order:
                res[f"fetch_{side}_s"] = fetch_gateway(gw.bootstrap, "src", args.records) \
                    if side == "gateway" else fetch_direct(root, "src", args.records)
            for side in order:
                topic = f"dst-{side}-{rnd}"
                client.create_topic(topic, 1)
                res[f"produce_{side}_s"] = produce_gateway(gw.bootstrap, topic,
                                                           args.records, value) \
                    if side == "gateway" else produce_direct(root, coord.endpoint or "", topic,
                                                             args.records, value)
            row = {"round": rnd, "load1": os.getloadavg()[0], **res,
                   "fetch_ratio": res["fetch_gateway_s"] / res["fetch_direct_s"],
                   "produce_ratio": res["produce_gateway_s"] / res["produce_direct_s"]}
            rows.append(row)
            print(f"round {rnd} load {row['load1']:.1f}: fetch gateway "
                  f"{args.records / res['fetch_gateway_s']:,.0f} rec/s "
                  f"({mb / res['fetch_gateway_s']:.1f} MB/s) vs direct "
                  f"{args.records / res['fetch_direct_s']:,.0f} rec/s; produce gateway "
                  f"{args.records / res['produce_gateway_s']:,.0f} rec/s vs txnlog "
                  f"{args.records / res['produce_direct_s']:,.0f} rec/s", flush=True)
    fr = statistics.median(r["fetch_ratio"] for r in rows)
    pr = statistics.median(r["produce_ratio"] for r in rows)
    print(f"median time ratio gateway/direct: fetch {fr:.2f}x, produce {pr:.2f}x "
          f"({args.records} records of {args.value_bytes} B, load {os.getloadavg()[0]:.1f})")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
