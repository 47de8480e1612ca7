"""Kafka's .index, .timeindex and .txnindex files: layout, tolerance, sparse building."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txnlog.log_format.codec.indexes import (
    AbortedTxn,
    OffsetEntry,
    TimeEntry,
    build_indexes,
    collect_aborted_txns,
    decode_offset_index,
    decode_time_index,
    decode_txn_index,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
    find_offset_by_timestamp,
    lookup_offset,
    lookup_timestamp,
)
from txnlog.log_format.codec.records import encode_batch, iter_batches
from txnlog.log_format.errors import CorruptIndexError


def test_txn_index_layout() -> None:
    e = AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)
    data = encode_txn_index([e])
    assert data == struct.pack(">hqqqq", 0, 7, 10, 20, 21)
    assert len(data) == 34
    assert decode_txn_index(data) == [e]
    assert decode_txn_index(b"") == []


def test_txn_index_rules() -> None:
    with pytest.raises(ValueError):
        encode_txn_index([AbortedTxn(1, 5, 9, 10), AbortedTxn(2, 3, 9, 10)])
    with pytest.raises(ValueError):
        encode_txn_index([AbortedTxn(1, 10, 9, 10)])
    with pytest.raises(CorruptIndexError):
        decode_txn_index(b"\x00" * 33)
    with pytest.raises(CorruptIndexError, match="version 1"):
        decode_txn_index(struct.pack(">hqqqq", 256, 1, 2, 3, 4))
    # Kafka reads the version as one byte: a set low byte is ignored.
    assert decode_txn_index(struct.pack(">hqqqq", 1, 1, 2, 3, 4)) == [AbortedTxn(1, 2, 3, 4)]


def test_collect_aborted_txns() -> None:
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 10, 11), AbortedTxn(3, 12, 20, 30)]
    assert collect_aborted_txns(entries, 6, 12) == ([entries[1]], True)
    assert collect_aborted_txns(entries, 6, 40) == (entries[1:], False)
    assert collect_aborted_txns(entries, 0, 11) == (entries[:2], True)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 2**62), st.integers(0, 2**40), st.integers(0, 2**20),
                          st.integers(-1, 2**62)), max_size=10))
def test_txn_index_round_trip(raw) -> None:
    entries, last = [], -1
    for pid, first, span, lso in raw:
        last = max(last + 1, first + span)
        entries.append(AbortedTxn(pid, min(first, last), last, lso))
    assert decode_txn_index(encode_txn_index(entries)) == entries


def test_offset_index_layout_and_trailing_zeros() -> None:
    entries = [OffsetEntry(100, 0), OffsetEntry(150, 4200), OffsetEntry(230, 9000)]
    data = encode_offset_index(entries, base_offset=100)
    assert data == struct.pack(">iiiiii", 0, 0, 50, 4200, 130, 9000)
    assert decode_offset_index(data, 100) == entries
    # A preallocated, not-trimmed file: zero entries after the real ones are ignored.
    assert decode_offset_index(data + b"\x00" * 80, 100) == entries
    assert decode_offset_index(b"\x00" * 80, 100) == [OffsetEntry(100, 0)]
    with pytest.raises(CorruptIndexError):
        decode_offset_index(data + b"\x00", 100)
    with pytest.raises(ValueError):
        encode_offset_index([OffsetEntry(5, 0), OffsetEntry(5, 10)], 0)


def test_time_index_layout_and_trailing_zeros() -> None:
    entries = [TimeEntry(1000, 3), TimeEntry(1500, 9)]
    data = encode_time_index(entries, base_offset=0)
    assert data == struct.pack(">qiqi", 1000, 3, 1500, 9)
    assert decode_time_index(data + b"\x00" * 24, 0) == entries
    for bad in ([TimeEntry(10, 3), TimeEntry(9, 4)], [TimeEntry(10, 3), TimeEntry(10, 4)],
                [TimeEntry(10, 3), TimeEntry(11, 3)]):
        with pytest.raises(ValueError):
            encode_time_index(bad, 0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 5000), st.integers(1, 10**6)),
                max_size=20), st.integers(0, 2**40))
def test_offset_and_time_index_round_trip(steps, base) -> None:
    off, ts = [], []
    o, p, t = 0, 0, 0
    for do, dp, dt in steps:
        o, p, t = o + do, p + dp, t + dt
        off.append(OffsetEntry(base + o, p))
        ts.append(TimeEntry(t, base + o))
    assert decode_offset_index(encode_offset_index(off, base), base) == off
    assert decode_time_index(encode_time_index(ts, base), base) == ts


def _segment(n: int, base: int = 1000, value_size: int = 900) -> bytes:
    out = b""
    for i in range(n):
        ts = 10_000 + i * 10 - (i % 3) * 25  # not monotonic
        out += encode_batch([(b"k", bytes(value_size), [], ts), (None, b"v", [], ts + 1)],
                            base_offset=base + 2 * i)
    return out


def test_build_indexes_follows_kafka_recovery_rule() -> None:
    seg = _segment(30)
    offsets, times = build_indexes(seg, 1000)
    heads = list(iter_batches(seg))
    # Reference computation of LogSegment.recover's rule, independently of the module.
    exp_off, exp_time = [], []
    last_pos, max_ts, max_off, last_t = 0, -1, 1000, -1
    for h in heads:
        if h.max_timestamp > max_ts:
            max_ts, max_off = h.max_timestamp, h.last_offset
        if h.position - last_pos > 4096:
            exp_off.append((h.last_offset, h.position))
            if max_ts > last_t:
                exp_time.append((max_ts, max_off))
                last_t = max_ts
            last_pos = h.position
    exp_time.append((max_ts, max_off))
    assert offsets == exp_off and times == exp_time
    assert len(offsets) >= 5
    # Batches are ~1 KB: an entry every 5th batch (more than 4096 bytes since the last).
    assert offsets[0] == (heads[5].last_offset, heads[5].position)
    assert decode_offset_index(encode_offset_index(offsets, 1000), 1000) == offsets
    assert decode_time_index(encode_time_index(times, 1000), 1000) == times
    assert build_indexes(b"", 0) == ([], [])


def test_lookups() -> None:
    entries = [OffsetEntry(10, 100), OffsetEntry(20, 200), OffsetEntry(30, 300)]
    assert lookup_offset(entries, 5, 0) == (0, 0)
    assert lookup_offset(entries, 10, 0) == (10, 100)
    assert lookup_offset(entries, 29, 0) == (20, 200)
    assert lookup_offset(entries, 99, 0) == (30, 300)
    times = [TimeEntry(100, 10), TimeEntry(200, 20)]
    assert lookup_timestamp(times, 50, 0) == (-1, 0)
    assert lookup_timestamp(times, 150, 0) == (100, 10)
    assert lookup_timestamp(times, 200, 0) == (200, 20)


def test_find_offset_by_timestamp_matches_scan() -> None:
    seg = _segment(30)
    offsets, times = build_indexes(seg, 1000)
    from txnlog.log_format.codec.records import decode_batches

    records = [r for b in decode_batches(seg) for r in b]
    for target in (0, 10_000, 10_050, 10_133, 10_290, 10_291, 10_292, 99_999):
        expected = next((r.offset for r in records if r.timestamp >= target), None)
        assert find_offset_by_timestamp(seg, target, 1000, offset_index=offsets,
                                        time_index=times) == expected, target
        assert find_offset_by_timestamp(seg, target, 1000) == expected
