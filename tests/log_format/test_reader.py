"""PartitionReader against the model in partition_builder, on local files and on S3.

Offsets are not dense: each named test below is one way they are not (the cases SPARK-25005
and FLINK-34470 got wrong), checked under both isolation levels and from several start/end
offsets, always to the exact records and the exact next offset.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from partition_builder import BASE_TS, PartitionBuilder
from txnlog.log_format.arrow.arrow_codec import read_schema
from txnlog.log_format.codec.indexes import build_indexes, encode_offset_index, encode_time_index
from txnlog.log_format.errors import CorruptBatchError
from txnlog.log_format.layout import segment_path
from txnlog.log_format.reader import PartitionReader, complete_prefix
from txnlog.log_format.storage import Storage

LEVELS = ("read_committed", "read_uncommitted")


def rows(table: pa.Table | pa.RecordBatch) -> list[tuple[int, bytes, bytes, int]]:
    ts = table.column("timestamp").cast(pa.int64()).to_pylist()
    return list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist(), ts, strict=True))


def read_all(reader: PartitionReader, start: int = 0,
             end: int | None = None) -> tuple[list[tuple[int, bytes, bytes, int]], int | None]:
    chunks = list(reader.read(start, end))
    for c in chunks:
        assert c.batch.schema == read_schema(False)
        assert c.batch.num_rows > 0
        assert set(c.batch.column("topic").to_pylist()) == {reader.topic}
        assert set(c.batch.column("partition").to_pylist()) == {reader.partition}
    offsets_next = [c.next_offset for c in chunks]
    assert offsets_next == sorted(offsets_next)
    got = [r for c in chunks for r in rows(c.batch)]
    return got, (chunks[-1].next_offset if chunks else None)


def check(b: PartitionBuilder, level: str, start: int = 0, end: int | None = None,
          **reader_kw: int) -> list[int]:
    """Reader output == model, and the range is fully consumed; returns the offsets."""
    reader = PartitionReader(b.storage, b.topic, b.partition, isolation_level=level,  # type: ignore[arg-type]
                             **reader_kw)
    got, nxt = read_all(reader, start, end)
    want = [(r.offset, r.key, r.value, r.timestamp_ms * 1000)
            for r in b.expected(level, start, end)]
    assert got == want, f"{level} [{start}, {end})"
    bound = b.lso if level == "read_committed" else b.hw
    capped = bound if end is None else min(end, bound)
    if got:
        assert nxt == capped
    assert reader.bounded_end(end) == capped
    return [g[0] for g in got]


def poll_loop(b: PartitionBuilder, level: str, step: int, **reader_kw: int) -> list[int]:
    """A consumer's loop: read [pos, pos+step) and continue at the capped end; must end."""
    reader = PartitionReader(b.storage, b.topic, b.partition, isolation_level=level,  # type: ignore[arg-type]
                             **reader_kw)
    pos, out, rounds = 0, [], 0
    latest = reader.latest_offset()
    while pos < latest:
        rounds += 1
        assert rounds <= latest + 1, "the consumer loop does not advance"
        end = reader.bounded_end(pos + step)
        got, _ = read_all(reader, pos, end)
        out += [g[0] for g in got]
        pos = end
    assert out == [r.offset for r in b.expected(level)]
    return out


@pytest.fixture
def builder(any_root: str) -> PartitionBuilder:
    return PartitionBuilder(Storage.for_url(any_root), "orders", 0)


# ------------------------------------------------------------------------ named cases


def test_batch_with_no_data_records(builder: PartitionBuilder) -> None:
    b = builder
    b.data(2)
    empty = b.raw_batch([], last_offset_delta=3)[:0]  # offsets 2..5, all compacted away
    assert empty == []
    b.data(2, flush=True)
    b.publish()
    for level in LEVELS:
        assert check(b, level) == [0, 1, 6, 7]
        assert check(b, level, 2, 6) == []  # only the empty batch: nothing, no hang
        assert check(b, level, 3) == [6, 7]
        assert check(b, level, 0, 4) == [0, 1]
        poll_loop(b, level, 1)


def test_range_starts_or_ends_on_a_control_record(builder: PartitionBuilder) -> None:
    b = builder
    b.data(2, pid=5, flush=True)      # 0, 1
    m = b.commit(5)                   # 2: COMMIT
    b.data(2, pid=6, flush=True)      # 3, 4
    a = b.abort(6)                    # 5: ABORT
    b.data(2, flush=True)             # 6, 7
    b.publish()
    assert (m, a) == (2, 5)
    assert check(b, "read_committed", m) == [6, 7]          # starts on a COMMIT
    assert check(b, "read_committed", a) == [6, 7]          # starts on an ABORT
    assert check(b, "read_committed", 0, m + 1) == [0, 1]   # ends on a COMMIT
    assert check(b, "read_committed", 0, a + 1) == [0, 1]   # ends on an ABORT
    assert check(b, "read_committed", m, a + 1) == []
    assert check(b, "read_uncommitted", m, a + 1) == [3, 4]
    assert check(b, "read_uncommitted", a) == [6, 7]
    for level in LEVELS:
        poll_loop(b, level, 1)
        poll_loop(b, level, 3)


def test_gap_in_the_middle_of_a_batch(builder: PartitionBuilder) -> None:
    b = builder
    b.data(1)                                          # 0
    assert b.raw_batch([0, 1, 4, 5, 9]) == [1, 2, 5, 6, 10]  # one batch, 1..10
    b.data(1, flush=True)                              # 11
    b.publish()
    for level in LEVELS:
        assert check(b, level) == [0, 1, 2, 5, 6, 10, 11]
        assert check(b, level, 3) == [5, 6, 10, 11]    # starts in the gap
        assert check(b, level, 3, 5) == []             # entirely inside the gap
        assert check(b, level, 0, 4) == [0, 1, 2]      # ends in the gap
        assert check(b, level, 7, 11) == [10]
        poll_loop(b, level, 2)


def test_aborted_transaction_spanning_several_segment_objects(builder: PartitionBuilder) -> None:
    b = builder
    b.data(2, pid=7, flush=True)           # 0, 1 (aborted later)
    b.data(2, flush=True)                  # 2, 3 plain
    b.data(2, pid=8)                       # 4, 5 committed later
    b.data(2, pid=7, flush=True)           # 6, 7 aborted, same object as pid 8's
    b.data(3, pid=7, flush=True)           # 8..10 aborted
    b.markers([(7, False), (8, True)])     # 11 ABORT 7, 12 COMMIT 8
    b.data(2, pid=7, epoch=1, flush=True)  # 13, 14: a new transaction of pid 7
    b.commit(7)                            # 15
    b.publish()
    assert check(b, "read_committed") == [2, 3, 4, 5, 13, 14]
    assert check(b, "read_uncommitted") == [*list(range(11)), 13, 14]
    assert check(b, "read_committed", 7) == [13, 14]    # start inside the aborted span
    assert check(b, "read_committed", 0, 3) == [2]      # end before the ABORT marker
    assert check(b, "read_committed", 5, 12) == [5]
    for level in LEVELS:
        poll_loop(b, level, 1)
        poll_loop(b, level, 4)


def test_marker_at_the_very_end_of_the_range(builder: PartitionBuilder) -> None:
    b = builder
    b.data(3, pid=1, flush=True)          # 0..2
    b.data(1, pid=2, flush=True)          # 3
    b.markers([(1, True), (2, False)])    # 4, 5: the log ends on markers
    b.publish()
    assert b.lso == b.hw == 6
    for level in LEVELS:
        reader = PartitionReader(b.storage, b.topic, 0, isolation_level=level)  # type: ignore[arg-type]
        got, nxt = read_all(reader, 0)
        assert nxt == 6, "the trailing markers must be consumed, not re-read"
        assert [g[0] for g in got] == ([0, 1, 2] if level == "read_committed" else [0, 1, 2, 3])
        assert list(reader.read(4)) == [] and list(reader.read(6)) == []
        poll_loop(b, level, 1)
        poll_loop(b, level, 100)


def test_hanging_transaction(builder: PartitionBuilder) -> None:
    b = builder
    b.data(2, flush=True)                 # 0, 1
    b.data(2, pid=9, flush=True)          # 2, 3: never ends
    b.data(2, pid=4, flush=True)          # 4, 5
    b.commit(4)                           # 6
    b.data(2, flush=True)                 # 7, 8
    b.publish()
    assert (b.lso, b.hw) == (2, 9)
    assert check(b, "read_committed") == [0, 1]       # stops at the LSO, no waiting
    assert check(b, "read_committed", 2) == []
    assert check(b, "read_uncommitted") == [*list(range(6)), 7, 8]
    reader = PartitionReader(b.storage, b.topic, 0)
    assert reader.latest_offset() == 2
    assert PartitionReader(b.storage, b.topic, 0,
                           isolation_level="read_uncommitted").latest_offset() == 9
    # the hanging transaction is aborted at last: the LSO moves on, its records stay hidden
    b.abort(9)
    b.publish()
    assert reader.latest_offset() == 2    # the reader keeps its snapshot until refreshed
    reader.refresh()
    assert reader.latest_offset() == 10
    assert check(b, "read_committed") == [0, 1, 4, 5, 7, 8]


def test_zero_byte_fence_segments(builder: PartitionBuilder) -> None:
    b = builder
    b.data(2, flush=True)                 # 0, 1
    b.fence(3)                            # 2..4: a fenced reservation
    b.data(2, pid=3, flush=True)          # 5, 6
    b.fence(2)                            # 7, 8
    b.commit(3)                           # 9
    b.fence(1)                            # 10: the log ends on a fence
    b.publish()
    assert b.storage.size(segment_path("orders", 0, 2)) == 0
    for level in LEVELS:
        assert check(b, level) == [0, 1, 5, 6]
        assert check(b, level, 2, 5) == []
        assert check(b, level, 3) == [5, 6]
        assert check(b, level, 7) == []
        poll_loop(b, level, 1)


# ------------------------------------------------------------------------ other behaviour


def test_empty_partition_and_no_snapshot(any_root: str) -> None:
    st = Storage.for_url(any_root)
    reader = PartitionReader(st, "nothing", 0)
    assert reader.snapshot is None
    assert (reader.earliest_offset(), reader.latest_offset()) == (0, 0)
    assert list(reader.read(0)) == []
    assert reader.read_table().num_rows == 0
    assert reader.offset_for_timestamp(0) is None


def test_earliest_latest_and_refresh(builder: PartitionBuilder) -> None:
    b = builder
    b.data(3, flush=True)
    b.publish()
    reader = PartitionReader(b.storage, "orders", 0)
    assert (reader.earliest_offset(), reader.latest_offset()) == (0, 3)
    b.data(2, flush=True)
    b.publish()
    assert reader.latest_offset() == 3
    reader.refresh()
    assert reader.latest_offset() == 5
    assert [r[0] for r in read_all(reader, 0)[0]] == [0, 1, 2, 3, 4]  # re-listed


def test_abort_marker_beyond_the_end_still_filters(builder: PartitionBuilder) -> None:
    """The aborted range reaches past `end`: the .txnindex after it must still be found."""
    b = builder
    b.data(3, pid=7, flush=True)          # 0..2
    b.data(3, flush=True)                 # 3..5
    b.abort(7)                            # 6
    b.publish()
    assert check(b, "read_committed", 0, 3) == []
    assert check(b, "read_committed", 1, 5) == [3, 4]


def test_large_objects_read_in_byte_ranges(any_root: str) -> None:
    st = Storage.for_url(any_root)
    b = PartitionBuilder(st, "big", 0)
    b.data(400, pid=3, max_batch_bytes=2048, value_size=40)
    b.data(50, pid=4, max_batch_bytes=2048)
    b.data(1, value_size=5000)             # one batch larger than a chunk
    b.data(300, pid=4, max_batch_bytes=4096, value_size=10)
    b.markers([(3, False), (4, True)])
    b.data(100, max_batch_bytes=1500, flush=True)
    b.publish()
    assert st.size(segment_path("big", 0, 0)) > 10 * 1024
    for level in LEVELS:
        whole = check(b, level)
        assert whole
        assert check(b, level, chunk_bytes=1024, prefetch=3) == whole
        assert check(b, level, 137, 700, chunk_bytes=1024) == [o for o in whole
                                                                 if 137 <= o < 700]
        poll_loop(b, level, 97, chunk_bytes=1024)


def test_offset_index_skips_ahead(file_root: str) -> None:
    st = Storage.for_url(file_root)
    b = PartitionBuilder(st, "idx", 0)
    b.data(500, max_batch_bytes=1024, value_size=30, flush=True)
    b.publish()
    seg = st.get(segment_path("idx", 0, 0))
    offsets, _ = build_indexes(seg, 0, index_interval_bytes=2048)
    assert len(offsets) > 3
    st.put_if_absent(segment_path("idx", 0, 0, ".index"), encode_offset_index(offsets, 0))
    assert check(b, "read_committed", 321, chunk_bytes=1024) == list(range(321, 500))
    assert check(b, "read_committed", 0, 10, chunk_bytes=1024) == list(range(10))


@pytest.mark.parametrize("with_timeindex", [False, True], ids=["scan", "timeindex"])
def test_offset_for_timestamp(any_root: str, with_timeindex: bool) -> None:
    st = Storage.for_url(any_root)
    b = PartitionBuilder(st, "ts", 0)
    b.data(5, flush=True)                  # ts BASE+1..5
    b.data(3, pid=2, flush=True)           # 5..7, BASE+6..8
    b.commit(2)                            # 8 (BASE+9)
    b.data(4, max_batch_bytes=200, flush=True)  # 9..12, BASE+10..13
    b.data(2, pid=3, flush=True)           # 13, 14 open: beyond the LSO
    b.publish()
    if with_timeindex:
        for base in (0, 5, 9):
            seg = st.get(segment_path("ts", 0, base))
            _, times = build_indexes(seg, base, index_interval_bytes=1)
            st.put_if_absent(segment_path("ts", 0, base, ".timeindex"),
                             encode_time_index(times, base))
    reader = PartitionReader(st, "ts", 0)
    assert reader.offset_for_timestamp(0) == 0
    assert reader.offset_for_timestamp(BASE_TS + 3) == 2
    assert reader.offset_for_timestamp(BASE_TS + 6) == 5
    assert reader.offset_for_timestamp(BASE_TS + 9) == 9   # the marker's time: next record
    assert reader.offset_for_timestamp(BASE_TS + 12) == 11
    assert reader.offset_for_timestamp(BASE_TS + 14) is None  # only beyond the LSO
    uncommitted = PartitionReader(st, "ts", 0, isolation_level="read_uncommitted")
    assert uncommitted.offset_for_timestamp(BASE_TS + 14) == 13


def test_corrupt_object_is_named(file_root: str) -> None:
    st = Storage.for_url(file_root)
    b = PartitionBuilder(st, "bad", 0)
    b.data(5, flush=True)
    b.publish()
    path = segment_path("bad", 0, 0)
    data = bytearray(st.get(path))
    data[-3] ^= 0xFF
    st.delete(path)
    st.put_if_absent(path, bytes(data))
    with pytest.raises(CorruptBatchError, match=r"00000000000000000000\.log"):
        list(PartitionReader(st, "bad", 0).read(0))


def test_complete_prefix() -> None:
    from txnlog.log_format.codec.records import encode_batch

    one = encode_batch([(b"k", b"v", (), 1)])
    two = one + encode_batch([(b"k", b"v", (), 1)], base_offset=1)
    assert complete_prefix(two) == len(two)
    assert complete_prefix(two[:-1]) == len(one)
    assert complete_prefix(two[:5]) == 0
    with pytest.raises(CorruptBatchError, match="below the minimum"):
        complete_prefix(b"\0" * 8 + b"\0\0\0\x05" + b"\0" * 60)


def test_bad_arguments(file_root: str) -> None:
    st = Storage.for_url(file_root)
    with pytest.raises(ValueError, match="isolation level"):
        PartitionReader(st, "t", 0, isolation_level="read_dirty")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition"):
        PartitionReader(st, "t", -1)
    with pytest.raises(ValueError, match="start offset"):
        list(PartitionReader(st, "t", 0).read(-5))


# ------------------------------------------------------------------------ random logs


def random_log(b: PartitionBuilder, rng: random.Random, steps: int) -> None:
    pids = [11, 12, 13]
    for _ in range(steps):
        op = rng.random()
        if op < 0.3:
            b.data(rng.randint(1, 6), flush=rng.random() < 0.5,
                   max_batch_bytes=rng.choice([200, 1 << 20]))
        elif op < 0.6:
            b.data(rng.randint(1, 4), pid=rng.choice(pids), flush=rng.random() < 0.5)
        elif op < 0.8 and b.open_txns:
            chosen = rng.sample(sorted(b.open_txns), rng.randint(1, len(b.open_txns)))
            b.markers([(p, rng.random() < 0.5) for p in chosen], flush=rng.random() < 0.7)
        elif op < 0.87:
            b.fence(rng.randint(1, 3))
        elif op < 0.94:
            deltas = sorted(rng.sample(range(8), rng.randint(1, 4)))
            b.raw_batch(deltas, last_offset_delta=deltas[-1] + rng.randint(0, 2))
        else:
            b.raw_batch([], last_offset_delta=rng.randint(0, 3))
    if rng.random() < 0.5:  # close everything, or leave a transaction hanging
        b.markers([(p, rng.random() < 0.5) for p in sorted(b.open_txns)])
    b.publish()


@pytest.mark.parametrize("seed", range(6))
def test_random_logs_match_the_model(file_root: str, seed: int) -> None:
    rng = random.Random(seed)
    b = PartitionBuilder(Storage.for_url(file_root), "rnd", 0)
    random_log(b, rng, 60)
    for level in LEVELS:
        check(b, level)
        check(b, level, chunk_bytes=1024)
        for _ in range(15):
            s = rng.randint(0, b.hw)
            check(b, level, s, s + rng.randint(0, 20))
        poll_loop(b, level, rng.randint(1, 9))


def test_random_log_on_s3(s3_root: str) -> None:
    rng = random.Random(99)
    b = PartitionBuilder(Storage.for_url(s3_root), "rnd", 0)
    random_log(b, rng, 40)
    for level in LEVELS:
        check(b, level)
        for _ in range(5):
            s = rng.randint(0, b.hw)
            check(b, level, s, s + rng.randint(0, 20))
        poll_loop(b, level, 7)


class _SlowListings:
    """A storage whose every LIST of the partition's directory takes ``seconds`` of the
    reader's clock (a slow store, or a long tail of small objects), counting them."""

    def __init__(self, storage: Storage, directory: str, clock: list[float],
                 seconds: float) -> None:
        self._storage, self._dir, self._clock, self._seconds = storage, directory, clock, seconds
        self.partition_lists = 0

    def list(self, directory: str, *args: object, **kw: object) -> object:
        out = self._storage.list(directory, *args, **kw)
        if directory == self._dir:
            self.partition_lists += 1
            assert self.partition_lists <= 20, "the reader lists the partition without end"
            self._clock[0] += self._seconds
        return out

    def __getattr__(self, name: str) -> object:
        return getattr(self._storage, name)


@pytest.mark.parametrize("merged", [False, True], ids=["small-objects", "after-a-merge"])
def test_a_listing_slower_than_half_the_grace_still_reads(
        builder: PartitionBuilder, monkeypatch: pytest.MonkeyPatch, merged: bool) -> None:
    """A listing is trusted for small objects for half the grace period. A LIST that takes
    longer gives a listing already too old when it arrives: the reader renews its trust
    through the manifest (nothing merged past what it still reads) instead of listing the
    tail again for ever (the chaos harness's final read crawled at 7 offsets/s)."""
    import txnlog.log_format.reader as reader_module
    from txnlog.log_format import layout
    from txnlog.log_format.manifest import MIN_GRACE_MS, MergedObject, new_manifest

    b = builder
    for _ in range(30):
        b.data(2, flush=True)
    b.publish()
    if merged:  # the first 10 objects merged into a run, as the coordinator would
        data = b"".join(b.storage.get(layout.segment_path(b.topic, 0, 2 * i))
                        for i in range(10))
        run = MergedObject(1, 0, 20, len(data))
        assert b.storage.put_if_absent(run.path(b.topic, 0), data)
        man = new_manifest(b.topic, 0, 1, [run], start_offset=0, open_since_ms=0,
                           grace_ms=MIN_GRACE_MS)
        assert b.storage.put_if_absent(man.path, man.to_json())
    clock = [1000.0]
    monkeypatch.setattr(reader_module, "time", type("Clock", (), {
        "monotonic": staticmethod(lambda: clock[0])}))
    slow = _SlowListings(b.storage, layout.partition_dir(b.topic, 0), clock,
                         MIN_GRACE_MS / 1000)  # longer than the half grace a listing lasts
    reader = PartitionReader(slow, b.topic, 0)  # type: ignore[arg-type]
    got = [o for c in reader.read() for o in c.batch.column("offset").to_pylist()]
    assert got == [r.offset for r in b.expected("read_committed")]
    assert slow.partition_lists <= 2
