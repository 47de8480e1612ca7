"""The gateway's flush window: every connection's Produce requests, one object per window.

Real processes (a coordinator and a gateway on a file root) and real clients: three
librdkafka idempotent producers and a kafka-python producer without an id write to 32
partitions at once. What a broker would show must hold (every record once, in order per
key, offsets dense per partition), and the root must show the new cost: no object per
partition, a few shared objects each holding several connections' batches, and reserves
and confirms counted per window, not per producer or partition.
"""

from __future__ import annotations

import threading
import urllib.request
from collections import defaultdict

from confluent_kafka import Producer as CKProducer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from kafka import KafkaProducer
from txnlog.log_format import layout
from txnlog.log_format.codec.batch_header import parse_header
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.segments import shared_object
from txnlog.log_format.storage import Storage

PARTITIONS = 32
PER_PRODUCER = PARTITIONS * 10


def _requests(endpoint: str, op: str) -> float:
    text = urllib.request.urlopen(f"{endpoint}/metrics").read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith("txnlog_coordinator_requests_total{")
               and f'op="{op}"' in line)


def test_every_connections_produce_requests_share_one_object_per_window(file_root: str
                                                                        ) -> None:
    with CoordinatorProc(file_root, extra=["--no-merge"]) as coord, \
            GatewayProc(file_root, extra=["--flush-interval-ms", "500"]) as gateway:
        coord.client().create_topic("fw", PARTITIONS)
        start = threading.Barrier(4)
        sent: dict[str, list[tuple[bytes, bytes]]] = {}
        failures: list[str] = []

        def librdkafka(name: str) -> None:
            p = CKProducer({"bootstrap.servers": gateway.bootstrap,
                            "enable.idempotence": True, "linger.ms": 20,
                            "partitioner": "murmur2_random"})
            mine = [(f"{name}-k{i % PARTITIONS}".encode(), f"{name}-v{i}".encode())
                    for i in range(PER_PRODUCER)]
            start.wait()
            for k, v in mine:
                p.produce("fw", value=v, key=k,
                          on_delivery=lambda err, _m: err and failures.append(str(err)))
            if p.flush(120) != 0:
                failures.append(f"{name}: not all delivered")
            sent[name] = mine

        def kafka_python() -> None:
            p = KafkaProducer(bootstrap_servers=gateway.bootstrap, linger_ms=20,
                              api_version=(2, 8))
            mine = [(f"kp-k{i % PARTITIONS}".encode(), f"kp-v{i}".encode())
                    for i in range(PER_PRODUCER)]
            start.wait()
            futures = [p.send("fw", value=v, key=k) for k, v in mine]
            for f in futures:
                f.get(timeout=120)
            p.close()
            sent["kp"] = mine

        threads = [threading.Thread(target=librdkafka, args=(f"ck{i}",)) for i in range(3)]
        threads.append(threading.Thread(target=kafka_python))
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert failures == [] and len(sent) == 4

        # what a broker shows: every record once, in order per key, dense offsets
        got: dict[int, list[tuple[int, bytes, bytes]]] = defaultdict(list)
        with Consumer(file_root, "fw") as c:
            for r in c:
                got[r.partition].append((r.offset, r.key, r.value))
        flat = sorted((k, v) for part in got.values() for _, k, v in part)
        assert flat == sorted(kv for mine in sent.values() for kv in mine)
        for part in got.values():
            assert [o for o, _, _ in part] == list(range(len(part)))
            per_key: dict[bytes, list[bytes]] = defaultdict(list)
            for _, k, v in part:
                per_key[k].append(v)
            for k, vs in per_key.items():
                name = k.decode().rsplit("-k", 1)[0]
                assert vs == [v for kk, v in sent[name] if kk == k]

        # the cost: no object per partition; a few shared objects, several producers each
        storage = Storage.for_url(file_root)
        for p in range(PARTITIONS):
            assert storage.list(layout.partition_dir("fw", p)) == []
        wal = [o.name for o in storage.list(layout.SHARED_DIR)]
        assert 1 <= len(wal) < PARTITIONS, wal  # per partition, the old way: >= 4 x 32
        most = 0
        for name in wal:
            data = storage.get(f"{layout.SHARED_DIR}/{name}")
            footer = shared_object.read_footer(data)
            pids = {parse_header(data, e.position).producer_id for e in footer.entries}
            most = max(most, len(pids))
        assert most >= 2  # one window took batches of several connections
        reserves = _requests(coord.endpoint, "reserve_many")
        assert reserves == len(wal)  # one reserve per window (one object each)
        assert _requests(coord.endpoint, "reserve") == 0
        assert _requests(coord.endpoint, "confirm_many") == len(wal)
