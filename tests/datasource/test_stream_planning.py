"""The stream source's per-micro-batch planning, called as Spark calls it (no Spark session).

``partitions(start, end)`` follows ``latestOffset`` in every micro-batch: it must not go to
storage again for partitions the query already reads (it used to read the stable snapshot
again and list every partition twice: 10 LISTs and 5 GETs per batch of a 4-partition
topic, each a round trip on S3). Offsets gone before a range's start are then found by the
range's task, which lists its partition anyway, and fail it (failOnDataLoss) or are skipped.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

# tests/ (the shared helpers) is on sys.path: tests/conftest.py puts it there
from coordinator_proc import CoordinatorProc
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadMaxRows
from txnlog import TransactionalProducer
from txnlog.datasource.read.planning import DataLossError
from txnlog.datasource.stream_offsets import decode
from txnlog.log_format.storage import Storage

from tests.datasource.test_stream_trigger_limits import _reader


def _produce(root: str, endpoint: str, transactions: int, per_txn: int) -> None:
    with TransactionalProducer(root, "p", coordinator=endpoint) as p:
        p.init_transactions()
        for t in range(transactions):
            p.begin_transaction()
            for i in range(per_txn):
                p.send("t", b"v", key=f"k{t}-{i}".encode(), partition=i % 2)
            p.commit_transaction()


class CountingStorage:
    """Counts the requests made through a Storage instance (patched in place)."""

    def __init__(self, storage: Storage) -> None:
        self.calls: dict[str, int] = {}
        for name in ("get", "get_view", "list", "exists", "put", "put_if_absent"):
            if hasattr(storage, name):
                setattr(storage, name, self._wrap(name, getattr(storage, name)))

    def _wrap(self, name: str, fn):  # type: ignore[no-untyped-def]
        def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return call


def test_partitions_after_latest_offset_make_no_request(file_root: str) -> None:
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 2)
        _produce(file_root, coord.endpoint, 6, 10)
        r = _reader(file_root, maxOffsetsPerTrigger="20")
        start = r.initialOffset()
        counter = CountingStorage(Storage.for_url(file_root))
        batches = 0
        while True:
            end = r.latestOffset(start, ReadMaxRows(20))
            if end == start:
                break
            counter.calls.clear()
            parts = r.partitions(start, end)
            assert counter.calls == {}, counter.calls
            assert parts
            rows = sum(b.num_rows for p in parts for b in r.read(p))
            assert 0 < rows <= 20
            start, batches = end, batches + 1
        assert batches >= 3


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_task_finds_offsets_gone_before_its_range(file_root: str,
                                                    fail_on_data_loss: bool) -> None:
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 2)
        _produce(file_root, coord.endpoint, 3, 10)
        r = _reader(file_root, failOnDataLoss=str(fail_on_data_loss).lower())
        start = r.initialOffset()
        end = r.latestOffset(start, r.getDefaultReadLimit())
        # t-0 and t-1 are small: one task reads both (minRecordsPerPartition), t-0 first.
        parts = [p for p in r.partitions(start, end) if any(x.partition == 0 for x in p.ranges)]
        assert len(parts) == 1 and [x.start for x in parts[0].ranges if x.partition == 0] == [0]
        # Retention (here DeleteRecords, which moves the log start the same way) deletes the
        # partition's first records after the batch was planned.
        first_kept = 12
        assert coord.client().delete_records({("t", 0): first_kept}) == {("t", 0): first_kept}
        if fail_on_data_loss:
            with pytest.raises(DataLossError, match=r"t-0: offsets \[0, \d+\) were deleted"):
                list(r.read(parts[0]))
        else:
            batches = list(r.read(parts[0]))
            offsets = [o for b in batches for o, p in zip(b.column("offset").to_pylist(),
                                                          b.column("partition").to_pylist(),
                                                          strict=True) if p == 0]
            assert offsets and min(offsets) >= first_kept
            # the task's other range (t-1) is read whole after t-0's skip: 3 transactions
            # of 5 records (its other offsets hold the commit markers)
            assert sum(b.column("partition").to_pylist().count(1) for b in batches) == 3 * 5


def test_group_offsets_commit_off_the_micro_batch_path(file_root: str) -> None:
    """``commit(end)`` with ``groupId`` and another sink: Spark waits for it between batches,
    so it hands the commit to a thread and returns even while the coordinator does not
    answer (here: stopped with SIGSTOP); the offsets land once it answers again, the newest
    ``end`` superseding one not yet committed."""
    import pickle
    import signal

    with CoordinatorProc(file_root) as coord:
        client = coord.client()
        client.create_topic("t", 2)
        _produce(file_root, coord.endpoint, 3, 10)
        r = _reader(file_root, groupId="g", maxOffsetsPerTrigger="10",
                    coordinator=coord.endpoint)
        start = r.initialOffset()
        first = r.latestOffset(start, ReadMaxRows(10))
        second = r.latestOffset(first, ReadMaxRows(10))
        assert start != first != second
        os.kill(coord.pid, signal.SIGSTOP)
        try:
            r.commit(first)   # returns at once: nothing waits for the stopped coordinator
            r.commit(second)
            assert not r.flush_group_commits(timeout=0.5)
            pickle.dumps(r)  # the reader still pickles (the thread is the process's own)
        finally:
            os.kill(coord.pid, signal.SIGCONT)
        assert r.flush_group_commits(timeout=120)
        want = {tp: off for tp, off in decode(second).items()}
        assert client.committed_offsets("g") == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50_000), max_size=40), st.integers(0, 30_000))
def test_pack_ranges_keeps_order_and_bounds(sizes: list[int], min_records: int) -> None:
    """Small ranges share tasks of at most ``min_records`` records; a range of that many or
    more keeps a task of its own; nothing is lost, duplicated or split, and a task reads its
    ranges in the order given."""
    from txnlog.datasource.read.planning import OffsetRange, pack_ranges

    ranges = [OffsetRange("t", i, 7, 7 + n) for i, n in enumerate(sizes)]
    tasks = pack_ranges(ranges, min_records)
    flat = [r for task in tasks for r in task]
    assert sorted(flat, key=ranges.index) == ranges and len(flat) == len(ranges)
    assert all(task for task in tasks)
    for task in tasks:
        assert [ranges.index(r) for r in task] == sorted(ranges.index(r) for r in task)
        if len(task) > 1:
            assert sum(r.size for r in task) <= min_records
            assert all(r.size < min_records for r in task)
    if min_records == 0:
        assert all(len(task) == 1 for task in tasks)
    # greedy: two successive groups of small ranges would not have fitted in one
    small = [t for t in tasks if all(r.size < min_records for r in t)]
    for a, b in itertools.pairwise(small):
        assert sum(r.size for r in a) + b[0].size > min_records


def test_a_small_micro_batch_is_one_task(file_root: str) -> None:
    """1,000 records per trigger over 4 partitions: one task (it was four, two waves on two
    cores); minRecordsPerPartition=0 gives Spark's Kafka source's one task per partition."""
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 4)
        with TransactionalProducer(file_root, "p4", coordinator=coord.endpoint) as prod:
            prod.init_transactions()
            prod.begin_transaction()
            for i in range(2400):
                prod.send("t", b"v", key=b"k%d" % i, partition=i % 4)
            prod.commit_transaction()
        for opts, tasks in (({}, 1), ({"minRecordsPerPartition": "0"}, 4)):
            r = _reader(file_root, maxOffsetsPerTrigger="1000", **opts)
            start = r.initialOffset()
            end = r.latestOffset(start, r.getDefaultReadLimit())
            parts = r.partitions(start, end)
            assert len(parts) == tasks, opts
            rows = [row for p in parts for b in r.read(p)
                    for row in zip(b.column("partition").to_pylist(),
                                   b.column("offset").to_pylist(), strict=True)]
            assert len(rows) == len(set(rows)) == 1000
            for p in range(4):  # each partition's records in order, from its start
                offs = [o for q, o in rows if q == p]
                assert offs == list(range(len(offs)))


def _visible(b, level: str, start: int, end: int) -> list[int]:  # type: ignore[no-untyped-def]
    return [r.offset for r in b.expected(level, start, end)]


@pytest.mark.parametrize("seed", range(8))
def test_visible_end_never_hides_a_record(file_root: str, seed: int) -> None:
    """``PartitionReader.visible_end`` (where a stream's budget lets a partition's tail
    join) against the model of random logs (markers, aborted and open transactions,
    fences, gaps, empty batches): nothing visible is ever at or after the offset it gives,
    and with room to look it is at most one batch past the last visible record. With no
    room (one GET, a few bytes) it may only stop higher."""
    import random

    from partition_builder import PartitionBuilder
    from txnlog.log_format.reader import PartitionReader

    from tests.log_format.test_reader import random_log

    rng = random.Random(seed)
    b = PartitionBuilder(Storage.for_url(file_root), "rnd", 0)
    random_log(b, rng, 60)
    for level in ("read_committed", "read_uncommitted"):
        reader = PartitionReader(b.storage, "rnd", 0, isolation_level=level)  # type: ignore[arg-type]
        bound = reader.latest_offset()
        cases = [(0, bound)] + [(s, s + rng.randint(0, 25))
                                for s in (rng.randint(0, bound) for _ in range(25))]
        for start, end in cases:
            capped = min(end, bound)
            seen = _visible(b, level, start, capped)
            d = reader.visible_end(start, end, max_objects=1000)
            assert start <= d <= max(start, capped)
            assert not [o for o in seen if o >= d], (level, start, end, d)
            tight = seen[-1] + 1 if seen else start
            # one raw batch of the random logs spans at most 10 offsets past its last record
            assert d <= tight + 10, (level, start, end, d, tight)
            if seen and seen[-1] + 1 == capped:
                assert d == capped
            small = reader.visible_end(start, end, max_objects=1, max_bytes=100)
            assert d <= small <= max(start, capped)


def _data_then_aborted_then_markers(b: Any) -> None:
    """Offsets 0-499 committed data (pid 7), 500-502 aborted data (pid 8), then their two
    markers, in one object: a batch write's tail as the merger leaves it."""
    b.data(500, pid=7, max_batch_bytes=1024, value_size=30)
    b.data(3, pid=8)
    b.markers([(7, True), (8, False)], flush=False)
    b.publish()


def test_visible_end_reads_a_big_object_from_its_last_index_entry(file_root: str) -> None:
    """A merged-size object (data, then its transaction's markers, as the merger leaves a
    batch write's tail): read from its last ``.index`` entry below the end, not whole."""
    from partition_builder import PartitionBuilder
    from txnlog.log_format.codec.indexes import build_indexes, encode_offset_index
    from txnlog.log_format.layout import segment_path
    from txnlog.log_format.reader import PartitionReader

    st = Storage.for_url(file_root)
    _data_then_aborted_then_markers(PartitionBuilder(st, "idx", 0))
    size = st.size(segment_path("idx", 0, 0))
    offsets, _ = build_indexes(st.get(segment_path("idx", 0, 0)), 0, index_interval_bytes=2048)
    st.put_if_absent(segment_path("idx", 0, 0, ".index"), encode_offset_index(offsets, 0))
    reader = PartitionReader(st, "idx", 0)
    assert reader.segments()[0].has_index
    ranges: list[tuple[str, int, int]] = []
    get_view = st.get_view
    st.get_view = lambda path, a=None, z=None: (ranges.append((path, a, z)),  # type: ignore[method-assign]
                                                get_view(path, a, z))[1]
    # read_committed: pid 8's 3 records are aborted; 500 data, then 3 aborted, 2 markers
    assert reader.visible_end(0, 505, max_bytes=size // 4) == 500
    [(path, a, z)] = ranges  # one ranged read of the object's tail, from an index entry
    assert path.endswith("0.log") and a > 0 and z == size and z - a <= size // 4
    unc = PartitionReader(st, "idx", 0, isolation_level="read_uncommitted")
    assert unc.visible_end(0, 505, max_bytes=size // 4) == 503
    # too little room even from the last index entry: nothing verified, nothing joins
    assert reader.visible_end(0, 505, max_bytes=16) == 505


def test_visible_end_reads_an_unindexed_run_whole(file_root: str) -> None:
    """The same log as a run of the open segment the merger wrote without indexes (under
    ``UNINDEXED_RUN_MAX_BYTES``): bigger than the budget, it is read whole in one GET, so
    a tail of markers and aborted data still joins; a bigger budget is not needed."""
    from partition_builder import PartitionBuilder
    from txnlog.log_format.layout import TXNINDEX_SUFFIX, parse_segment_name, segment_path
    from txnlog.log_format.manifest import (
        UNINDEXED_RUN_MAX_BYTES,
        MergedObject,
        PartitionManifest,
    )
    from txnlog.log_format.reader import PartitionReader

    st = Storage.for_url(file_root)
    _data_then_aborted_then_markers(PartitionBuilder(st, "run", 0))
    data = st.get(segment_path("run", 0, 0))
    txn = [o.name for o in st.list("run-0")
           if (p := parse_segment_name(o.name)) and p.suffix == TXNINDEX_SUFFIX]
    assert len(txn) == 1 and len(data) < UNINDEXED_RUN_MAX_BYTES
    run = MergedObject(1, 0, 505, len(data), True, -1, indexed=False)
    st.put_if_absent(run.path("run", 0), data)
    st.put_if_absent(run.path("run", 0, TXNINDEX_SUFFIX), st.get(f"run-0/{txn[0]}"))
    man = PartitionManifest("run", 0, 1, 0, 505, (run,))
    st.put_if_absent(man.path, man.to_json())
    reader = PartitionReader(st, "run", 0)
    [seg] = reader.segments()
    assert seg.merged and not seg.has_index
    ranges: list[str] = []
    get_view = st.get_view
    st.get_view = lambda path, a=None, z=None: (ranges.append(path),  # type: ignore[method-assign]
                                                get_view(path, a, z))[1]
    assert reader.visible_end(0, 505, max_bytes=len(data) // 4) == 500
    assert ranges == [run.path("run", 0)]
    unc = PartitionReader(st, "run", 0, isolation_level="read_uncommitted")
    assert unc.visible_end(0, 505, max_bytes=len(data) // 4) == 503
