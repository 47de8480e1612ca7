"""The Python consumer: positions, seek, poll, end-of-partition, both isolation levels."""

from __future__ import annotations

import pytest
from partition_builder import BASE_TS, PartitionBuilder
from txnlog.log_format.consumer import Consumer, ConsumerRecord, TopicPartition
from txnlog.log_format.stable import make_snapshot, read_latest_stable, write_stable
from txnlog.log_format.storage import Storage
from txnlog.log_format.topics import UnknownTopicError, create_topic


def build(root: str) -> tuple[PartitionBuilder, PartitionBuilder]:
    st = Storage.for_url(root)
    create_topic(st, "orders", 2)
    p0 = PartitionBuilder(st, "orders", 0)
    p1 = PartitionBuilder(st, "orders", 1)
    p0.data(3, flush=True)               # 0..2
    p0.data(2, pid=5, flush=True)        # 3, 4
    p0.abort(5)                          # 5
    p0.data(1, pid=6, flush=True)        # 6
    p0.commit(6)                         # 7: ends on a marker
    p0.publish()
    p1.data(2, pid=8, flush=True)        # 0, 1
    p1.commit(8)                         # 2
    p1.data(2, pid=9, flush=True)        # 3, 4 hanging
    p1.publish()
    return p0, p1


def test_consume_topic_read_committed(any_root: str) -> None:
    build(any_root)
    with Consumer(any_root, "orders") as c:
        assert c.assignment() == [TopicPartition("orders", 0), TopicPartition("orders", 1)]
        recs = list(c)
        assert [(r.partition, r.offset) for r in recs] == [(0, 0), (0, 1), (0, 2), (0, 6),
                                                          (1, 0), (1, 1)]
        first = recs[0]
        assert isinstance(first, ConsumerRecord)
        assert first.key == b"r-k0" and first.value == b"r-v0"
        assert first.timestamp == BASE_TS + 1 and first.topic == "orders"
        assert c.position(("orders", 0)) == 8 and c.position(("orders", 1)) == 3
        assert c.at_end(("orders", 0)) and c.at_end(("orders", 1))
        assert c.poll() == {}
        assert c.end_offsets() == {TopicPartition("orders", 0): 8,
                                   TopicPartition("orders", 1): 3}


def test_consume_read_uncommitted(file_root: str) -> None:
    build(file_root)
    c = Consumer(file_root, ["orders"], isolation_level="read_uncommitted")
    table = c.read_table()
    assert sorted(zip(table.column("partition").to_pylist(),
                      table.column("offset").to_pylist(), strict=True)) == \
        [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 6), (1, 0), (1, 1), (1, 3), (1, 4)]
    assert c.end_offsets()[TopicPartition("orders", 1)] == 5


def test_poll_in_small_steps_never_stalls(any_root: str) -> None:
    p0, _ = build(any_root)
    c = Consumer(any_root, assignment=[("orders", 0)], max_poll_records=1)
    seen, polls = [], 0
    while not c.at_end(("orders", 0)):
        polls += 1
        assert polls < 20, "poll does not advance past markers"
        for recs in c.poll().values():
            assert len(recs) <= 1
            seen += [r.offset for r in recs]
    assert seen == [r.offset for r in p0.expected()]
    assert c.position(("orders", 0)) == 8


def test_seek_and_assignment_offsets(file_root: str) -> None:
    build(file_root)
    c = Consumer(file_root, assignment={("orders", 0): 2})
    assert c.position(("orders", 0)) == 2
    assert [r.offset for r in c.poll()[TopicPartition("orders", 0)]] == [2, 6]
    c.seek(("orders", 0), 0)
    assert [r.offset for r in c] == [0, 1, 2, 6]
    c.seek_to_beginning()
    assert c.position(("orders", 0)) == 0
    c.seek_to_end()
    assert c.position(("orders", 0)) == 8 and list(c) == []
    assert c.beginning_offsets() == {TopicPartition("orders", 0): 0}
    latest = Consumer(file_root, "orders", auto_offset_reset="latest")
    assert list(latest) == []
    assert latest.offsets_for_times({("orders", 0): BASE_TS + 2}) == \
        {TopicPartition("orders", 0): 1}
    with pytest.raises(ValueError, match="not assigned"):
        c.position(("orders", 1))
    with pytest.raises(ValueError, match="offset"):
        c.seek(("orders", 0), -1)


def test_poll_waits_for_new_data_and_sees_it(file_root: str) -> None:
    p0, _ = build(file_root)
    c = Consumer(file_root, assignment=[("orders", 0)])
    assert len(list(c)) == 4
    assert c.poll(timeout_s=0.1) == {}
    p0.data(2, flush=True)
    p0.publish()
    got = c.poll(timeout_s=5)
    assert [r.offset for r in got[TopicPartition("orders", 0)]] == [8, 9]


def test_one_snapshot_for_all_partitions(file_root: str) -> None:
    """A transaction becomes visible in every partition at once (one stable snapshot)."""
    st = Storage.for_url(file_root)
    create_topic(st, "t", 2)
    a, b = PartitionBuilder(st, "t", 0), PartitionBuilder(st, "t", 1)
    a.data(1, pid=3, flush=True)
    b.data(1, pid=3, flush=True)
    a.commit(3)
    b.commit(3)
    c = Consumer(file_root, "t")
    assert list(c) == []  # no snapshot yet: nothing is stable
    snap = read_latest_stable(st)
    assert snap is None
    write_stable(st, make_snapshot(1, 0, {"t-0": (a.hw, a.lso), "t-1": (b.hw, b.lso)}))
    assert sorted((r.partition, r.offset) for r in c) == [(0, 0), (1, 0)]


def test_bad_arguments(file_root: str) -> None:
    build(file_root)
    with pytest.raises(ValueError, match="either topics or assignment"):
        Consumer(file_root)
    with pytest.raises(UnknownTopicError):
        Consumer(file_root, "missing")
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer(file_root, "orders", auto_offset_reset="smallest")
    with pytest.raises(ValueError, match="isolation level"):
        Consumer(file_root, "orders", isolation_level="read_dirty")  # type: ignore[arg-type]


def test_failed_poll_skips_nothing(file_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll that fails part-way (storage error on one partition) returns nothing, so it
    must move no position either: the next poll delivers every record."""
    import txnlog.log_format.reader as reader_mod

    build(file_root)
    with Consumer(file_root, "orders") as c:
        real_read = reader_mod.PartitionReader.read
        calls = {"n": 0}

        def flaky(self: reader_mod.PartitionReader, start: int, end: int | None = None):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] == 2:  # the second partition of the first poll
                raise OSError("injected storage failure")
            return real_read(self, start, end)

        monkeypatch.setattr(reader_mod.PartitionReader, "read", flaky)
        with pytest.raises(OSError, match="injected"):
            c.poll()
        got = [(tp.partition, r.offset) for tp, rs in c.poll().items() for r in rs]
        assert sorted(got) == [(0, 0), (0, 1), (0, 2), (0, 6), (1, 0), (1, 1)]
