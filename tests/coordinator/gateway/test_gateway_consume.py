"""Kafka's own clients read a txnlog root through ``txnlog gateway``.

Independent clients, real processes: a coordinator (``coordinator_proc``), a gateway
(``gateway_proc``), data written by txnlog's transactional producer (committed and aborted
transactions, markers), then librdkafka (confluent-kafka) and kafka-python consume it with
read_committed and read_uncommitted. Each expectation is computed from what was written,
not from the gateway, and checked against txnlog's own reader too.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTP
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc, coordinator_and_gateway
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP
from txnlog import TransactionalProducer
from txnlog.log_format.consumer import Consumer

TOPIC = "events"
PARTITIONS = 3


class Root:
    def __init__(self, root: str, coord: CoordinatorProc, gateway: GatewayProc,
                 committed: set[str], aborted: set[str]) -> None:
        self.root, self.coord, self.gateway = root, coord, gateway
        self.committed, self.aborted = committed, aborted


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Root]:
    root = "file://" + str(tmp_path_factory.mktemp("gw-root"))
    with coordinator_and_gateway(root) as (coord, gw):
        coord.client().create_topic(TOPIC, PARTITIONS)
        committed: set[str] = set()
        aborted: set[str] = set()
        with TransactionalProducer(root, "gw-writer", coordinator=coord.endpoint) as p:
            p.init_transactions()
            for i in range(6):
                p.begin_transaction()
                vals = [f"t{i}-r{j}" for j in range(7)]
                for j, v in enumerate(vals):
                    p.send(TOPIC, v.encode(), key=f"k{j}".encode())
                p.flush()  # written before the outcome: aborted batches are in the log
                if i in (1, 4):
                    p.abort_transaction()
                    aborted |= set(vals)
                else:
                    p.commit_transaction()
                    committed |= set(vals)
        gw.wait_listening()
        yield Root(root, coord, gw, committed, aborted)


def _kafka_python_values(bootstrap: str, isolation: str, **kw: object) -> list[str]:
    kc = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                       auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=8000, **kw)
    try:
        kc.assign([KTP(TOPIC, p) for p in range(PARTITIONS)])
        return [m.value.decode() for m in kc]
    finally:
        kc.close()


def _confluent_values(bootstrap: str, isolation: str, want: int) -> list[str]:
    cc = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{isolation}",
                     "isolation.level": isolation, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
    try:
        cc.assign([CKTP(TOPIC, p, 0) for p in range(PARTITIONS)])
        out: list[str] = []
        deadline = time.monotonic() + 60
        idle_since = None
        while time.monotonic() < deadline:
            m = cc.poll(0.5)
            if m is None:
                if len(out) >= want:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 2:
                        break
                continue
            assert m.error() is None, m.error()
            out.append(m.value().decode())
        return out
    finally:
        cc.close()


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_kafka_python_reads_what_txnlog_wrote(served: Root, isolation: str) -> None:
    got = _kafka_python_values(served.gateway.bootstrap, isolation)
    want = served.committed if isolation == "read_committed" \
        else served.committed | served.aborted
    assert len(got) == len(set(got)) == len(want)
    assert set(got) == want
    # and exactly what txnlog's own reader gives for the same isolation level
    with Consumer(served.root, TOPIC, isolation_level=isolation) as own:  # type: ignore[arg-type]
        assert sorted(r.value.decode() for r in own) == sorted(got)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_librdkafka_reads_what_txnlog_wrote(served: Root, isolation: str) -> None:
    want = served.committed if isolation == "read_committed" \
        else served.committed | served.aborted
    got = _confluent_values(served.gateway.bootstrap, isolation, len(want))
    assert len(got) == len(set(got)) == len(want)
    assert set(got) == want


def test_one_batch_per_fetch_still_reads_everything(served: Root) -> None:
    """max_partition_fetch_bytes=1 and fetch_max_bytes=1: each fetch answers one whole
    batch (KIP-74), markers and aborted batches included, and the consumer moves on."""
    got = _kafka_python_values(served.gateway.bootstrap, "read_committed",
                               max_partition_fetch_bytes=1, fetch_max_bytes=1)
    assert sorted(got) == sorted(served.committed)


def test_list_offsets_match_txnlog(served: Root) -> None:
    from txnlog.coordinator.client.admin_client import AdminClient

    admin = AdminClient(served.root)
    cc = CKConsumer({"bootstrap.servers": served.gateway.bootstrap, "group.id": "lo",
                     "isolation.level": "read_committed"})
    try:
        for p in range(PARTITIONS):
            low, high = cc.get_watermark_offsets(CKTP(TOPIC, p), timeout=30, cached=False)
            want = admin.list_offsets({(TOPIC, p): "earliest"})
            assert low == next(iter(want.values()))["offset"]
            latest = admin.list_offsets({(TOPIC, p): "latest"}, "read_uncommitted")
            assert high == next(iter(latest.values()))["offset"]
        # by timestamp: 0 is the first offset, the far future is "none" (-1 / end)
        found = cc.offsets_for_times([CKTP(TOPIC, p, 0) for p in range(PARTITIONS)], 30)
        assert all(tp.offset == 0 and tp.error is None for tp in found)
        later = cc.offsets_for_times([CKTP(TOPIC, 0, 2**62)], 30)
        assert later[0].offset == -1
    finally:
        cc.close()
    kc = KafkaConsumer(bootstrap_servers=served.gateway.bootstrap,
                       isolation_level="read_committed")
    try:
        tps = [KTP(TOPIC, p) for p in range(PARTITIONS)]
        ends = kc.end_offsets(tps)
        for tp in tps:
            want = admin.list_offsets({(TOPIC, tp.partition): "latest"}, "read_committed")
            assert ends[tp] == next(iter(want.values()))["offset"]
        assert set(kc.topics()) >= {TOPIC}
        assert kc.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
    finally:
        kc.close()


def test_long_poll_answers_when_data_arrives(served: Root) -> None:
    """A Fetch at the end of every partition (max_wait 60 s, min_bytes 1) waits in the
    gateway and answers with a commit made while it waits. One request, one answer: a
    gateway whose Fetch never waits answers it empty (re-polling clients would hide that)."""
    import datetime
    import io

    from kafka.record.memory_records import MemoryRecords
    from kio.index import load_response_schema
    from kio.schema.fetch.v4 import request as fr
    from kio.serial import entity_reader, entity_writer

    port = served.gateway.port
    assert port is not None
    ends = {o["partition"]: o["lso"]
            for o in served.coord.client().describe_topic(TOPIC)["offsets"]}
    assert len(ends) == PARTITIONS
    request = fr.FetchRequest(
        max_wait=datetime.timedelta(seconds=60), min_bytes=1, isolation_level=1,
        topics=(fr.FetchTopic(topic=TOPIC, partitions=tuple(
            fr.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in sorted(ends.items()))),))
    buf = io.BytesIO()
    header_cls = fr.FetchRequest.__header_schema__
    entity_writer(header_cls)(buf, header_cls(request_api_key=1, request_api_version=4,
                                              correlation_id=9, client_id="long-poll"))
    entity_writer(fr.FetchRequest)(buf, request)

    def write() -> None:  # once the Fetch is in (it waits up to 60 s)
        time.sleep(1.0)
        with TransactionalProducer(served.root, "gw-late",
                                   coordinator=served.coord.endpoint) as p:
            p.init_transactions()
            p.begin_transaction()
            p.send(TOPIC, b"late", key=b"x")
            p.commit_transaction()

    t = threading.Thread(target=write)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(struct.pack(">i", buf.getbuffer().nbytes) + buf.getvalue())
        t.start()
        size = struct.unpack(">i", _recv_exactly(s, 4))[0]
        frame = _recv_exactly(s, size)
    t.join()
    served.committed.add("late")
    resp_cls = load_response_schema(1, 4)
    _header, n = entity_reader(resp_cls.__header_schema__)(frame, 0)
    resp = entity_reader(resp_cls)(frame, n)[0]
    got = []
    for topic in resp.responses:
        for part in topic.partitions:
            assert part.error_code.value == 0, part
            records = MemoryRecords(bytes(part.records or b""))
            while (batch := records.next_batch()) is not None:
                got += [r.value for r in batch if not batch.is_control_batch]
    assert got == [b"late"]


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "the gateway closed the connection"
        out += chunk
    return out


def test_unknown_topic_and_out_of_range(served: Root) -> None:
    kc = KafkaConsumer(bootstrap_servers=served.gateway.bootstrap)
    try:
        assert kc.partitions_for_topic("no-such-topic") in (None, set())
    finally:
        kc.close()
    cc = CKConsumer({"bootstrap.servers": served.gateway.bootstrap, "group.id": "oor",
                     "auto.offset.reset": "error", "enable.auto.commit": False})
    try:
        cc.assign([CKTP(TOPIC, 0, 10**9)])
        deadline = time.monotonic() + 30
        err = None
        while err is None and time.monotonic() < deadline:
            m = cc.poll(0.5)
            if m is not None and m.error() is not None:
                err = m.error()
        assert err is not None and "out of range" in str(err).lower()
    finally:
        cc.close()


# ----------------------------------------------------------------- raw frames
def _frame(api_key: int, version: int, correlation: int, body: bytes = b"",
           client_id: bytes = b"t") -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id
    if version >= 3 and api_key == 18:
        head += b"\0"  # request header v2 tagged fields
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


def _exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    break
                chunks.append(c)
        except TimeoutError:
            pytest.fail("the gateway neither answered nor closed the connection")
        return b"".join(chunks)


def _api_versions_ok(port: int) -> bool:
    answer = _exchange(port, _frame(18, 0, 77))
    return len(answer) > 10 and struct.unpack(">ii", answer[:8])[1] == 77


def test_api_versions_unsupported_version_is_answered(served: Root) -> None:
    port = served.gateway.port
    assert port is not None
    answer = _exchange(port, _frame(18, 99, 5))
    size, corr, code = struct.unpack(">iih", answer[:10])
    assert (corr, code) == (5, 35)  # UNSUPPORTED_VERSION, with the versions we serve
    assert size == len(answer) - 4


@pytest.mark.parametrize("data", [
    b"\x00\x00\x00\x04abcd",                       # shorter than a header
    b"\xff\xff\xff\xff",                           # negative size
    b"\x7f\xff\xff\xff",                           # 2 GB announced
    _frame(9999, 0, 1),                            # unknown API key
    _frame(1, 999, 1),                             # Fetch version nobody has
    _frame(3, 9, 1, b"\x05\xff\xff"),               # Metadata body that does not parse
    _frame(1, 4, 1, b"\x00" * 3),                  # truncated Fetch
])
def test_bad_frames_close_the_connection_and_nothing_else(served: Root, data: bytes) -> None:
    """Closed as refused input (the gateway says why), not by a handler that crashed on it:
    a crash closes the connection too, and logs its traceback."""
    port = served.gateway.port
    assert port is not None
    before = len(served.gateway.log_text())
    assert _exchange(port, data) == b""
    assert served.gateway.alive() and _api_versions_ok(port)
    said = served.gateway.log_text()[before:]
    assert "; closing" in said, said
    assert "Traceback" not in said and "failed; closing" not in said, said


def test_fuzzed_frames_never_crash_or_wedge(served: Root) -> None:
    """Random sizes, API keys, versions and bodies: every connection is answered or closed
    within the timeout, and the gateway keeps answering afterwards."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    port = served.gateway.port
    assert port is not None
    keys = st.sampled_from([0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 17, 18, 22, 24, 25, 26,
                            28, 36, 7, 500, -1])

    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(key=keys, version=st.integers(-1, 20), body=st.binary(max_size=300),
           lie=st.integers(-5, 5))
    def one(key: int, version: int, body: bytes, lie: int) -> None:
        frame = _frame(key, version, 1, body)
        size = struct.unpack(">i", frame[:4])[0] + lie
        _exchange(port, struct.pack(">i", size) + frame[4:], timeout=30)

    one()
    assert served.gateway.alive() and _api_versions_ok(port)
    assert "Traceback" not in served.gateway.log_text()
