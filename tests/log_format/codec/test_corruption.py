"""Corrupt bytes always end in a typed error (a LogFormatError) or a CRC failure.

Every byte of small batches is flipped and every truncation tried, for each codec, through
the object-level decoder with and without CRC checking (so the record parser and the
decompressors see the garbage too), the whole-object walker and the dump tool. Hostile
lengths and decompression bombs must fail fast without allocating their claimed sizes.
"""

import contextlib
import io
import struct
import tracemalloc

import pytest
from txnlog.log_format.codec.compression import Codec, compress, decompress
from txnlog.log_format.codec.control import ControlType, encode_control_batch
from txnlog.log_format.codec.crc import crc32c
from txnlog.log_format.codec.dump import DumpOptions, dump_log
from txnlog.log_format.codec.records import decode_batch, encode_batch, iter_batches
from txnlog.log_format.codec.varint import encode_varint
from txnlog.log_format.errors import CompressionError, CrcMismatchError, LogFormatError

RECORDS = [(b"key", b"value-" * 6, [("h", b"x"), ("n", None)], 1000),
           (None, b"", [], 1003), (b"", None, [], 999)]


def _batches() -> dict[str, bytes]:
    out = {c.kafka_name: encode_batch(RECORDS, base_offset=7, compression=c, producer_id=1,
                                      producer_epoch=0, base_sequence=0, transactional=True)
           for c in Codec}
    out["marker"] = encode_control_batch(ControlType.ABORT, producer_id=1, producer_epoch=0,
                                         coordinator_epoch=3, base_offset=10, timestamp_ms=5)
    out["empty"] = encode_batch([], base_offset=3)
    return out


BATCHES = _batches()


def _decode_all_ways(data: bytes) -> None:
    """Run every reader over ``data``; only LogFormatError may escape."""
    for verify in (True, False):
        with contextlib.suppress(LogFormatError):
            decode_batch(data, verify_crc=verify, max_decompressed=1 << 16)
    try:
        for _ in iter_batches(data):
            pass
    except LogFormatError:
        pass
    out, err = io.StringIO(), io.StringIO()
    rc = dump_log("00000000000000000000.log", data, DumpOptions(deep_iteration=True),
                  out, err, _problems())
    assert rc in (0, 1)


def _problems():
    from txnlog.log_format.codec.dump import _Problems

    return _Problems()


@pytest.mark.parametrize("name", list(BATCHES))
def test_flip_every_byte(name: str) -> None:
    data = BATCHES[name]
    for pos in range(len(data)):
        for mask in (0xFF, 0x01, 0x80):
            bad = bytearray(data)
            bad[pos] ^= mask
            bad = bytes(bad)
            _decode_all_ways(bad)
            if pos >= 21:  # inside the CRC's range: the CRC must catch it
                with pytest.raises(LogFormatError):
                    decode_batch(bad)
            if pos >= 61:
                with pytest.raises(CrcMismatchError):
                    decode_batch(bad)


@pytest.mark.parametrize("name", list(BATCHES))
def test_truncate_at_every_length(name: str) -> None:
    data = BATCHES[name]
    for n in range(len(data)):
        _decode_all_ways(data[:n])
        with pytest.raises(LogFormatError):
            decode_batch(data[:n], verify_crc=False)


@pytest.mark.parametrize("name", [c.kafka_name for c in Codec if c is not Codec.NONE])
def test_garbage_payload_with_valid_crc(name: str) -> None:
    """A re-CRC'd batch whose compressed payload is mangled: the decompressor's error."""
    data = BATCHES[name]
    for pos in range(61, len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x5A
        struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
        with contextlib.suppress(LogFormatError):
            decode_batch(bytes(bad))


def _with_records(body: bytes, count: int, codec: Codec = Codec.NONE) -> bytes:
    head = bytearray(encode_batch([], base_offset=0))
    payload = compress(codec, body) if codec is not Codec.NONE else body
    data = head + payload
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">h", data, 21, int(codec))
    struct.pack_into(">i", data, 23, max(count - 1, 0))
    struct.pack_into(">i", data, 57, count)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


@pytest.mark.parametrize("codec", list(Codec))
def test_hostile_counts_and_lengths_do_not_allocate(codec: Codec) -> None:
    one = b"\x00" + encode_varint(0) + encode_varint(0) + b"\x01\x01\x00"
    record = encode_varint(len(one)) + one
    hostile = [
        (record, 0x7FFFFFFF),  # huge record count
        (encode_varint(0x7FFFFFFF) + one, 1),  # huge record length
        (encode_varint(-5) + one, 1),  # negative record length
        (encode_varint(8) + b"\x00\x00\x00" + encode_varint(0x7FFFFFFF) + b"xxx", 1),  # key len
        (encode_varint(8) + b"\x00\x00\x00\x01" + encode_varint(0x7FFFFFF0) + b"xx", 1),
        (encode_varint(6) + b"\x00\x00\x00\x01\x01" + encode_varint(0x7FFFFFFF), 1),  # headers
        (encode_varint(7) + b"\x00\x00\x00\x01\x01\x02" + encode_varint(-7), 1),
        (b"\xff" * 12, 1),  # over-long varint
    ]
    tracemalloc.start()
    try:
        for body, count in hostile:
            with pytest.raises(LogFormatError):
                decode_batch(_with_records(body, count, codec))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def _bomb(codec: Codec) -> bytes:
    """Hundreds of MiB of zeros in little space: one compressed chunk repeated."""
    chunk = bytes(4 << 20)
    if codec is Codec.SNAPPY:
        # Snappy inflates at most ~20x; 32 xerial blocks of 4 MiB each declare their size.
        import cramjam
        from txnlog.log_format.codec.compression import XERIAL_HEADER

        block = bytes(cramjam.snappy.compress_raw(chunk))
        return XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * 32
    return compress(codec, chunk) * 128  # concatenated gzip members / lz4 / zstd frames


@pytest.mark.parametrize("codec", [c for c in Codec if c is not Codec.NONE])
def test_decompression_bomb_is_bounded(codec: Codec) -> None:
    bomb = _bomb(codec)
    assert len(bomb) < 8 << 20
    tracemalloc.start()
    try:
        with pytest.raises(CompressionError, match=codec.kafka_name):
            decompress(codec, bomb, max_size=1 << 20)
        data = _with_records(b"", 1)[:61] + bomb
        data = bytearray(data)
        struct.pack_into(">i", data, 8, len(data) - 12)
        struct.pack_into(">h", data, 21, int(codec))
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
        with pytest.raises(LogFormatError, match="limit"):
            decode_batch(bytes(data), max_decompressed=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20


@pytest.mark.parametrize("codec", [c for c in Codec if c is not Codec.NONE])
def test_garbage_names_the_codec(codec: Codec) -> None:
    for junk in (b"", b"\x00", b"garbage-garbage-garbage", bytes(range(256))):
        try:
            out = decompress(codec, junk, max_size=1 << 16)
        except CompressionError as exc:
            assert codec.kafka_name in str(exc)
        else:  # a few tiny inputs are valid streams (e.g. raw snappy of b"")
            assert len(out) <= 1 << 16
