"""The object-level v2 batch codec: Kafka's exact bytes, strict decoding, round trips."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txnlog.log_format.codec.batch_header import HEADER_SIZE
from txnlog.log_format.codec.compression import Codec
from txnlog.log_format.codec.records import (
    Record,
    decode_batch,
    decode_batches,
    encode_batch,
    iter_batches,
)
from txnlog.log_format.codec.varint import decode_varint, encode_varint
from txnlog.log_format.errors import (
    CorruptBatchError,
    CrcMismatchError,
    LogFormatError,
    TruncatedBatchError,
)

SARAMA_RECORD = bytes.fromhex("28000a00080102030406050607020608090a040b0c")


def test_sarama_record_bytes() -> None:
    # DefaultRecord example from Sarama's tests (kafka-format.md section 2): timestampDelta 5,
    # offsetDelta 0. A base timestamp 5 ms before the record needs the delete-horizon form.
    rec = Record(0, 1005, b"\x01\x02\x03\x04", b"\x05\x06\x07", [("\x08\x09\x0a", b"\x0b\x0c")])
    data = encode_batch([rec], delete_horizon_ms=1000)
    assert data[HEADER_SIZE:] == SARAMA_RECORD
    assert decode_batch(data).records == [rec]


def test_header_fields_and_sequences() -> None:
    recs = [(b"k", b"v", [("h", None), ("g", b"")], 1000), (None, b"", [], 1005),
            (b"", None, [], 999)]
    data = encode_batch(recs, base_offset=10, producer_id=5, producer_epoch=1,
                        base_sequence=0x7FFFFFFE, transactional=True, partition_leader_epoch=7)
    batch = decode_batch(data)
    h = batch.header
    assert (h.base_offset, h.last_offset, h.records_count, h.producer_id, h.producer_epoch,
            h.partition_leader_epoch) == (10, 12, 3, 5, 1, 7)
    assert (h.base_timestamp, h.max_timestamp) == (1000, 1005)
    assert h.is_transactional and not h.is_control
    assert h.last_sequence == 0
    assert [r.sequence for r in batch.records] == [0x7FFFFFFE, 0x7FFFFFFF, 0]
    assert batch.records == [
        Record(10, 1000, b"k", b"v", [("h", None), ("g", b"")], 0x7FFFFFFE),
        Record(11, 1005, None, b"", [], 0x7FFFFFFF),
        Record(12, 999, b"", None, [], 0),
    ]


def test_empty_batch_is_61_bytes() -> None:
    data = encode_batch([], base_offset=3)
    assert len(data) == 61
    batch = decode_batch(data)
    assert batch.records == [] and batch.header.base_timestamp == -1
    assert batch.header.max_timestamp == -1


def test_log_append_time_uses_max_timestamp() -> None:
    data = encode_batch([(b"a", b"b", [], 5), (b"c", b"d", [], 6)], timestamp_type=1,
                        max_timestamp=99)
    batch = decode_batch(data)
    assert batch.header.timestamp_type == 1
    assert [r.timestamp for r in batch.records] == [99, 99]


def test_compacted_gaps_and_last_offset_delta() -> None:
    recs = [Record(100, 1, b"a", b"1"), Record(103, 2, b"b", None)]
    data = encode_batch(recs, base_offset=100, last_offset_delta=9)
    batch = decode_batch(data)
    assert batch.header.last_offset == 109
    assert [r.offset for r in batch.records] == [100, 103]
    with pytest.raises(ValueError):
        encode_batch(recs, base_offset=100, last_offset_delta=2)
    with pytest.raises(ValueError):
        encode_batch([Record(5, 1, None, None), Record(5, 1, None, None)], base_offset=5)


def test_delete_horizon_bit() -> None:
    data = encode_batch([(b"k", None, [], 50)], delete_horizon_ms=40)
    batch = decode_batch(data)
    assert batch.header.has_delete_horizon and batch.header.delete_horizon_ms == 40
    assert batch.records[0].timestamp == 50


@pytest.mark.parametrize("codec", list(Codec))
def test_codecs_round_trip(codec: Codec) -> None:
    recs = [(f"k{i}".encode(), b"v" * (i % 50), [("n", str(i).encode())], 1000 + i)
            for i in range(300)]
    data = encode_batch(recs, compression=codec, level=None)
    batch = decode_batch(data)
    assert batch.header.compression == codec
    assert [(r.key, r.value, r.headers, r.timestamp) for r in batch.records] == [
        (k, v, h, t) for k, v, h, t in recs]


def test_iter_batches_whole_object_and_trailing_garbage() -> None:
    a = encode_batch([(b"a", b"1", [], 1)], base_offset=0)
    b = encode_batch([(b"b", b"2", [], 2), (b"c", b"3", [], 3)], base_offset=1)
    obj = a + b
    headers = list(iter_batches(obj))
    assert [(h.base_offset, h.position, h.size) for h in headers] == [
        (0, 0, len(a)), (1, len(a), len(b))]
    assert [r.offset for d in decode_batches(obj) for r in d] == [0, 1, 2]
    with pytest.raises(TruncatedBatchError):
        list(iter_batches(obj + b"\x00" * 5))
    with pytest.raises(TruncatedBatchError):
        list(iter_batches(obj + a[:40]))
    assert list(iter_batches(b"")) == []


def test_crc_mismatch_names_offset() -> None:
    data = bytearray(encode_batch([(b"a", b"1", [], 1)], base_offset=42))
    data[-2] ^= 1  # the value byte
    with pytest.raises(CrcMismatchError, match="offset 42") as info:
        decode_batch(bytes(data), source="t-0/00000000000000000042.log")
    assert info.value.offset == 42 and "t-0/" in str(info.value)
    assert decode_batch(bytes(data), verify_crc=False).records[0].value == b"0"


def _recrc(buf: bytearray) -> bytes:
    from txnlog.log_format.codec.crc import crc32c

    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_count_mismatch_both_ways() -> None:
    data = bytearray(encode_batch([(b"a", b"1" * 20, [], 1), (b"b", b"2" * 20, [], 2)]))
    more = bytearray(data)
    struct.pack_into(">i", more, 57, 3)
    with pytest.raises(CorruptBatchError, match="declares 3 records"):
        decode_batch(_recrc(more))
    fewer = bytearray(data)
    struct.pack_into(">i", fewer, 57, 1)
    with pytest.raises(CorruptBatchError, match="incorrect declared batch size"):
        decode_batch(_recrc(fewer))


def test_hostile_record_count_is_refused_before_work() -> None:
    data = bytearray(encode_batch([(b"a", b"1", [], 1)]))
    struct.pack_into(">i", data, 57, 0x7FFFFFFF)
    with pytest.raises(CorruptBatchError):
        decode_batch(_recrc(data))
    comp = bytearray(encode_batch([(b"a", b"1", [], 1)], compression=Codec.ZSTD))
    struct.pack_into(">i", comp, 57, 0x7FFFFFFF)
    with pytest.raises(CorruptBatchError):
        decode_batch(_recrc(comp))


def test_hostile_varint_lengths() -> None:
    # A key length of 2^31-1 inside a small record must fail, not allocate.
    body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(0x7FFFFFFF)
    rec = encode_varint(len(body)) + body
    data = bytearray(encode_batch([]))
    data += rec
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">i", data, 57, 1)
    with pytest.raises(LogFormatError):
        decode_batch(_recrc(data))


def test_bad_header_key_utf8() -> None:
    data = bytearray(encode_batch([(b"k", b"v", [("\u00e9", b"x")], 1)]))
    i = bytes(data).index("\u00e9".encode())
    data[i] = 0xFF
    with pytest.raises(CorruptBatchError, match="UTF-8"):
        decode_batch(_recrc(data))


# --------------------------------------------------------------------------- properties

headers_st = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)),
                      max_size=3)
record_st = st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=40),
                      headers_st, st.integers(0, 2**41))


@settings(max_examples=60, deadline=None)
@given(recs=st.lists(record_st, max_size=12), base=st.integers(0, 2**40),
       pid=st.integers(-1, 2**40), seq=st.integers(-1, 2**31 - 1),
       codec=st.sampled_from(list(Codec)), txn=st.booleans())
def test_round_trip_property(recs, base, pid, seq, codec, txn) -> None:
    data = encode_batch(recs, base_offset=base, producer_id=pid, producer_epoch=3,
                        base_sequence=seq, transactional=txn, compression=codec)
    batch = decode_batch(data)
    assert batch.header.size == len(data)
    assert [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in batch.records] == [
        (k, v, h, t, base + i) for i, (k, v, h, t) in enumerate(recs)]
    assert encode_batch(batch.records, base_offset=base, producer_id=pid, producer_epoch=3,
                        base_sequence=seq, transactional=txn, compression=Codec.NONE) == \
        encode_batch(recs, base_offset=base, producer_id=pid, producer_epoch=3,
                     base_sequence=seq, transactional=txn)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(value: int) -> None:
    enc = encode_varint(value)
    assert decode_varint(enc, 0) == (value, len(enc))


def test_varint_known_bytes() -> None:
    assert [encode_varint(v) for v in (0, -1, 1, 20, 64)] == [
        b"\x00", b"\x01", b"\x02", b"\x28", b"\x80\x01"]


def test_varint_limits() -> None:
    # Ten bytes whose high bits overflow 64 bits wrap like Java's long, never grow past it.
    value, end = decode_varint(b"\xff" * 9 + b"\x7f", 0)
    assert end == 10 and -(2**63) <= value < 2**63
    with pytest.raises(CorruptBatchError):
        decode_varint(b"\xff" * 11, 0)
    with pytest.raises(TruncatedBatchError):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(ValueError):
        encode_varint(2**63)


def test_out_of_range_header_fields_are_value_errors() -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_batch([], producer_epoch=40_000)
    with pytest.raises(ValueError):
        encode_batch([(b"k", b"v", [], 1)], timestamp_type=2)
    with pytest.raises(TypeError):
        encode_batch([(1, b"v", [], 1)])
