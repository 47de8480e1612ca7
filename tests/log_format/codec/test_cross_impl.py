"""Cross-implementation checks, both directions, against kafka-python and aiokafka.

What we write must parse (valid CRC, identical records) in kafka-python, aiokafka's C
reader and aiokafka's pure-Python reader; what their builders write must decode
identically in ours; uncompressed batches must equal kafka-python's bytes exactly.
"""

import struct

import pytest
from aiokafka.record import default_records as aio_default
from aiokafka.record.control_record import ControlRecord as AioControlRecord
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords as KpMemoryRecords
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from txnlog.log_format.codec.batch_header import HEADER_SIZE
from txnlog.log_format.codec.compression import Codec, decompress
from txnlog.log_format.codec.control import (
    ControlType,
    Marker,
    control_info,
    encode_control_batch,
    encode_markers,
)
from txnlog.log_format.codec.records import decode_batch, decode_batches, encode_batch

CODECS = list(Codec)

RECORDS = [
    (b"key-0", b"value-0" * 20, [("h1", b"x"), ("h2", None), ("", b"")], 1_700_000_000_000),
    (None, b"tombstone-not" * 10, [], 1_700_000_000_007),
    (b"", None, [("only", None)], 1_699_999_999_000),  # earlier than the first: negative delta
    (b"k" * 300, b"", [], 1_700_000_000_003),
    ("\u00e9t\u00e9".encode(), b"\x00\xff" * 64, [("\u00fc", b"\x01")], 1_700_000_000_005),
] + [(f"k{i}".encode(), b"abcdefgh" * 16, [("i", str(i).encode())], 1_700_000_001_000 + i)
     for i in range(40)]

BATCH_ARGS = [
    dict(producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False),
    dict(producer_id=4242, producer_epoch=7, base_sequence=100, transactional=True),
    dict(producer_id=99, producer_epoch=0, base_sequence=0, transactional=False),  # idempotent
]


def _expected(base_offset: int = 0) -> list[tuple]:
    return [(base_offset + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(RECORDS)]


def _rows(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def _readers():
    """(name, batch factory) for each independent reader."""
    return [
        ("kafka-python", KpBatch),
        ("aiokafka-c", aio_default.DefaultRecordBatch),
        ("aiokafka-py", aio_default._DefaultRecordBatchPy),
    ]


# --------------------------------------------------------------------------- ours -> theirs

@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("args", BATCH_ARGS, ids=["plain", "transactional", "idempotent"])
def test_theirs_read_ours(codec: Codec, args: dict) -> None:
    data = encode_batch(RECORDS, base_offset=1000, compression=codec, **args)
    for name, factory in _readers():
        batch = factory(data)
        assert batch.validate_crc(), name
        assert batch.base_offset == 1000, name
        assert batch.compression_type == int(codec), name
        assert batch.is_transactional == args["transactional"], name
        assert not batch.is_control_batch, name
        assert batch.producer_id == args["producer_id"], name
        assert batch.producer_epoch == args["producer_epoch"], name
        assert batch.base_sequence == args["base_sequence"], name
        assert batch.last_offset_delta == len(RECORDS) - 1, name
        assert batch.timestamp_type == 0, name
        assert batch.first_timestamp == RECORDS[0][3], name
        assert batch.max_timestamp == max(r[3] for r in RECORDS), name
        assert _rows(batch) == _expected(1000), name


@pytest.mark.parametrize("codec", CODECS)
def test_memory_records_walk_a_whole_object(codec: Codec) -> None:
    obj = (encode_batch(RECORDS[:3], base_offset=0, compression=codec, transactional=True,
                        producer_id=5, producer_epoch=1, base_sequence=0)
           + encode_markers([Marker(ControlType.COMMIT, 5, 1, 3, 1_700_000_000_100)],
                            base_offset=3)
           + encode_batch(RECORDS[3:], base_offset=4, compression=codec))
    for cls in (KpMemoryRecords, AioMemoryRecords):
        mr = cls(obj)
        offsets, kinds = [], []
        while (batch := mr.next_batch()) is not None:
            assert batch.validate_crc()
            kinds.append(batch.is_control_batch)
            offsets += [r.offset for r in batch]
        assert kinds == [False, True, False]
        assert offsets == list(range(len(RECORDS) + 1))


@pytest.mark.parametrize("kind", [ControlType.COMMIT, ControlType.ABORT])
def test_theirs_read_our_markers(kind: ControlType) -> None:
    data = encode_control_batch(kind, producer_id=77, producer_epoch=3, coordinator_epoch=12,
                                base_offset=500, timestamp_ms=1_700_000_000_000)
    kp = KpBatch(data)
    assert kp.validate_crc() and kp.is_control_batch and kp.is_transactional
    (rec,) = list(kp)
    assert rec.type == int(kind) and rec.offset == 500
    assert rec.commit == (kind is ControlType.COMMIT) and rec.abort == (kind is ControlType.ABORT)
    for factory in (aio_default.DefaultRecordBatch, aio_default._DefaultRecordBatchPy):
        batch = factory(data)
        assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, -1)
        (rec,) = list(batch)
        parsed = AioControlRecord.parse(rec.key)
        assert parsed.type_ == int(kind) and parsed.version == 0
        assert rec.value == struct.pack(">hi", 0, 12)


# --------------------------------------------------------------------------- theirs -> ours

def _kp_build(codec: Codec, args: dict) -> bytes:
    builder = KpBuilder(2, int(codec), int(args["transactional"]), args["producer_id"],
                        args["producer_epoch"], args["base_sequence"], 1 << 22)
    for i, (k, v, h, ts) in enumerate(RECORDS):
        assert builder.append(i, ts, k, v, h) is not None
    return bytes(builder.build())


def _aio_build(cls, codec: Codec, args: dict) -> bytes:
    builder = cls(2, int(codec), int(args["transactional"]), args["producer_id"],
                  args["producer_epoch"], args["base_sequence"], 1 << 22)
    for i, (k, v, h, ts) in enumerate(RECORDS):
        assert builder.append(i, ts, k, v, h) is not None
    return bytes(builder.build())


BUILDERS = {
    "kafka-python": _kp_build,
    "aiokafka-c": lambda c, a: _aio_build(aio_default.DefaultRecordBatchBuilder, c, a),
    "aiokafka-py": lambda c, a: _aio_build(aio_default._DefaultRecordBatchBuilderPy, c, a),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("args", BATCH_ARGS, ids=["plain", "transactional", "idempotent"])
@pytest.mark.parametrize("builder", list(BUILDERS))
def test_ours_reads_theirs(builder: str, codec: Codec, args: dict) -> None:
    data = BUILDERS[builder](codec, args)
    batch = decode_batch(data)  # verifies the CRC
    h = batch.header
    assert h.compression == int(codec)  # the data compresses, so no builder drops the codec
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        args["producer_id"], args["producer_epoch"], args["base_sequence"])
    assert h.is_transactional == args["transactional"] and not h.is_control
    assert _rows(batch.records) == _expected(0)
    if args["base_sequence"] >= 0:
        assert [r.sequence for r in batch.records] == [
            args["base_sequence"] + i for i in range(len(RECORDS))]
    # Their batch re-encoded by us carries the same records, and the same bytes when
    # uncompressed (modulo partitionLeaderEpoch, which kafka-python writes as 0).
    ple = struct.unpack_from(">i", data, 12)[0]
    ours = encode_batch(batch.records, compression=codec, partition_leader_epoch=ple, **args)
    assert decode_batch(ours).records == batch.records
    if codec is Codec.NONE:
        assert ours == data
    else:
        assert ours[21:HEADER_SIZE] == data[21:HEADER_SIZE]  # attributes .. recordsCount
        assert decompress(codec, ours[HEADER_SIZE:]) == decompress(codec, data[HEADER_SIZE:])


@pytest.mark.parametrize("args", BATCH_ARGS, ids=["plain", "transactional", "idempotent"])
def test_byte_identical_to_kafka_python(args: dict) -> None:
    assert encode_batch(RECORDS, partition_leader_epoch=0, **args) == _kp_build(Codec.NONE, args)


def test_byte_identical_to_aiokafka() -> None:
    args = BATCH_ARGS[1]
    ours = encode_batch(RECORDS, **args)  # PLE -1 like the Java producer and aiokafka
    assert ours == _aio_build(aio_default.DefaultRecordBatchBuilder, Codec.NONE, args)
    assert ours == _aio_build(aio_default._DefaultRecordBatchBuilderPy, Codec.NONE, args)


def test_kafka_python_marker_recipe_matches_ours() -> None:
    """kafka-format.md section 11: build via kafka-python, patch offset, control bit, CRC."""
    from kafka.record.util import calc_crc32c

    builder = KpBuilder(2, 0, 1, 0, 0, -1, 1 << 20)
    builder.append(0, 0x18799FCD557, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, 5)
    buf[22] |= 0x20  # low byte of the int16 attributes
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    ours = encode_control_batch(ControlType.COMMIT, producer_id=0, producer_epoch=0,
                                coordinator_epoch=0, base_offset=5,
                                timestamp_ms=0x18799FCD557, partition_leader_epoch=0)
    assert ours == bytes(buf)
    assert control_info(decode_batch(bytes(buf))).control_type is ControlType.COMMIT


def test_markers_then_theirs_whole_object() -> None:
    obj = encode_markers([Marker(ControlType.ABORT, i, 0, 1, 10 + i) for i in range(4)],
                         base_offset=70)
    assert [control_info(b).control_type for b in decode_batches(obj)] == [ControlType.ABORT] * 4
    mr = KpMemoryRecords(obj)
    seen = []
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        seen += [(r.offset, r.abort) for r in batch]
    assert seen == [(70 + i, True) for i in range(4)]


# --------------------------------------------------------------------------- properties

_header = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6))
_record = st.tuples(st.none() | st.binary(max_size=24), st.none() | st.binary(max_size=48),
                    st.lists(_header, max_size=3), st.integers(0, 2**42))


@settings(max_examples=40, deadline=None)
@given(recs=st.lists(_record, min_size=1, max_size=8), codec=st.sampled_from(CODECS),
       txn=st.booleans(), pid=st.integers(-1, 2**40))
def test_property_both_directions(recs, codec, txn, pid) -> None:
    args = dict(producer_id=pid, producer_epoch=1 if pid >= 0 else -1,
                base_sequence=0 if pid >= 0 else -1, transactional=txn)
    ours = encode_batch(recs, compression=codec, **args)
    expected = [(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs)]
    for name, factory in _readers():
        batch = factory(ours)
        assert batch.validate_crc(), name
        assert _rows(batch) == expected, name
    builder = aio_default._DefaultRecordBatchBuilderPy(
        2, int(codec), int(txn), args["producer_id"], args["producer_epoch"],
        args["base_sequence"], 1 << 22)
    for i, (k, v, h, ts) in enumerate(recs):
        builder.append(i, ts, k, v, h)
    assert _rows(decode_batch(bytes(builder.build())).records) == expected
