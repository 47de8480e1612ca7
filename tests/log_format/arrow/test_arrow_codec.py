"""The Arrow codec against real Kafka client libraries, both directions, every codec.

kafka-python and aiokafka (its C extension and its pure-Python classes) are independent
implementations of the v2 format; kafka-format.md section 11 records that kafka-python's
builder reproduced a Kafka-written batch byte for byte, so it is the byte-level oracle here.
"""

from __future__ import annotations

import itertools
import struct
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from aiokafka.record.default_records import (
    _DefaultRecordBatchBuilderCython as AioBuilderC,
)
from aiokafka.record.default_records import (
    _DefaultRecordBatchBuilderPy as AioBuilderPy,
)
from aiokafka.record.default_records import _DefaultRecordBatchCython as AioBatchC
from aiokafka.record.default_records import _DefaultRecordBatchPy as AioBatchPy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.util import calc_crc32c
from txnlog.log_format.arrow.arrow_codec import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_NONE,
    AbortedFilter,
    decode_to_arrow,
    encode_arrow,
    read_schema,
    scan_batches,
)
from txnlog.log_format.arrow.arrow_encode import StreamEncoder, prepare_columns
from txnlog.log_format.errors import CrcMismatchError

CODECS = [0, 1, 2, 3, 4]
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
T0 = 1_700_000_000_000


# ---------------------------------------------------------------- helpers

def sample_records(n: int = 40, seed: int = 1) -> list[tuple]:
    """(timestamp ms, key, value, headers): null and empty keys/values, null header values."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        key = rng.bytes(int(rng.integers(1, 20)))
        key = None if i % 7 == 3 else (b"" if i % 11 == 5 else key)
        value = rng.bytes(int(rng.integers(0, 300)))
        value = None if i % 9 == 4 else (b"" if i % 13 == 6 else value)
        headers = [] if i % 3 else [(f"h{j}", None if j == 1 else rng.bytes(j * 3))
                                    for j in range(i % 4 + 1)]
        ts = T0 + int(rng.integers(-5000, 5000))  # out of order, like real producers
        out.append((ts, key, value, headers))
    return out


def to_arrow(records: list[tuple], *, ts_type: pa.DataType | None = None) -> pa.RecordBatch:
    ts_type = ts_type or pa.int64()
    ts = [r[0] for r in records]
    if pa.types.is_timestamp(ts_type):
        factor = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[ts_type.unit]
        ts = [t * factor for t in ts]
    return pa.record_batch({
        "key": pa.array([r[1] for r in records], pa.binary()),
        "value": pa.array([r[2] for r in records], pa.binary()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in r[3]] for r in records],
                            HEADER_TYPE),
        "timestamp": pa.array(ts, ts_type),
    })


def kp_batch(records: list[tuple], *, codec: int = 0, transactional: bool = False,
             pid: int = -1, epoch: int = -1, seq: int = -1, base_offset: int = 0,
             builder: type = KpBuilder) -> bytes:
    b = builder(magic=2, compression_type=codec, is_transactional=int(transactional),
                producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 24)
    for i, (ts, key, value, headers) in enumerate(records):
        assert b.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf)


def control_batch(kind: int, *, pid: int, epoch: int, offset: int, ts: int = T0,
                  coordinator_epoch: int = 0) -> bytes:
    """kafka-format.md section 11's recipe, which reproduced Kafka's 78-byte COMMIT batch."""
    b = KpBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=pid,
                  producer_epoch=epoch, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=ts, key=struct.pack(">hh", 0, kind),
             value=struct.pack(">hi", 0, coordinator_epoch), headers=[])
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, offset)
    buf[22] |= 0x20
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    assert len(buf) == 78
    return bytes(buf)


def txn_batch(n: int, *, pid: int, offset: int, epoch: int = 0, tag: bytes = b"v",
              transactional: bool = True) -> bytes:
    """n records with values tag+offset (so a test can tell which batches survived)."""
    values = pa.array([tag + b"%d" % (offset + i) for i in range(n)], pa.binary())
    enc = encode_arrow(pa.record_batch({"value": values}), producer_id=pid,
                       producer_epoch=epoch, base_sequence=0, transactional=transactional,
                       now_ms=T0)
    return enc.with_base_offset(offset)


def rows(batch: pa.RecordBatch) -> list[tuple]:
    d = batch.to_pydict()
    heads = d.get("headers", [None] * batch.num_rows)
    return [(o, t, k, v, [(h["key"], h["value"]) for h in (hs or [])])
            for o, t, k, v, hs in zip(d["offset"], millis(batch), d["key"], d["value"], heads,
                                      strict=True)]


def millis(batch: pa.RecordBatch) -> list[int]:
    """Timestamps in ms, exactly (no float round trip): they are stored as ms * 1000 us."""
    us = batch.column("timestamp").view(pa.int64()).to_numpy()
    assert (us % 1000 == 0).all()
    return (us // 1000).tolist()


def expected(records: list[tuple], base: int = 0) -> list[tuple]:
    return [(base + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(records)]


def read_kafka_python(data: bytes) -> list[tuple]:
    mr = MemoryRecords(data)
    out = []
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return out


def read_aiokafka(data: bytes, cls: type, positions: np.ndarray) -> list[tuple]:
    ends = [*positions[1:].tolist(), len(data)]
    out = []
    for pos, end in zip(positions.tolist(), ends, strict=True):
        batch = cls(data[pos:end])
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return out


# ---------------------------------------------------------------- schema

def test_read_schema_is_what_pyspark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    headers = StructField("headers", ArrayType(StructType(
        [StructField("key", StringType()), StructField("value", BinaryType())])))
    assert read_schema(False) == to_arrow_schema(StructType(fields), timezone="UTC")
    assert read_schema(True) == to_arrow_schema(StructType([*fields, headers]), timezone="UTC")
    assert all(f.nullable for f in read_schema(True))
    out = decode_to_arrow(b"", topic="t", partition=0, include_headers=True)
    assert out.batch.schema == read_schema(True) and out.batch.num_rows == 0
    assert out.next_offset == 0


# ---------------------------------------------------------------- encode -> their readers

@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("transactional", [False, True])
def test_encoded_batches_parse_in_kafka_python_and_aiokafka(codec: int,
                                                            transactional: bool) -> None:
    records = sample_records(60)
    enc = encode_arrow(to_arrow(records), producer_id=7 if transactional else -1,
                       producer_epoch=3 if transactional else -1,
                       base_sequence=10 if transactional else -1, transactional=transactional,
                       compression=codec, max_batch_bytes=2000)
    assert len(enc.positions) > 3  # several batches
    assert enc.record_count == 60 and int(enc.counts.sum()) == 60
    data = enc.with_base_offset(1000)
    want = expected(records, 1000)
    assert read_kafka_python(data) == want
    assert read_aiokafka(data, AioBatchC, enc.positions) == want
    assert read_aiokafka(data, AioBatchPy, enc.positions) == want
    # batch-level fields
    mr = MemoryRecords(data)
    before = 0
    for i in range(len(enc.positions)):
        batch = mr.next_batch()
        assert batch.base_offset == 1000 + before
        assert batch.compression_type == codec
        assert batch.is_transactional == transactional
        assert batch.producer_id == (7 if transactional else -1)
        assert batch.producer_epoch == (3 if transactional else -1)
        assert batch.base_sequence == (10 + before if transactional else -1)
        count = int(enc.counts[i])
        batch_ts = [r[0] for r in records[before:before + count]]
        assert batch.first_timestamp == batch_ts[0]
        assert batch.max_timestamp == max(batch_ts)
        assert batch.last_offset_delta == count - 1
        pos = int(enc.positions[i])
        assert data[pos + 12:pos + 16] == b"\xff\xff\xff\xff"  # PLE -1, like Java
        before += count


@pytest.mark.parametrize("codec", CODECS)
def test_their_batches_decode_identically(codec: int) -> None:
    records = sample_records(50, seed=2)
    parts, base = [], 0
    for builder in (KpBuilder, AioBuilderC, AioBuilderPy):
        chunk = records[base % 50:base % 50 + 17] or records[:17]
        parts.append(kp_batch(chunk, codec=codec, base_offset=base, builder=builder,
                              transactional=True, pid=4, epoch=0, seq=base))
        base += len(chunk)
    data = b"".join(parts)
    want = read_kafka_python(data)
    got = decode_to_arrow(data, topic="orders", partition=2, include_headers=True)
    assert rows(got.batch) == want
    assert got.next_offset == base
    d = got.batch.to_pydict()
    assert set(d["topic"]) == {"orders"} and set(d["partition"]) == {2}
    assert set(d["timestampType"]) == {0}
    got.batch.validate(full=True)


@pytest.mark.parametrize("codec", CODECS)
def test_byte_for_byte_kafka_python_builder(codec: int) -> None:
    """Same inputs, same batch splitting (batch.size), same bytes; PLE patched to Java's -1."""
    records = sample_records(80, seed=3)
    batch_size = 1500
    ours = encode_arrow(to_arrow(records), producer_id=9, producer_epoch=2, base_sequence=5,
                        transactional=True, compression=codec, max_batch_bytes=batch_size)
    theirs, i = [], 0
    while i < len(records):
        b = KpBuilder(magic=2, compression_type=codec, is_transactional=1, producer_id=9,
                      producer_epoch=2, base_sequence=5 + i, batch_size=batch_size)
        j = i
        while j < len(records):
            ts, k, v, h = records[j]
            if b.append(j - i, timestamp=ts, key=k, value=v, headers=h) is None:
                break
            j += 1
        buf = bytearray(b.build())
        buf[12:16] = b"\xff\xff\xff\xff"
        theirs.append(bytes(buf))
        i = j
    if codec == 0:
        assert bytes(ours.data) == b"".join(theirs)
    else:
        # Compressed streams depend on the library and level; kafka-python also falls back
        # to no compression when it does not shrink. Compare the split and the records.
        assert len(theirs) == len(ours.positions)
        assert read_kafka_python(bytes(ours.data)) == read_kafka_python(b"".join(theirs))


def test_byte_for_byte_aiokafka_builder_uncompressed() -> None:
    records = sample_records(30, seed=4)
    ours = encode_arrow(to_arrow(records), producer_id=1, producer_epoch=0, base_sequence=0,
                        transactional=True)
    for builder in (AioBuilderC, AioBuilderPy):  # aiokafka writes PLE -1 like Java
        assert bytes(ours.data) == kp_batch(records, transactional=True, pid=1, epoch=0,
                                            seq=0, builder=builder)


def test_encode_input_types_strings_tables_slices_and_timestamp_units() -> None:
    records = sample_records(25, seed=5)
    ref = bytes(encode_arrow(to_arrow(records), now_ms=0).data)
    for unit in ("ms", "us", "ns"):
        for tz in (None, "UTC", "America/New_York"):
            rb = to_arrow(records, ts_type=pa.timestamp(unit, tz=tz))
            assert bytes(encode_arrow(rb, now_ms=0).data) == ref
    table = pa.Table.from_batches([to_arrow(records[:10]), to_arrow(records[10:])])
    assert bytes(encode_arrow(table, now_ms=0).data) == ref
    big = to_arrow(sample_records(5, seed=9) + records + sample_records(5, seed=8))
    assert bytes(encode_arrow(big.slice(5, 25), now_ms=0).data) == ref
    large = to_arrow(records)
    large = large.set_column(1, "value", large.column("value").cast(pa.large_binary()))
    assert bytes(encode_arrow(large, now_ms=0).data) == ref
    # string values/keys are their UTF-8 bytes
    text = pa.record_batch({"key": pa.array(["k", None]), "value": pa.array(["é", None]),
                            "timestamp": pa.array([datetime(2024, 1, 1, tzinfo=UTC),
                                                   None], pa.timestamp("s", tz="UTC"))})
    enc = encode_arrow(text, now_ms=123)
    assert read_kafka_python(bytes(enc.data)) == [
        (0, 1704067200000, b"k", "é".encode(), []), (1, 123, None, None, [])]


def test_timestamps_floor_to_milliseconds_before_1970() -> None:
    rb = pa.record_batch({"value": pa.array([b"a", b"b"]),
                          "timestamp": pa.array([-1, 1999], pa.timestamp("us"))})
    got = read_kafka_python(bytes(encode_arrow(rb).data))
    assert [r[1] for r in got] == [-1, 1]


def test_missing_timestamp_and_key_use_now_and_null() -> None:
    rb = pa.record_batch({"value": pa.array([b"x", b"y"])})
    got = read_kafka_python(bytes(encode_arrow(rb, now_ms=T0).data))
    assert got == [(0, T0, None, b"x", []), (1, T0, None, b"y", [])]


def test_oversized_record_gets_its_own_batch() -> None:
    rb = pa.record_batch({"value": pa.array([b"a", b"b" * 5000, b"c"])})
    enc = encode_arrow(rb, max_batch_bytes=1000, now_ms=T0)
    assert enc.counts.tolist() == [1, 1, 1]


def test_encode_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="value"):
        encode_arrow(pa.record_batch({"key": pa.array([b"k"])}))
    with pytest.raises(TypeError):
        encode_arrow(pa.record_batch({"value": pa.array([1])}))
    bad_headers = pa.array([[{"key": None, "value": b"v"}]], HEADER_TYPE)
    with pytest.raises(ValueError, match="header key"):
        encode_arrow(pa.record_batch({"value": pa.array([b"v"]), "headers": bad_headers}))


def test_null_header_list_means_no_headers() -> None:
    rb = pa.record_batch({"value": pa.array([b"a", b"b"]),
                          "headers": pa.array([None, [{"key": "k", "value": None}]],
                                              HEADER_TYPE)})
    got = read_kafka_python(bytes(encode_arrow(rb, now_ms=T0).data))
    assert [r[4] for r in got] == [[], [("k", None)]]
    dec = decode_to_arrow(bytes(encode_arrow(rb, now_ms=T0).data), topic="t", partition=0,
                          include_headers=True)
    # Spark's Kafka source gives null (not []) for a record without headers
    assert dec.batch.column("headers").to_pylist() == [None, [{"key": "k", "value": None}]]


def test_empty_input() -> None:
    enc = encode_arrow(pa.record_batch({"value": pa.array([], pa.binary())}))
    assert enc.record_count == 0 and len(enc.data) == 0 and enc.with_base_offset(5) == b""


# ---------------------------------------------------------------- decode specifics

def test_log_append_time_uses_max_timestamp() -> None:
    buf = bytearray(kp_batch(sample_records(5), base_offset=10))
    buf[22] |= 0x08
    struct.pack_into(">q", buf, 35, T0 + 777)
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    got = decode_to_arrow(bytes(buf), topic="t", partition=0).batch
    assert set(got.column("timestampType").to_pylist()) == {1}
    assert set(millis(got)) == {T0 + 777}


def test_offset_range_trimming_and_control_markers() -> None:
    data = (txn_batch(5, pid=1, offset=0) + control_batch(1, pid=1, epoch=0, offset=5)
            + txn_batch(5, pid=1, offset=6) + control_batch(1, pid=1, epoch=0, offset=11))

    def offsets(start: int, end: int) -> tuple[list[int], int]:
        res = decode_to_arrow(data, topic="t", partition=0, start_offset=start, end_offset=end)
        return res.batch.column("offset").to_pylist(), res.next_offset

    assert offsets(0, 2**63 - 1) == ([0, 1, 2, 3, 4, 6, 7, 8, 9, 10], 12)
    assert offsets(2, 8) == ([2, 3, 4, 6, 7], 8)          # mid-batch on both ends
    assert offsets(0, 6) == ([0, 1, 2, 3, 4], 6)           # ends right after a marker
    assert offsets(3, 5) == ([3, 4], 5)                    # ends before the marker
    assert offsets(11, 12) == ([], 12)                     # only a marker: consumed
    assert offsets(12, 20) == ([], 12)                     # past everything
    assert offsets(4, 4) == ([], 4)                        # empty range


def test_scan_batches_index_fields() -> None:
    compressible = [(T0, b"k", b"x" * 200, [])] * 3
    data = (kp_batch(compressible, transactional=True, pid=5, epoch=2, seq=7, codec=4)
            + control_batch(0, pid=5, epoch=2, offset=3, ts=T0 + 1)
            + control_batch(1, pid=6, epoch=0, offset=4))
    idx = scan_batches(data)
    assert idx["position"].tolist() == [0, len(data) - 156, len(data) - 78]
    assert idx["size"].tolist()[1:] == [78, 78]
    assert idx["base_offset"].tolist() == [0, 3, 4]
    assert idx["control_type"].tolist() == [CONTROL_NONE, CONTROL_ABORT, CONTROL_COMMIT]
    assert idx["producer_id"].tolist() == [5, 5, 6]
    assert idx["producer_epoch"].tolist() == [2, 2, 0]
    assert idx["base_sequence"].tolist() == [7, -1, -1]
    assert idx["records_count"].tolist() == [3, 1, 1]
    assert idx["attributes"].tolist() == [0x14, 0x30, 0x30]
    assert idx["max_timestamp"].tolist()[1] == T0 + 1


def test_crc_mismatch_names_the_offset() -> None:
    buf = bytearray(kp_batch(sample_records(3), base_offset=42))
    buf[40] ^= 1  # inside maxTimestamp: covered by the CRC, the records stay well-formed
    with pytest.raises(CrcMismatchError, match="offset 42"):
        scan_batches(bytes(buf))
    with pytest.raises(CrcMismatchError, match="offset 42"):
        decode_to_arrow(bytes(buf), topic="t", partition=0)
    # not verified when asked not to
    assert decode_to_arrow(bytes(buf), topic="t", partition=0, verify_crc=False).batch.num_rows


# ---------------------------------------------------------------- read_committed

class Aborted:
    def __init__(self, producer_id: int, first_offset: int, last_offset: int) -> None:
        self.producer_id, self.first_offset, self.last_offset = (producer_id, first_offset,
                                                                 last_offset)


def values(res) -> list[bytes]:
    return res.batch.column("value").to_pylist()


def test_aborted_filter_interleaved_producers() -> None:
    # pid 1 aborts [0..], pid 2 commits; batches interleave
    data = (txn_batch(2, pid=1, offset=0, tag=b"a") + txn_batch(2, pid=2, offset=2, tag=b"c")
            + txn_batch(2, pid=1, offset=4, tag=b"a") + control_batch(0, pid=1, epoch=0, offset=6)
            + txn_batch(1, pid=2, offset=7, tag=b"c") + control_batch(1, pid=2, epoch=0, offset=8))
    committed = decode_to_arrow(data, topic="t", partition=0,
                                aborted=AbortedFilter([Aborted(1, 0, 6)]))
    assert values(committed) == [b"c2", b"c3", b"c7"]
    assert committed.next_offset == 9
    uncommitted = decode_to_arrow(data, topic="t", partition=0)
    assert values(uncommitted) == [b"a0", b"a1", b"c2", b"c3", b"a4", b"a5", b"c7"]


def test_aborted_then_committed_transaction_of_same_producer() -> None:
    data = (txn_batch(2, pid=1, offset=0, tag=b"a") + control_batch(0, pid=1, epoch=0, offset=2)
            + txn_batch(2, pid=1, offset=3, tag=b"c") + control_batch(1, pid=1, epoch=0, offset=5)
            + txn_batch(1, pid=1, offset=6, tag=b"a") + control_batch(0, pid=1, epoch=1, offset=7))
    res = decode_to_arrow(data, topic="t", partition=0,
                          aborted=AbortedFilter([Aborted(1, 0, 2), Aborted(1, 6, 7)]))
    assert values(res) == [b"c3", b"c4"]


def test_non_transactional_batches_of_an_aborted_pid_are_kept() -> None:
    data = (txn_batch(1, pid=1, offset=0, tag=b"a")
            + txn_batch(1, pid=1, offset=1, tag=b"i", transactional=False)
            + control_batch(0, pid=1, epoch=0, offset=2))
    res = decode_to_arrow(data, topic="t", partition=0, aborted=AbortedFilter([Aborted(1, 0, 2)]))
    assert values(res) == [b"i1"]


def test_aborted_filter_state_carries_across_objects_and_calls() -> None:
    first = txn_batch(2, pid=1, offset=0, tag=b"a") + txn_batch(2, pid=2, offset=2, tag=b"c")
    second = (txn_batch(2, pid=1, offset=4, tag=b"a") + control_batch(0, pid=1, epoch=0, offset=6)
              + txn_batch(1, pid=1, offset=7, tag=b"n"))
    filt = AbortedFilter([Aborted(1, 0, 6)])
    a = decode_to_arrow(first, topic="t", partition=0, aborted=filt)
    # a range ending mid-object: the rest is read by a second call on the same object
    b = decode_to_arrow(second, topic="t", partition=0, start_offset=a.next_offset,
                        end_offset=6, aborted=filt)
    c = decode_to_arrow(second, topic="t", partition=0, start_offset=b.next_offset, aborted=filt)
    assert (values(a), values(b), values(c)) == ([b"c2", b"c3"], [], [b"n7"])
    assert (a.next_offset, b.next_offset, c.next_offset) == (4, 6, 8)


def test_whole_txnindex_with_entries_before_the_start_is_safe() -> None:
    # the aborted txn at 0..2 is behind the read; pid 1's later committed data must be kept
    data = txn_batch(2, pid=1, offset=10, tag=b"c") + control_batch(1, pid=1, epoch=0, offset=12)
    res = decode_to_arrow(data, topic="t", partition=0, start_offset=10,
                          aborted=AbortedFilter([Aborted(1, 0, 2)]))
    assert values(res) == [b"c10", b"c11"]


def test_aborted_filter_matches_kafka_algorithm_on_random_logs() -> None:
    """Against a direct transcription of CompletedFetch over random interleavings."""
    import heapq
    rng = np.random.default_rng(7)
    for _ in range(30):
        open_txn: dict[int, int] = {}
        parts, aborted, offset, meta = [], [], 0, []
        for _ in range(40):
            pid = int(rng.integers(0, 4))
            if pid in open_txn and rng.random() < 0.3:
                kind = int(rng.integers(0, 2))
                parts.append(control_batch(kind, pid=pid, epoch=0, offset=offset))
                if kind == 0:
                    aborted.append(Aborted(pid, open_txn[pid], offset))
                meta.append((pid, offset, offset, True, kind))
                del open_txn[pid]
                offset += 1
            else:
                n = int(rng.integers(1, 3))
                open_txn.setdefault(pid, offset)
                parts.append(txn_batch(n, pid=pid, offset=offset, tag=b"p%d-" % pid))
                meta.append((pid, offset, offset + n - 1, False, -1))
                offset += n
        heap = [(a.first_offset, a.producer_id) for a in aborted]
        heapq.heapify(heap)
        pids: set[int] = set()
        want = []
        for pid, base, last, control, kind in meta:
            while heap and heap[0][0] <= last:
                pids.add(heapq.heappop(heap)[1])
            if control:
                if kind == 0:
                    pids.discard(pid)
            elif pid not in pids:
                want += [b"p%d-%d" % (pid, o) for o in range(base, last + 1)]
        data = b"".join(parts)
        filt = AbortedFilter(aborted)
        got = []
        split = int(rng.integers(1, offset))
        res = decode_to_arrow(data, topic="t", partition=0, end_offset=split, aborted=filt)
        got += values(res)
        res = decode_to_arrow(data, topic="t", partition=0, start_offset=res.next_offset,
                              aborted=filt)
        got += values(res)
        assert got == want


# ---------------------------------------------------------------- property tests

record_strategy = st.tuples(
    st.integers(-(2**41), 2**41),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_strategy, min_size=1, max_size=40),
       codec=st.sampled_from(CODECS), max_batch=st.integers(61, 3000),
       transactional=st.booleans(), base=st.integers(0, 2**40),
       headers=st.booleans())
def test_round_trip(records: list[tuple], codec: int, max_batch: int, transactional: bool,
                    base: int, headers: bool) -> None:
    rb = to_arrow(records)
    if not headers:
        rb = rb.drop_columns(["headers"])
        records = [(t, k, v, []) for t, k, v, _ in records]
    enc = encode_arrow(rb, compression=codec, max_batch_bytes=max_batch,
                       transactional=transactional, producer_id=3 if transactional else -1,
                       producer_epoch=0 if transactional else -1,
                       base_sequence=0 if transactional else -1)
    data = enc.with_base_offset(base)
    res = decode_to_arrow(data, topic="t", partition=1, include_headers=True)
    assert rows(res.batch) == expected(records, base)
    assert res.next_offset == base + len(records)
    assert read_kafka_python(data) == expected(records, base)
    start = base + len(records) // 3
    part = decode_to_arrow(data, topic="t", partition=1, start_offset=start,
                           end_offset=start + 5)
    assert part.batch.column("offset").to_pylist() == list(
        range(start, min(start + 5, base + len(records))))


def kp_split(records: list[tuple], batch_size: int) -> bytes:
    """kafka-python's builder filling batches of ``batch_size`` (PLE patched to Java's -1)."""
    theirs, i = [], 0
    while i < len(records):
        b = KpBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                      producer_epoch=-1, base_sequence=-1, batch_size=batch_size)
        j = i
        while j < len(records):
            ts, k, v, h = records[j]
            if b.append(j - i, timestamp=ts, key=k, value=v, headers=h) is None:
                break
            j += 1
        buf = bytearray(b.build())
        buf[12:16] = b"\xff\xff\xff\xff"
        theirs.append(bytes(buf))
        i = j
    return b"".join(theirs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_strategy, min_size=1, max_size=60),
       max_batch=st.integers(0, 2000))
def test_byte_for_byte_split_property(records: list[tuple], max_batch: int) -> None:
    """Any records, any batch size (tiny ones: a batch per record): kafka-python's bytes."""
    ours = encode_arrow(to_arrow(records), max_batch_bytes=max_batch)
    assert bytes(ours.data) == kp_split(records, max_batch)
    assert len(ours) == len(ours.data)


def test_encode_int32_and_int64_offsets_and_many_batches() -> None:
    records = sample_records(300, seed=12)
    rb = to_arrow(records)
    large = rb.set_column(0, "key", rb.column("key").cast(pa.large_binary()))
    for batch in (rb, large):
        for size in (0, 64, 200, 1 << 20):
            assert bytes(encode_arrow(batch, max_batch_bytes=size).data) == kp_split(
                records, size)


def test_encode_rejects_inconsistent_offsets() -> None:
    data = pa.py_buffer(b"abcdef")
    backwards = pa.Array.from_buffers(
        pa.binary(), 3, [None, pa.py_buffer(np.array([0, 4, 2, 6], np.int32)), data])
    with pytest.raises(ValueError, match="offsets"):
        encode_arrow(pa.record_batch({"value": backwards}))


@pytest.mark.parametrize("codec", [0, 4])
def test_headers_of_a_trimmed_offset_range(codec: int) -> None:
    """Headers of the kept rows only, across batch boundaries, null values and no headers."""
    records = sample_records(60, seed=7)
    data = encode_arrow(to_arrow(records), compression=codec, max_batch_bytes=800,
                        now_ms=T0).with_base_offset(100)
    res = decode_to_arrow(data, topic="t", partition=0, start_offset=113, end_offset=151,
                          include_headers=True)
    want = [None if not h else [{"key": k, "value": v} for k, v in h]
            for _, _, _, h in records[13:51]]
    assert res.batch.column("headers").to_pylist() == want
    assert res.batch.column("key").to_pylist() == [r[1] for r in records[13:51]]
    assert res.batch.column("value").to_pylist() == [r[2] for r in records[13:51]]


def test_decompression_scratch_reuse_never_aliases_results() -> None:
    """The per-thread decompression buffer is reused: earlier results must not change."""
    import threading

    def encoded(seed: int, n: int) -> tuple[list[tuple], bytes]:
        records = sample_records(n, seed=seed)
        data = encode_arrow(to_arrow(records), compression=4, max_batch_bytes=700,
                            now_ms=T0).with_base_offset(0)
        return records, data

    sets = [encoded(seed, n) for seed, n in ((21, 80), (22, 30), (23, 120))]
    results = [decode_to_arrow(data, topic="t", partition=0, include_headers=True)
               for _, data in sets]
    for (records, _), res in zip(sets, results, strict=True):
        assert res.batch.column("value").to_pylist() == [r[2] for r in records]
        assert res.batch.column("key").to_pylist() == [r[1] for r in records]
    errors: list[BaseException] = []

    def worker(records: list[tuple], data: bytes) -> None:
        try:
            for _ in range(20):
                got = decode_to_arrow(data, topic="t", partition=0).batch
                assert got.column("value").to_pylist() == [r[2] for r in records]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=s) for s in sets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_output_buffer_recycling_never_aliases_results() -> None:
    """Decoded columns live in recycled per-thread arrays: whatever still refers to an
    earlier result (the batch, a slice, one column, a numpy view, a table) keeps it intact,
    and arrays nothing refers to any more are reused (so this test exercises the pool)."""
    sets = []
    for seed in range(12):
        records = sample_records(120 - 7 * seed, seed=100 + seed)  # later ones fit earlier sets
        sets.append((records, encode_arrow(to_arrow(records), now_ms=T0).with_base_offset(0)))

    def decode(i: int) -> pa.RecordBatch:
        return decode_to_arrow(sets[i][1], topic="t", partition=0, include_headers=True).batch

    def check(i: int, keys: list, values: list, offsets: list) -> None:
        records = sets[i][0]
        assert keys == [r[1] for r in records]
        assert values == [r[2] for r in records]
        assert offsets == list(range(len(records)))

    held = {0: decode(0), 1: decode(1).slice(3), 2: decode(2).column("value"),
            3: decode(3).column("offset").to_numpy(), 4: pa.Table.from_batches([decode(4)])}
    for i in range(5, 12):  # more decodes than the pool has sets, results dropped at once
        check(i, decode(i).column("key").to_pylist(), decode(i).column("value").to_pylist(),
              decode(i).column("offset").to_pylist())
    b0, t4 = held[0], held[4]
    check(0, b0.column("key").to_pylist(), b0.column("value").to_pylist(),
          b0.column("offset").to_pylist())
    assert held[1].column("value").to_pylist() == [r[2] for r in sets[1][0]][3:]
    assert held[2].to_pylist() == [r[2] for r in sets[2][0]]
    assert held[3].tolist() == list(range(len(sets[3][0])))
    check(4, t4.column("key").to_pylist(), t4.column("value").to_pylist(),
          t4.column("offset").to_pylist())
    assert rows(b0) == expected(sets[0][0])
    held.clear()
    del b0, t4
    first = decode(11).column("value").buffers()[2].address
    assert decode(11).column("value").buffers()[2].address == first


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_strategy, min_size=1, max_size=60),
       max_batch=st.integers(0, 2000), cuts=st.lists(st.integers(0, 60), max_size=4),
       seed=st.integers(0, 2**32 - 1), headers=st.booleans(), codec=st.sampled_from(CODECS),
       prepared=st.booleans())
def test_stream_encoder_matches_one_call(records: list[tuple], max_batch: int,
                                         cuts: list[int], seed: int, headers: bool,
                                         codec: int, prepared: bool) -> None:
    """Rows appended in pieces, each piece a row selection of its own Arrow batch (as a task
    routes them), give exactly the bytes of one encode_arrow call on those rows in order;
    also when the batch's columns are prepared once and reused for every piece."""
    rb = to_arrow(records)
    if not headers:
        rb = rb.drop_columns(["headers"])
    order = np.random.default_rng(seed).permutation(len(records))
    picked = order[:max(1, len(order) * 2 // 3)]
    kw = dict(producer_id=5, producer_epoch=1, base_sequence=2**31 - 3, transactional=True,
              compression=codec, max_batch_bytes=max_batch)
    want = encode_arrow(rb.take(pa.array(picked)), **kw)
    enc = StreamEncoder(**kw)
    bounds = [0, *sorted(min(c, len(picked)) for c in cuts), len(picked)]
    source = prepare_columns(rb, T0) if prepared else rb
    for lo, hi in itertools.pairwise(bounds):
        enc.append(source, rows=picked[lo:hi], now_ms=T0)
    got = enc.finish()
    assert bytes(got.data) == bytes(want.data)
    assert got.positions.tolist() == want.positions.tolist()
    assert got.counts.tolist() == want.counts.tolist() and got.record_count == len(picked)
    assert bytes(got.stamp_base_offset(77)) == want.with_base_offset(77)
    assert bytes(got.stamp_base_offset(5)) == want.with_base_offset(5)


def test_stream_encoder_grows_and_refuses_bad_rows() -> None:
    rb = to_arrow(sample_records(50, seed=3))
    enc = StreamEncoder(buffer=np.empty(10, np.uint8), max_batch_bytes=300)
    for _ in range(3):
        enc.append(rb, rows=np.arange(49, -1, -1))
    assert enc.record_count == 150
    whole = pa.Table.from_batches([rb.take(pa.array(np.arange(49, -1, -1)))] * 3)
    assert bytes(enc.finish().data) == bytes(encode_arrow(whole, max_batch_bytes=300).data)
    with pytest.raises(ValueError, match="row number"):
        StreamEncoder().append(rb, rows=np.array([0, 50]))
    with pytest.raises(ValueError, match="row number"):
        StreamEncoder().append(prepare_columns(rb), rows=np.array([-1, 0]))
    empty = StreamEncoder().finish()
    assert empty.record_count == 0 and bytes(empty.stamp_base_offset(3)) == b""
