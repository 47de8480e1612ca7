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
import datetime
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


def fetch_raw_gateway(port: int, topic: str, end: int) -> float:
    """Fetch requests (kio-encoded, v12, read_committed) in a loop over one connection,
    batches counted from their headers and never decoded: what the gateway itself costs,
    without a client's per-record work."""
    import io
    import socket
    import struct

    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_reader, entity_writer
    from txnlog.log_format.arrow.arrow_codec import scan_batches

    req_cls = load_request_schema(1, 12)
    resp_cls = load_response_schema(1, 12)
    mod = sys.modules[req_cls.__module__]
    hdr_cls = req_cls.__header_schema__
    sock = socket.create_connection(("127.0.0.1", port))
    t0 = time.perf_counter()
    offset, corr = 0, 0
    try:
        while offset < end:
            corr += 1
            req = req_cls(replica_id=-1, max_wait=datetime.timedelta(milliseconds=100),
                          min_bytes=1, max_bytes=64 << 20, isolation_level=1,
                          session_id=0, session_epoch=-1, cluster_id=None, rack_id="",
                          forgotten_topics_data=(),
                          topics=(mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
                              partition=0, fetch_offset=offset, partition_max_bytes=16 << 20,
                              current_leader_epoch=-1, last_fetched_epoch=-1,
                              log_start_offset=-1),)),))
            buf = io.BytesIO()
            entity_writer(hdr_cls)(buf, hdr_cls(request_api_key=1, request_api_version=12,
                                                correlation_id=corr, client_id="bench"))
            entity_writer(req_cls)(buf, req)
            frame = buf.getvalue()
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", _recv(sock, 4))[0]
            data = _recv(sock, size)
            _, n = entity_reader(resp_cls.__header_schema__)(data, 0)
            resp, _ = entity_reader(resp_cls)(data, n)
            records = resp.responses[0].partitions[0].records or b""
            index = scan_batches(records, verify_crc=False)
            if len(index):
                offset = int(index["base_offset"][-1] + index["last_offset_delta"][-1]) + 1
    finally:
        sock.close()
    return time.perf_counter() - t0


def _recv(sock: object, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))  # type: ignore[attr-defined]
        if not chunk:
            raise ConnectionError("gateway closed the connection")
        out += chunk
    return bytes(out)


def fetch_raw_direct(root: str, topic: str, end: int) -> float:
    """The same stored batches through PartitionReader.read_raw, in-process."""
    t0 = time.perf_counter()
    r = PartitionReader(Storage.for_url(root), topic, 0, verify_crc=False)
    offset = 0
    while offset < end:
        offset = r.read_raw(offset, 16 << 20).next_offset
    return time.perf_counter() - t0


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
        for i in range(records):
            p.send(topic, value, partition=0)
            if i % 10_000 == 9_999:
                # flushes of 10,000: a single 100,000-record flush is published with HW 0
                # (a coordinator bug found here, on main too; see the report)
                p.flush()
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
        end = PartitionReader(Storage.for_url(root), "src", 0).latest_offset()
        for rnd in range(args.rounds):
            order = ("direct", "gateway") if rnd % 2 == 0 else ("gateway", "direct")
            res: dict[str, float] = {}
            for side in order:
                res[f"fetch_{side}_s"] = fetch_gateway(gw.bootstrap, "src", args.records) \
                    if side == "gateway" else fetch_direct(root, "src", args.records)
                res[f"raw_{side}_s"] = fetch_raw_gateway(gw.port or 0, "src", end) \
                    if side == "gateway" else fetch_raw_direct(root, "src", end)
            for side in order:
                topic = f"dst-{side}-{rnd}"
                client.create_topic(topic, 1)
                res[f"produce_{side}_s"] = produce_gateway(gw.bootstrap, topic,
                                                           args.records, value) \
                    if side == "gateway" else produce_direct(root, coord.endpoint or "", topic,
                                                             args.records, value)
            row = {"round": rnd, "load1": os.getloadavg()[0], **res,
                   "fetch_ratio": res["fetch_gateway_s"] / res["fetch_direct_s"],
                   "raw_ratio": res["raw_gateway_s"] / res["raw_direct_s"],
                   "produce_ratio": res["produce_gateway_s"] / res["produce_direct_s"]}
            rows.append(row)
            print(f"round {rnd} load {row['load1']:.1f}: fetch gateway "
                  f"{args.records / res['fetch_gateway_s']:,.0f} rec/s "
                  f"({mb / res['fetch_gateway_s']:.1f} MB/s) vs direct "
                  f"{args.records / res['fetch_direct_s']:,.0f} rec/s; raw batches gateway "
                  f"{mb / res['raw_gateway_s']:.1f} MB/s vs read_raw "
                  f"{mb / res['raw_direct_s']:.1f} MB/s; produce gateway "
                  f"{args.records / res['produce_gateway_s']:,.0f} rec/s vs txnlog "
                  f"{args.records / res['produce_direct_s']:,.0f} rec/s", flush=True)
    fr = statistics.median(r["fetch_ratio"] for r in rows)
    rr = statistics.median(r["raw_ratio"] for r in rows)
    pr = statistics.median(r["produce_ratio"] for r in rows)
    print(f"median time ratio gateway/direct: fetch (librdkafka consumer vs Arrow decode) "
          f"{fr:.2f}x, raw batches (Fetch loop vs read_raw) {rr:.2f}x, produce {pr:.2f}x "
          f"({args.records} records of {args.value_bytes} B, load {os.getloadavg()[0]:.1f})")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
