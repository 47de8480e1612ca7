"""Merging objects into one segment (log_format/segment_merge.py) and the merge policy
(coordinator/merge_policy.py): the bytes are the inputs' bytes, the indexes are Kafka's, and
kafka-python reads the result batch for batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords as KpMemoryRecords
from txnlog.coordinator.maintenance.merge_policy import (
    UNINDEXED_RUN_MAX_BYTES,
    MergeSettings,
    SmallObject,
    choose_merge,
    roll_ms,
    unindexed_run,
)
from txnlog.log_format.codec.control import ControlType, encode_control_batch
from txnlog.log_format.codec.indexes import (
    AbortedTxn,
    build_indexes,
    decode_offset_index,
    decode_time_index,
    decode_txn_index,
    encode_txn_index,
)
from txnlog.log_format.codec.records import encode_batch, iter_batches
from txnlog.log_format.errors import CorruptBatchError, CorruptIndexError
from txnlog.log_format.manifest import MergedObject
from txnlog.log_format.segments.segment_merge import MergeInput, merge_segment


def _objects(n: int, records: int = 3, value_size: int = 700) -> list[MergeInput]:
    """n small objects: transactional data batches, a marker after every other one, and a
    0-byte fence at the end (what commits leave)."""
    out = []
    off = 0
    for i in range(n):
        data = encode_batch([(b"k%d" % j, bytes([i % 251]) * value_size, [], 1_000 + off + j)
                             for j in range(records)], base_offset=off, producer_id=7,
                            producer_epoch=0, base_sequence=off, transactional=True)
        out.append(MergeInput(off, off + records, data, None, f"obj{i}"))
        off += records
        if i % 2:
            kind = ControlType.ABORT if i % 4 == 1 else ControlType.COMMIT
            marker = encode_control_batch(kind, producer_id=7, producer_epoch=0,
                                          coordinator_epoch=0, base_offset=off,
                                          timestamp_ms=5_000 + off)
            txn = None
            if kind == ControlType.ABORT:
                txn = encode_txn_index([AbortedTxn(7, off - 2 * records - 1, off, off + 1)])
            out.append(MergeInput(off, off + 1, marker, txn, f"marker{i}"))
            off += 1
    out.append(MergeInput(off, off + 2, b"", None, "fence"))
    return out


def test_merged_bytes_are_the_inputs_bytes_with_kafkas_indexes() -> None:
    inputs = _objects(40)
    seg = merge_segment(inputs)
    assert seg.log == b"".join(bytes(i.data) for i in inputs)
    assert (seg.base_offset, seg.end_offset) == (0, inputs[-1].end_offset)
    # the sparse indexes are what Kafka's LogSegment builds for the same bytes
    offsets, times = build_indexes(seg.log, 0)
    assert decode_offset_index(seg.index, 0) == offsets and offsets
    assert decode_time_index(seg.timeindex, 0) == times
    # the txnindex is the union of the inputs' entries, in order
    expect = [e for i in inputs if i.txnindex for e in decode_txn_index(i.txnindex)]
    assert seg.txnindex is not None and decode_txn_index(seg.txnindex) == expect
    assert seg.batches == len(list(iter_batches(seg.log)))


def test_kafka_python_reads_a_merged_segment_batch_for_batch() -> None:
    inputs = _objects(12)
    seg = merge_segment(inputs)
    records = KpMemoryRecords(seg.log)
    ours = list(iter_batches(seg.log))
    seen = 0
    while records.has_next():
        batch = records.next_batch()
        assert batch.base_offset == ours[seen].base_offset
        assert batch.is_control_batch == ours[seen].is_control
        assert batch.validate_crc()
        seen += 1
    assert seen == len(ours)


def test_merging_merged_objects_gives_the_same_bytes() -> None:
    inputs = _objects(30)
    whole = merge_segment(inputs)
    first, second = merge_segment(inputs[:17]), merge_segment(inputs[17:])
    again = merge_segment([MergeInput(first.base_offset, first.end_offset, first.log,
                                      first.txnindex),
                           MergeInput(second.base_offset, second.end_offset, second.log,
                                      second.txnindex)])
    assert (again.log, again.index, again.timeindex, again.txnindex) == \
        (whole.log, whole.index, whole.timeindex, whole.txnindex)


def test_bad_inputs_are_refused_naming_the_object() -> None:
    inputs = _objects(4)
    with pytest.raises(CorruptBatchError, match="not adjacent"):
        merge_segment([inputs[0], inputs[2]])
    wrong_range = MergeInput(inputs[0].base_offset, 1, inputs[0].data, None, "short")
    with pytest.raises(CorruptBatchError, match="outside the object's range"):
        merge_segment([wrong_range])
    flipped = bytearray(inputs[0].data)
    flipped[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="obj0"):
        merge_segment([MergeInput(0, 3, bytes(flipped), None, "obj0")])
    bad_txn = MergeInput(0, 3, inputs[0].data, encode_txn_index([AbortedTxn(1, 0, 9, 9)]), "x")
    with pytest.raises(CorruptIndexError, match="outside"):
        merge_segment([bad_txn])
    with pytest.raises(ValueError):
        merge_segment([])


# ------------------------------------------------------------------------------ the policy
S = MergeSettings(min_objects=4, fanout=3)


def _small(start: int, n: int, size: int = 100) -> list[SmallObject]:
    return [SmallObject(start + i, start + i + 1, size, False) for i in range(n)]


def _run(level: int, base: int, end: int, size: int = 400) -> MergedObject:
    return MergedObject(level, base, end, size)


def choose(runs: list[MergedObject], small: list[SmallObject], **kw: int):
    args = {"segment_bytes": 10_000, "segment_ms": 60_000, "open_since_ms": 0,
            "now_ms": 1_000_000, **kw}
    return choose_merge(runs, small, settings=S, **args)


def test_policy_waits_for_min_objects_then_makes_a_level_one_run() -> None:
    assert choose([], _small(0, 3)) is None
    c = choose([], _small(0, 5))
    assert c is not None and c.level == 1 and len(c.small) == 5 and not c.runs


def test_policy_carries_fanout_runs_into_the_next_level() -> None:
    runs = [_run(2, 0, 10), _run(1, 10, 14), _run(1, 14, 18), _run(1, 18, 22)]
    c = choose(runs, _small(22, 2))
    assert c is not None and c.level == 2 and c.runs == tuple(runs[1:]) and not c.small


def test_policy_closes_a_segment_at_segment_bytes() -> None:
    runs = [_run(1, 0, 4, 400)]
    c = choose(runs, _small(4, 10, 100), segment_bytes=900)
    assert c is not None and c.level == 0
    assert c.runs == tuple(runs) and len(c.small) == 5  # 400 + 5 * 100 fits, a 6th does not
    big = [SmallObject(0, 1, 5_000, False), *_small(1, 4)]
    c = choose([], big, segment_bytes=1_000)
    assert c is not None and c.level == 0 and c.small == (big[0],)  # alone, as Kafka rolls


def test_policy_closes_a_segment_after_segment_ms() -> None:
    runs = [_run(1, 0, 4)]
    assert choose(runs, _small(4, 1), open_since_ms=1_000_000 - 59_999) is None
    c = choose(runs, _small(4, 1), open_since_ms=1_000_000 - 60_000)
    assert c is not None and c.level == 0 and c.runs == tuple(runs) and len(c.small) == 1


def test_policy_closes_a_tail_without_runs_by_its_first_small_objects_age() -> None:
    """Fewer small objects than a run and no run: the age of the first one closes them
    (before, the age counted from the first run only, so such a tail never closed)."""
    tail = _small(40, 3)
    assert choose([], tail, first_small_ms=1_000_000 - 59_999) is None
    c = choose([], tail, first_small_ms=1_000_000 - 60_000)
    assert c is not None and c.level == 0 and c.small == tuple(tail) and not c.runs
    assert choose([], tail) is None  # when it was appended is not known: no age


def test_policy_makes_an_idle_partitions_few_objects_a_run() -> None:
    assert choose([], _small(0, 2)) is None
    c = choose_merge([], _small(0, 2), segment_bytes=10_000, segment_ms=60_000,
                     open_since_ms=0, now_ms=1_000_000, settings=S, idle=True)
    assert c is not None and c.level == 1 and len(c.small) == 2
    assert choose_merge([], _small(0, 1), segment_bytes=10_000, segment_ms=60_000,
                        open_since_ms=0, now_ms=1_000_000, settings=S, idle=True) is None


def test_roll_age_is_capped_by_max_compaction_lag_on_compacted_topics() -> None:
    """Kafka's LogConfig.maxSegmentMs (KIP-354)."""
    assert roll_ms(60_000, True, 2_000) == 2_000
    assert roll_ms(60_000, False, 2_000) == 60_000
    assert roll_ms(500, True, 2_000) == 500


def test_policy_never_spans_more_offsets_than_an_index_can_hold() -> None:
    far = [SmallObject(0, 10, 10, False), SmallObject(10, 2**31 + 5, 10, False),
           *_small(2**31 + 5, 4)]
    c = choose([], far)
    assert c is not None and c.level == 0 and c.small == (far[0],)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3000),
                          st.integers(-1, 50)), min_size=1, max_size=40),
       st.sampled_from([64, 512, 4096]))
def test_indexes_equal_kafkas_batch_by_batch_build(batches: list[tuple[int, int, int]],
                                                   interval: int) -> None:
    """Any batch sizes and timestamps (rising, falling, missing): the vectorized entries are
    those LogSegment's batch-by-batch walk (indexes.build_indexes) gives."""
    inputs = []
    off = 100
    for records, size, ts in batches:
        data = encode_batch([(None, b"v" * size, [], ts * 1000 if ts >= 0 else None)
                             for _ in range(records)], base_offset=off, now_ms=7)
        inputs.append(MergeInput(off, off + records, data))
        off += records
    seg = merge_segment(inputs, index_interval_bytes=interval)
    offsets, times = build_indexes(seg.log, 100, index_interval_bytes=interval)
    assert decode_offset_index(seg.index, 100) == offsets
    assert decode_time_index(seg.timeindex, 100) == times


def test_only_small_runs_go_without_indexes_and_manifest_rows_say_so() -> None:
    """A run under the bound has no index objects to write or delete; a closed segment and
    a big run have both; a manifest row keeps the difference, and refuses an unindexed
    closed segment (a reader would look for indexes that are not there)."""
    assert unindexed_run(1, UNINDEXED_RUN_MAX_BYTES - 1)
    assert not unindexed_run(1, UNINDEXED_RUN_MAX_BYTES)
    assert not unindexed_run(0, 10)
    small = MergedObject(1, 0, 5, 100, True, 7, indexed=False)
    assert [p.rsplit(".", 1)[1] for p in small.paths("t", 0)] == ["log", "txnindex"]
    assert MergedObject.from_json(small.to_json()) == small
    big = MergedObject(2, 0, 5, UNINDEXED_RUN_MAX_BYTES, True, 7)
    assert [p.rsplit(".", 1)[1] for p in big.paths("t", 0)] == [
        "log", "index", "timeindex", "txnindex"]
    assert big.to_json() == [2, 0, 5, UNINDEXED_RUN_MAX_BYTES, 1, 7]  # rows as before
    assert MergedObject.from_json(big.to_json()) == big
    with pytest.raises(ValueError, match="without indexes"):
        MergedObject.from_json([0, 0, 5, 100, 0, 7, 0, 0])
