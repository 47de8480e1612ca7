"""Kafka producers and consumer groups through ``txnlog gateway``.

Real processes: a coordinator and a gateway over a file root. librdkafka's idempotent
producer and kafka-python's plain producer write through the gateway; txnlog's own reader
must then see exactly what they sent (each value once, in order per key). Two kafka-python
consumers of one group rebalance the partitions between them, and the offsets they commit
are the group offsets txnlog (and Spark's ``groupId``) reads.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer as CKProducer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc, coordinator_and_gateway
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.layout import TopicPartition

PARTITIONS = 4


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, CoordinatorProc,
                                                                   GatewayProc]]:
    root = "file://" + str(tmp_path_factory.mktemp("gw-produce"))
    with coordinator_and_gateway(root) as (coord, gateway):
        gateway.wait_listening()
        yield root, coord, gateway


def _read_all(root: str, topic: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    with Consumer(root, topic) as c:
        for r in c:
            out[r.partition].append((r.key, r.value))
    return out


def test_librdkafka_idempotent_producer_is_read_by_txnlog(gw: tuple[str, CoordinatorProc,
                                                                  GatewayProc]) -> None:
    root, coord, gateway = gw
    coord.client().create_topic("ck-in", PARTITIONS)
    p = CKProducer({"bootstrap.servers": gateway.bootstrap, "enable.idempotence": True,
                    "linger.ms": 5, "compression.type": "lz4",
                    "partitioner": "murmur2_random"})  # the Java client's (and txnlog's)
    failures: list[str] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(500)]
    for k, v in sent:
        p.produce("ck-in", value=v, key=k, on_delivery=report)
        p.poll(0)
    assert p.flush(120) == 0
    assert failures == []
    got = _read_all(root, "ck-in")
    flat = [kv for part in got.values() for kv in part]
    assert sorted(flat) == sorted(sent)  # each record exactly once
    for part in got.values():  # in order per key, as sent
        per_key: dict[bytes | None, list[bytes | None]] = defaultdict(list)
        for k, v in part:
            per_key[k].append(v)
        for k, vs in per_key.items():
            assert vs == [v for kk, v in sent if kk == k]
    # murmur2 of the key picked the partition, as in the Java client and txnlog
    from txnlog.log_format.codec.partitioner import partition_for_key
    for partition, part in got.items():
        assert all(partition_for_key(k, PARTITIONS) == partition for k, _ in part)


def test_plain_producer_without_producer_id(gw: tuple[str, CoordinatorProc,
                                                      GatewayProc]) -> None:
    root, coord, gateway = gw
    coord.client().create_topic("kp-in", 2)
    kp = KafkaProducer(bootstrap_servers=gateway.bootstrap, enable_idempotence=False,
                       acks="all", linger_ms=2)
    try:
        futures = [kp.send("kp-in", value=f"m{i}".encode(), partition=i % 2)
                   for i in range(200)]
        kp.flush(60)
        metas = [f.get(60) for f in futures]
    finally:
        kp.close()
    got = _read_all(root, "kp-in")
    assert sorted(v for part in got.values() for _, v in part) == \
        sorted(f"m{i}".encode() for i in range(200))
    # the offsets the producer was told are where the records are
    with Consumer(root, "kp-in") as c:
        where = {(r.partition, r.offset): r.value for r in c}
    for i, m in enumerate(metas):
        assert where[(m.partition, m.offset)] == f"m{i}".encode()


def _poll_values(c: KafkaConsumer, seconds: float) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            out += [r.value for r in recs]
    return out


def test_two_members_rebalance_and_commit_group_offsets(
        gw: tuple[str, CoordinatorProc, GatewayProc]) -> None:
    root, coord, gateway = gw
    client = coord.client()
    client.create_topic("grp-in", PARTITIONS)
    kp = KafkaProducer(bootstrap_servers=gateway.bootstrap, acks="all")
    for i in range(80):
        kp.send("grp-in", value=f"a{i}".encode(), partition=i % PARTITIONS)
    kp.flush(60)

    def member() -> KafkaConsumer:
        c = KafkaConsumer(bootstrap_servers=gateway.bootstrap, group_id="g1",
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          session_timeout_ms=6000, heartbeat_interval_ms=500,
                          max_poll_interval_ms=30000, isolation_level="read_committed")
        c.subscribe(["grp-in"])
        return c

    a = member()
    first = _poll_values(a, 8)
    assert sorted(first) == sorted(f"a{i}".encode() for i in range(80))
    assert a.assignment() == {KTP("grp-in", p) for p in range(PARTITIONS)}
    a.commit()
    b = member()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # both poll until the rebalance hands out halves
        a.poll(timeout_ms=200)
        b.poll(timeout_ms=200)
        if a.assignment() and b.assignment() and \
                len(a.assignment()) + len(b.assignment()) == PARTITIONS:
            break
    sa, sb = a.assignment(), b.assignment()
    assert sa and sb and not (sa & sb) and len(sa | sb) == PARTITIONS
    for i in range(80, 120):
        kp.send("grp-in", value=f"a{i}".encode(), partition=i % PARTITIONS)
    kp.flush(60)
    kp.close()
    got_a, got_b = [], []
    deadline = time.monotonic() + 30
    while len(got_a) + len(got_b) < 40 and time.monotonic() < deadline:
        for recs in a.poll(timeout_ms=200).values():
            got_a += [r.value for r in recs]
        for recs in b.poll(timeout_ms=200).values():
            got_b += [r.value for r in recs]
    assert sorted(got_a + got_b) == sorted(f"a{i}".encode() for i in range(80, 120))
    assert got_a and got_b  # each member read its own partitions
    a.commit()
    b.commit()
    committed = client.committed_offsets("g1")
    with Consumer(root, "grp-in") as c:
        ends = c.end_offsets()
    assert committed == {TopicPartition("grp-in", p): ends[TopicPartition("grp-in", p)]
                         for p in range(PARTITIONS)}
    b.close()  # LeaveGroup: a gets every partition back
    deadline = time.monotonic() + 30
    while len(a.assignment()) < PARTITIONS and time.monotonic() < deadline:
        a.poll(timeout_ms=200)
    assert a.assignment() == {KTP("grp-in", p) for p in range(PARTITIONS)}
    a.close()
    # a new member of the group starts from the committed offsets: nothing re-read
    c = member()
    assert _poll_values(c, 5) == []
    c.close()
