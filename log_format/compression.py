"""Kafka's batch compression codecs, through cramjam (one native library for all five).

The streams are Kafka's: gzip members; snappy in the xerial framing the Java client writes
(raw snappy blocks from librdkafka are read too); LZ4 frames with independent 64 KiB blocks
and no checksums, written exactly like Java's Lz4BlockOutputStream (any valid frame is read);
standard zstd frames. Decompression can be bounded, so a hostile payload cannot inflate
into gigabytes.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from .errors import CompressionError


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | Codec) -> Codec:
        """Accept a codec by Kafka's name (``compression.type`` values) or id."""
        if isinstance(name, int):
            try:
                return cls(name)
            except ValueError:
                raise CompressionError(f"unknown compression codec id {name}") from None
        key = name.strip().lower()
        if key in ("none", "uncompressed", ""):
            return cls.NONE
        try:
            return cls[key.upper()]
        except KeyError:
            raise CompressionError(
                f"unknown compression {name!r}: use one of none, gzip, snappy, lz4, zstd"
            ) from None

    @property
    def kafka_name(self) -> str:
        return self.name.lower()


XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024  # snappy-java's SnappyOutputStream default block size

# Kafka's defaults per codec (KIP-390): gzip 6 (java.util.zip default), lz4 9, zstd 3.
DEFAULT_LEVELS = {Codec.GZIP: 6, Codec.LZ4: 9, Codec.ZSTD: 3}


# Kafka's Lz4BlockOutputStream frame header: magic, FLG 0x60 (version 1, independent
# blocks, no checksums, no content size), BD 0x40 (64 KiB blocks), header checksum
# (xxhash32 of FLG+BD, second byte).
LZ4_MAGIC = b"\x04\x22\x4d\x18"
LZ4_FRAME_HEADER = LZ4_MAGIC + b"\x60\x40\x82"
LZ4_BLOCK = 64 * 1024
LZ4_UNCOMPRESSED_BIT = 0x80000000
LZ4_END_MARK = b"\x00\x00\x00\x00"

# decompress() with a bound starts from this many times the input and doubles up to it.
_FIRST_GUESS_RATIO = 8
_FIRST_GUESS_MIN = 64 * 1024


def compress(codec: Codec | int, data: bytes | bytearray | memoryview,
             level: int | None = None) -> bytes:
    """Compress one batch's record bytes as Kafka's Java client would."""
    codec = Codec(codec)
    if codec is Codec.NONE:
        return bytes(data)
    if level is None:
        level = DEFAULT_LEVELS.get(codec)
    try:
        if codec is Codec.GZIP:
            return bytes(cramjam.gzip.compress(data, level=level))
        if codec is Codec.SNAPPY:
            return _xerial_compress(data)
        if codec is Codec.LZ4:
            return _lz4_compress(data, level)
        return bytes(cramjam.zstd.compress(data, level=level))
    except (ValueError, TypeError, OverflowError) as exc:
        raise CompressionError(f"{codec.kafka_name} cannot compress at level {level}: "
                               f"{exc}") from exc


def decompress(codec: Codec | int, data: bytes | bytearray | memoryview,
               max_size: int | None = None) -> bytes:
    """Decompress a batch payload.

    ``max_size`` bounds the output: a payload inflating past it (a decompression bomb) raises
    CompressionError without ever holding more than about ``max_size`` bytes. Anything that
    does not decode is a CompressionError naming the codec.
    """
    try:
        codec = Codec(codec)
    except ValueError:
        raise CompressionError(f"unknown compression codec id {codec}") from None
    if codec is Codec.NONE:
        out = bytes(data)
        _check_size(codec, len(out), max_size)
        return out
    try:
        if codec is Codec.SNAPPY:
            return _snappy_decompress(data, max_size)
        module = cramjam.gzip if codec is Codec.GZIP else (
            cramjam.lz4 if codec is Codec.LZ4 else cramjam.zstd)
        if max_size is None:
            return bytes(module.decompress(data))
        return _bounded(codec, module, data, max_size)
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError / ValueError
        raise CompressionError(f"{codec.kafka_name} payload does not decompress: {exc}") from exc


def _check_size(codec: Codec, size: int, max_size: int | None) -> None:
    if max_size is not None and size > max_size:
        _too_big(codec, f"{size} bytes", max_size)


def _too_big(codec: Codec, size: str, max_size: int) -> None:
    raise CompressionError(
        f"{codec.kafka_name} payload decompresses to {size}, over the {max_size}-byte limit")


def _overflow_message(module) -> str:
    """What this cramjam module says when decompress_into's output buffer is too small."""
    try:
        module.decompress_into(bytes(module.compress(b"\x00" * 64)), bytearray(1))
    except Exception as exc:
        return str(exc)
    return ""


_OVERFLOW = {m: _overflow_message(m) for m in (cramjam.gzip, cramjam.lz4, cramjam.zstd)}


def _bounded(codec: Codec, module, data: bytes | bytearray | memoryview,
             max_size: int) -> bytes:
    """Decompress into buffers that double up to max_size + 1; overflowing that is a bomb.

    Only the "output buffer too small" error retries; garbage fails on the first attempt.
    """
    limit = max_size + 1
    size = min(limit, max(_FIRST_GUESS_MIN, _FIRST_GUESS_RATIO * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = module.decompress_into(data, out)
        except Exception as exc:
            known = _OVERFLOW[module]
            if known and str(exc) != known:
                raise  # garbage, not a full buffer (unknown message: keep doubling)
            if size >= limit:
                _too_big(codec, f"more than {max_size} bytes", max_size)
            size = min(limit, size * 2)
            continue
        _check_size(codec, n, max_size)
        del out[n:]
        return bytes(out)


def _lz4_compress(data: bytes | bytearray | memoryview, level: int | None) -> bytes:
    """Kafka's LZ4 frame: 64 KiB independent blocks, stored raw when they do not shrink."""
    view = memoryview(data)
    mode = "default" if level is not None and level <= 1 else "high_compression"
    parts = [LZ4_FRAME_HEADER]
    for start in range(0, len(view), LZ4_BLOCK):
        chunk = view[start:start + LZ4_BLOCK]
        if mode == "default":
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        else:
            block = bytes(cramjam.lz4.compress_block(chunk, mode=mode, compression=level,
                                                     store_size=False))
        if len(block) >= len(chunk):
            parts.append(struct.pack("<I", len(chunk) | LZ4_UNCOMPRESSED_BIT))
            parts.append(bytes(chunk))
        else:
            parts.append(struct.pack("<I", len(block)))
            parts.append(block)
    parts.append(LZ4_END_MARK)
    return b"".join(parts)


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    # A raw snappy block starts with its uncompressed length: check it before inflating.
    _check_size(Codec.SNAPPY, int(cramjam.snappy.decompress_raw_len(block)), max_size)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    """Xerial-framed (Java clients) or a bare raw block (librdkafka)."""
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_raw(view, max_size)
    if len(view) < len(XERIAL_HEADER):
        raise CompressionError("xerial snappy stream ends inside its header")
    pos = len(XERIAL_HEADER)
    out = bytearray()
    while pos < len(view):
        if pos + 4 > len(view):
            raise CompressionError("xerial snappy stream ends inside a block length")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise CompressionError(f"xerial snappy block length {n} runs past the payload")
        remaining = None if max_size is None else max_size - len(out)
        out += _snappy_raw(view[pos:pos + n], remaining)
        pos += n
    return bytes(out)
