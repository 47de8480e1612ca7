"""Hostile bytes through the compiled kernels: typed errors only, never a crash, hang or huge
allocation. numba does not bounds-check, so these run in-process: a segfault fails the suite.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from txnlog.log_format.arrow import arrow_decode
from txnlog.log_format.arrow.arrow_codec import decode_to_arrow, encode_arrow, scan_batches
from txnlog.log_format.codec.batch_header import finish_batch, pack_header
from txnlog.log_format.codec.crc import crc32c
from txnlog.log_format.errors import (
    CompressionError,
    CorruptBatchError,
    CrcMismatchError,
    LogFormatError,
    TruncatedBatchError,
    UnsupportedMagicError,
)

pytestmark = pytest.mark.timeout(300)
T0 = 1_700_000_000_000
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def small_batch(codec: int = 0) -> bytes:
    rb = pa.record_batch({
        "key": pa.array([b"k1", None, b""]),
        "value": pa.array([b"value-one", b"", None]),
        "headers": pa.array([[{"key": "a", "value": b"x"}, {"key": "b", "value": None}], None,
                             [{"key": "", "value": b""}]], HEADER_TYPE),
        "timestamp": pa.array([T0, T0 + 5, T0 - 3], pa.int64()),
    })
    return encode_arrow(rb, compression=codec, transactional=True, producer_id=1,
                        producer_epoch=0, base_sequence=0).with_base_offset(100)


def with_crc(buf: bytearray) -> bytes:
    """Recompute the CRC so the corruption reaches the record walk instead of the CRC check."""
    if len(buf) >= 21:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def attempt(data: bytes, *, verify_crc: bool = True) -> str:
    """'ok' or 'error'; any exception that is not a typed log-format error escapes."""
    try:
        scan_batches(data, verify_crc=verify_crc)
        res = decode_to_arrow(data, topic="t", partition=0, include_headers=True,
                              verify_crc=verify_crc)
        res.batch.validate(full=True)
        assert res.batch.num_rows <= len(data)
    except LogFormatError:
        return "error"
    return "ok"


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_flip_every_byte(codec: int) -> None:
    data = small_batch(codec)
    assert attempt(data) == "ok"
    outcomes = {"ok": 0, "error": 0}
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            buf = bytearray(data)
            buf[i] ^= mask
            flipped = bytes(buf)
            result = attempt(flipped)
            if 17 <= i < len(data) and i not in range(12, 16):
                # covered by the CRC: must be detected (CRC bytes themselves included)
                assert result == "error", (i, mask)
            outcomes[attempt(with_crc(buf))] += 1
            outcomes[attempt(flipped, verify_crc=False)] += 1
    assert outcomes["error"] > 0


@pytest.mark.parametrize("codec", [0, 4])
def test_truncate_at_every_length(codec: int) -> None:
    data = small_batch(codec)
    for n in range(1, len(data)):
        with pytest.raises(TruncatedBatchError if n < len(data) else LogFormatError):
            scan_batches(data[:n])
        assert attempt(data[:n]) == "error"
        # the same cut with a batch length and CRC that agree: a record-level truncation
        buf = bytearray(data[:n])
        if n >= 61:
            struct.pack_into(">i", buf, 8, n - 12)
            assert attempt(with_crc(buf)) == "error" or n == len(data)


def test_two_batches_second_corrupt_names_its_offset() -> None:
    first = small_batch()
    second = bytearray(small_batch())
    struct.pack_into(">q", second, 0, 103)
    second[-1] ^= 0x40
    with pytest.raises(CrcMismatchError, match="offset 103"):
        decode_to_arrow(first + bytes(second), topic="t", partition=0)


# ---------------------------------------------------------------- hand-made hostile records

def varint(v: int) -> bytes:
    u = (v << 1) ^ (v >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def record(*, key: bytes | None = b"k", value: bytes | None = b"v", headers: bytes = b"\x00",
           key_len: int | None = None, length: int | None = None, extra: bytes = b"") -> bytes:
    kl = (len(key) if key is not None else -1) if key_len is None else key_len
    body = (b"\x00" + varint(0) + varint(0) + varint(kl) + (key or b"")
            + varint(len(value) if value is not None else -1) + (value or b"") + headers + extra)
    return varint(len(body) if length is None else length) + body


def raw_batch(records: bytes, count: int, *, attributes: int = 0, codec_payload: bytes | None = None
              ) -> bytes:
    payload = records if codec_payload is None else codec_payload
    buf = bytearray(pack_header(
        base_offset=500, batch_length=0, crc=0, attributes=attributes,
        last_offset_delta=max(count - 1, 0), base_timestamp=T0, max_timestamp=T0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=count))
    buf += payload
    finish_batch(buf)
    return bytes(buf)


def decode(data: bytes) -> pa.RecordBatch:
    return decode_to_arrow(data, topic="t", partition=0, include_headers=True).batch


def test_well_formed_hand_made_batch_decodes() -> None:
    got = decode(raw_batch(record() + record(key=None, value=None), 2)).to_pydict()
    assert got["key"] == [b"k", None] and got["value"] == [b"v", None]
    assert got["offset"] == [500, 500]


@pytest.mark.parametrize(("records", "count", "error", "match"), [
    (record(length=2**31 - 1), 1, CorruptBatchError, "past the end"),
    (record(length=-5), 1, CorruptBatchError, "negative record length"),
    (b"\xff\xff\xff\xff\xff\x01" + record()[1:], 1, CorruptBatchError, "varint longer"),
    (record(key_len=-5), 1, CorruptBatchError, "key, value or header length"),
    (record(key_len=2**30), 1, CorruptBatchError, "key, value or header length"),
    (record(headers=varint(2**31 - 1)), 1, CorruptBatchError, "past the end|header length"),
    (record(headers=varint(-3)), 1, CorruptBatchError, "negative header count"),
    (record(headers=varint(1) + varint(-1) + varint(-1)), 1, CorruptBatchError,
     "header key length"),
    (record(headers=varint(1) + varint(1) + b"k" + varint(-7)), 1, CorruptBatchError,
     "header length"),
    (record(extra=b"\x00\x00"), 1, CorruptBatchError, "declared length"),
    (record(value=b"v" * 20) * 2, 3, CorruptBatchError, "record count mismatch"),
    (record() + record(), 1, CorruptBatchError, "Incorrect declared batch size"),
    (record(headers=varint(1) + varint(1) + b"\xff" + varint(0)), 1, CorruptBatchError, "UTF-8"),
])
def test_hostile_records(records: bytes, count: int, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        decode(raw_batch(records, count))
    assert "offset 500" in str(info.value)  # names the batch (or, for a header key, record)


def test_hostile_batch_headers() -> None:
    good = bytearray(raw_batch(record(), 1))
    huge = bytearray(good)
    struct.pack_into(">i", huge, 8, 2**31 - 1)
    with pytest.raises(CorruptBatchError, match=r"batch length|remain"):
        decode(bytes(huge))
    tiny = bytearray(good)
    struct.pack_into(">i", tiny, 8, 10)
    with pytest.raises(CorruptBatchError, match="impossible batch length"):
        decode(bytes(tiny))
    magic = bytearray(good)
    magic[16] = 1
    with pytest.raises(UnsupportedMagicError):
        decode(bytes(magic))
    count = bytearray(good)
    struct.pack_into(">i", count, 57, 2**31 - 1)
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        decode(with_crc(count))
    negative = bytearray(good)
    struct.pack_into(">i", negative, 57, -1)
    with pytest.raises(CorruptBatchError, match="negative record count"):
        decode(with_crc(negative))


def test_compressed_batch_with_a_hostile_record_count_allocates_nothing_big() -> None:
    from txnlog.log_format.codec.compression import compress
    payload = compress(4, record())
    data = raw_batch(b"", 2**31 - 1, attributes=4, codec_payload=payload)
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        decode(data)


def test_compressed_garbage_and_bombs(monkeypatch: pytest.MonkeyPatch) -> None:
    from txnlog.log_format.codec.compression import compress
    with pytest.raises((CompressionError, CorruptBatchError)):
        decode(raw_batch(b"", 1, attributes=4, codec_payload=b"\x28\xb5\x2f\xfd garbage"))
    monkeypatch.setattr(arrow_decode, "MAX_DECOMPRESSED_BATCH", 1 << 20)
    bomb = compress(4, record(value=bytes(2 << 20)))
    with pytest.raises(CorruptBatchError, match=r"limit|over"):
        decode(raw_batch(b"", 1, attributes=4, codec_payload=bomb))


def test_corrupt_control_key() -> None:
    short = raw_batch(record(key=b"\x00"), 1, attributes=0x30)
    with pytest.raises(CorruptBatchError, match="control record key"):
        scan_batches(short)
    negative_version = raw_batch(record(key=b"\xff\xff\x00\x00"), 1, attributes=0x30)
    with pytest.raises(CorruptBatchError, match="control record key"):
        scan_batches(negative_version)
    unknown = raw_batch(record(key=b"\x00\x00\x00\x09"), 1, attributes=0x30)
    assert scan_batches(unknown)["control_type"].tolist() == [9]  # tolerated, like Kafka
    assert decode(unknown).num_rows == 0
