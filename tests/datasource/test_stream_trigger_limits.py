"""The stream source's admission control, called as Spark calls it (no Spark session):
minOffsetsPerTrigger with maxTriggerDelay, alone and with maxOffsetsPerTrigger, as Spark's
KafkaMicroBatchStream does them. Time is the module's clock, moved by the test."""

from __future__ import annotations

import math

import pytest

# tests/ (the shared helpers) is on sys.path: tests/conftest.py puts it there
from coordinator_proc import CoordinatorProc
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from txnlog import TransactionalProducer
from txnlog.datasource.options import parse_read_options
from txnlog.datasource.read import stream_reader
from txnlog.datasource.stream_offsets import decode, encode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _produce(root: str, endpoint: str, tid: str, n: int) -> None:
    with TransactionalProducer(root, tid, coordinator=endpoint) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(n):
            p.send("t", b"v", key=f"k{i}".encode(), partition=0)
        p.commit_transaction()


def _reader(root: str, **opts: str) -> stream_reader.TxnlogStreamReader:
    o = parse_read_options({"path": root, "subscribe": "t", "startingoffsets": "earliest",
                            **{k.lower(): v for k, v in opts.items()}}, streaming=True)
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                         StructField("topic", StringType()),
                         StructField("partition", IntegerType()),
                         StructField("offset", LongType()),
                         StructField("timestamp", TimestampType()),
                         StructField("timestampType", IntegerType())])
    return stream_reader.TxnlogStreamReader(o, schema)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(stream_reader.time, "monotonic", c)
    return c


def test_min_offsets_and_max_trigger_delay(file_root: str, clock: Clock) -> None:
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 1)
        r = _reader(file_root, minOffsetsPerTrigger="10", maxTriggerDelay="30s")
        assert r.getDefaultReadLimit() == ReadMinRows(10)
        start = r.initialOffset()
        limit = r.getDefaultReadLimit()
        assert r.latestOffset(start, limit) == start  # nothing yet (first trigger runs)
        _produce(file_root, coord.endpoint, "a", 5)  # 6 offsets
        clock.now += 1
        assert r.latestOffset(start, limit) == start  # 6 < 10: delayed
        clock.now += 28  # 29 s since the last batch
        assert r.latestOffset(start, limit) == start
        clock.now += 1  # maxTriggerDelay since the last batch: runs with what there is
        assert decode(r.latestOffset(start, limit)) == {("t", 0): 6}
        start = encode({("t", 0): 6})
        _produce(file_root, coord.endpoint, "b", 5)
        clock.now += 1
        assert r.latestOffset(start, limit) == start  # 6 new < 10
        _produce(file_root, coord.endpoint, "c", 5)
        clock.now += 1
        assert decode(r.latestOffset(start, limit)) == {("t", 0): 18}  # 12 >= 10
        # Trigger.Once passes ReadAllAvailable: no minimum, as in Kafka
        _produce(file_root, coord.endpoint, "d", 1)
        clock.now += 1
        assert decode(r.latestOffset(encode({("t", 0): 18}), ReadAllAvailable())) == \
            {("t", 0): 20}


def test_min_and_max_together(file_root: str, clock: Clock) -> None:
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 1)
        r = _reader(file_root, minOffsetsPerTrigger="4", maxOffsetsPerTrigger="7")
        limit = r.getDefaultReadLimit()
        assert limit == ReadMaxRows(7)  # min comes from the options (no composite limit)
        start = r.initialOffset()
        assert r.latestOffset(start, limit) == start
        _produce(file_root, coord.endpoint, "a", 2)  # 3 offsets < 4
        clock.now += 1
        assert r.latestOffset(start, limit) == start
        _produce(file_root, coord.endpoint, "b", 9)  # 13 offsets: min met, capped at 7
        clock.now += 1
        assert decode(r.latestOffset(start, limit)) == {("t", 0): 7}
        # AvailableNow must end: the minimum does not hold it back
        r.prepareForTriggerAvailableNow()
        clock.now += 1
        assert decode(r.latestOffset(encode({("t", 0): 12}), limit)) == {("t", 0): 13}


def test_offset_beyond_the_end_fails_or_goes_on_from_the_end(file_root: str) -> None:
    """failOnDataLoss with a checkpointed offset beyond the partition's end (a root
    replaced): true fails naming it; false goes on from the end (Spark's Kafka source),
    never waiting for an offset that may never come."""
    from txnlog.datasource.read.planning import DataLossError

    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 1)
        _produce(file_root, coord.endpoint, "a", 3)  # offsets 0-3
        beyond = encode({("t", 0): 50})
        with pytest.raises(DataLossError, match="beyond the partition's end 4"):
            _reader(file_root).latestOffset(beyond, ReadAllAvailable())
        r = _reader(file_root, failOnDataLoss="false")
        end = r.latestOffset(beyond, ReadAllAvailable())
        assert decode(end) == {("t", 0): 4}
        assert r.partitions(beyond, end) == []  # nothing re-read, nothing skipped twice
        _produce(file_root, coord.endpoint, "b", 2)
        nxt = r.latestOffset(end, ReadAllAvailable())
        assert decode(nxt) == {("t", 0): 7}
        [part] = r.partitions(end, nxt)
        assert [(x.start, x.end) for x in part.ranges] == [(4, 7)]


def _backlogs() -> st.SearchStrategy[tuple[dict, dict, int]]:
    def build(parts: list[tuple[int, int]], budget: int) -> tuple[dict, dict, int]:
        begin = {("t", i): b for i, (b, _) in enumerate(parts)}
        end = {("t", i): b + n for i, (b, n) in enumerate(parts)}
        return begin, end, budget
    return st.builds(build, st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**6)),
                                     min_size=1, max_size=12),
                     st.integers(1, 2 * 10**6))


@settings(max_examples=500, deadline=None)
@given(_backlogs())
def test_rate_limit_takes_exactly_the_budget(backlog: tuple[dict, dict, int]) -> None:
    """maxOffsetsPerTrigger: never past a partition's end, never backwards, every partition
    with a share of at least one offset gets its floor, and a batch carries exactly the
    budget when the backlog exceeds it (up to the partitions whose share below 1 rounds up,
    as in Spark's Kafka source) - so N budgets of backlog drain in N micro-batches."""
    begin, end, budget = backlog
    out = stream_reader.rate_limit(begin, end, budget)
    total = sum(end[tp] - begin[tp] for tp in end)
    assert set(out) == set(end)
    assert all(begin[tp] <= out[tp] <= end[tp] for tp in end)
    taken = sum(out[tp] - begin[tp] for tp in end)
    if total <= budget:
        assert out == end
        return
    shares = {tp: budget * (end[tp] - begin[tp]) / total for tp in end}
    rounded_up = sum(1 for v in shares.values() if 0 < v < 1)
    assert budget <= taken <= budget + rounded_up
    for tp, share in shares.items():
        assert out[tp] - begin[tp] >= min(end[tp] - begin[tp], math.floor(share))


def test_rate_limit_drains_a_backlog_of_n_budgets_in_n_batches() -> None:
    """4 uneven partitions holding 2,000,000 records at 500,000 per trigger: 4 batches of
    exactly 500,000 (the floor alone made 499,998 x 4 and a fifth of 8)."""
    end = {("t", 0): 500_123, ("t", 1): 499_001, ("t", 2): 500_877, ("t", 3): 499_999}
    cur = {tp: 0 for tp in end}
    sizes = []
    while cur != end:
        nxt = stream_reader.rate_limit(cur, end, 500_000)
        sizes.append(sum(nxt[tp] - cur[tp] for tp in end))
        cur = nxt
    assert sizes == [500_000] * 4


def _one_transaction(root: str, endpoint: str, per_partition: int, partitions: int,
                     aborted_after: int = 0) -> None:
    """One committed transaction of ``per_partition`` records in each partition (as one
    batch write makes: each partition ends on its COMMIT marker), then, with
    ``aborted_after``, an aborted one of that many records per partition."""
    with TransactionalProducer(root, "one", coordinator=endpoint) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(per_partition * partitions):
            p.send("t", b"v%d" % i, key=b"k%d" % i, partition=i % partitions)
        p.commit_transaction()
        if aborted_after:
            p.begin_transaction()
            for i in range(aborted_after * partitions):
                p.send("t", b"ABORTED", key=b"a%d" % i, partition=i % partitions)
            p.flush()  # written to storage, then aborted by markers
            p.abort_transaction()


def _drain(r: stream_reader.TxnlogStreamReader, limit: ReadMaxRows
           ) -> tuple[list[dict], list[list[tuple[int, int, bytes]]], list[dict]]:
    """Run micro-batches as Spark does (latestOffset, partitions, read) until latestOffset
    returns its start: the end offsets, each batch's (partition, offset, value) rows and
    each batch's lag (Kafka's offsets behind latest, from reportLatestOffset)."""
    from txnlog.datasource.read.lag_metrics import offsets_behind_latest

    start = r.initialOffset()
    ends, batches, lags = [], [], []
    while True:
        end = r.latestOffset(start, limit)
        if end == start:
            return ends, batches, lags
        rows = [row for part in r.partitions(start, end) for b in r.read(part)
                for row in zip(b.column("partition").to_pylist(),
                               b.column("offset").to_pylist(),
                               b.column("value").to_pylist(), strict=True)]
        ends.append(decode(end))
        batches.append(rows)
        lags.append(offsets_behind_latest(end, r.reportLatestOffset()))
        start = end


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_marker_only_tail_joins_the_batch_before_it(file_root: str, partitions: int
                                                      ) -> None:
    """A backlog of N budgets of data ending on COMMIT markers drains in N micro-batches:
    the budget boundary leaves only the markers, which join the last batch instead of
    making a micro-batch of their own (a whole trigger, and a sink transaction, for
    nothing). Its end offsets are still exact next offsets: each partition's LSO."""
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", partitions)
        _one_transaction(file_root, coord.endpoint, 30, partitions)
        lso = {("t", p): 31 for p in range(partitions)}  # 30 records + the COMMIT marker
        budget = 10 * partitions
        r = _reader(file_root, maxOffsetsPerTrigger=str(budget))
        ends, batches, lags = _drain(r, ReadMaxRows(budget))
        assert ends == [{tp: 10 for tp in lso}, {tp: 20 for tp in lso}, lso]
        assert [len(rows) for rows in batches] == [budget] * 3
        got = sorted((p, o) for rows in batches for p, o, _ in rows)
        assert got == [(p, o) for p in range(partitions) for o in range(30)]
        # lag: the partition's LSO minus the batch's end, per partition
        assert [lag["maxOffsetsBehindLatest"] for lag in lags] == ["21", "11", "0"]
        assert [lag["minOffsetsBehindLatest"] for lag in lags] == ["21", "11", "0"]


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_an_aborted_tail_joins_only_where_it_is_invisible(file_root: str, level: str
                                                          ) -> None:
    """After 20 committed records per partition: an aborted transaction of 3 records per
    partition and its ABORT markers. read_committed sees none of that tail, so it joins
    the batch that reaches the COMMIT marker; read_uncommitted sees the aborted records
    (data, counted by the budget), and only the markers after them join."""
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 2)
        _one_transaction(file_root, coord.endpoint, 20, 2, aborted_after=3)
        # per partition: 0-19 data, 20 COMMIT, 21-23 aborted data, 24 ABORT
        end = {("t", 0): 25, ("t", 1): 25}
        budget = 20 if level == "read_committed" else 24
        r = _reader(file_root, maxOffsetsPerTrigger=str(budget), **{"isolation.level": level})
        ends, batches, _ = _drain(r, ReadMaxRows(budget))
        half = {tp: budget // 2 for tp in end}
        assert ends == [half, end]  # was three: the third only the aborted tail
        values = [v for rows in batches for _, _, v in rows]
        assert values.count(b"ABORTED") == (0 if level == "read_committed" else 6)
        assert len(values) == (40 if level == "read_committed" else 46)
        rows = sorted((p, o) for b in batches for p, o, _ in b)
        assert len(rows) == len(set(rows))


def test_many_small_transactions_ending_on_an_aborted_one(file_root: str) -> None:
    """Ten committed transactions of 4 records per partition, then an aborted one of 3: per
    partition offsets 0-49 alternate 4 records and a COMMIT marker (the last record is 48),
    50-52 aborted data, 53 its ABORT marker. The markers between records take offsets of the
    budget as in Kafka, but the tail after the last visible record (49-53) makes no micro-batch
    of its own: 98 offsets of data at 49 per trigger drain in 2 micro-batches (counting every
    offset: 3, the last one returning no row), the last ending at the LSO, every record read
    once, and the lag follows the true offsets."""
    with CoordinatorProc(file_root) as coord:
        coord.client().create_topic("t", 2)
        with TransactionalProducer(file_root, "small", coordinator=coord.endpoint) as p:
            p.init_transactions()
            for t in range(10):
                p.begin_transaction()
                for i in range(8):
                    p.send("t", b"v%d-%d" % (t, i), key=b"k", partition=i % 2)
                p.commit_transaction()
            p.begin_transaction()
            for i in range(6):
                p.send("t", b"ABORTED", key=b"a", partition=i % 2)
            p.flush()  # written to storage, then aborted by markers
            p.abort_transaction()
        lso = {("t", 0): 54, ("t", 1): 54}
        r = _reader(file_root, maxOffsetsPerTrigger="49")
        ends, batches, lags = _drain(r, ReadMaxRows(49))
        assert ends == [{("t", 0): 25, ("t", 1): 24}, lso]
        assert all(batches)  # no micro-batch without a record
        rows = sorted((p, o) for b in batches for p, o, _ in b)
        assert len(rows) == len(set(rows)) == 80
        assert {o for _, o in rows} == {o for o in range(49) if o % 5 != 4}
        assert b"ABORTED" not in [v for b in batches for _, _, v in b]
        assert [(lag["minOffsetsBehindLatest"], lag["maxOffsetsBehindLatest"])
                for lag in lags] == [("29", "30"), ("0", "0")]
        # Counting every offset, as Spark's Kafka source does, takes a third micro-batch:
        cur, counted = {tp: 0 for tp in lso}, 0
        while cur != lso:
            cur, counted = stream_reader.rate_limit(cur, lso, 49), counted + 1
        assert counted == 3
