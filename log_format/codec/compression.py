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
import numpy as np

from ..errors import CompressionError


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
    """Decompress a batch payload to bytes (one copy of the output; see decompress_array).

    ``max_size`` bounds the output: a payload inflating past it (a decompression bomb) raises
    CompressionError without ever holding more than about ``max_size`` bytes. Anything that
    does not decode is a CompressionError naming the codec.
    """
    out = decompress_array(codec, data, max_size)
    return out.tobytes()


def decompress_array(codec: Codec | int, data: bytes | bytearray | memoryview | np.ndarray,
                     max_size: int | None = None) -> np.ndarray:
    """Decompress a batch payload into a uint8 array, without zero-filling or copying it.

    The result may be a view of a larger buffer (untouched capacity is virtual memory only).
    Same bound and errors as ``decompress``; NONE returns a read-only view of ``data``.
    """
    try:
        codec = Codec(codec)
    except ValueError:
        raise CompressionError(f"unknown compression codec id {codec}") from None
    if codec is Codec.NONE:
        _check_size(codec, len(memoryview(data).cast("B")), max_size)
        return np.frombuffer(data, np.uint8)
    try:
        if codec is Codec.SNAPPY:
            return _snappy_decompress(data, max_size)
        module = cramjam.gzip if codec is Codec.GZIP else (
            cramjam.lz4 if codec is Codec.LZ4 else cramjam.zstd)
        if max_size is None:
            return np.frombuffer(module.decompress(data), np.uint8)
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


def _bounded(codec: Codec, module, data: bytes | bytearray | memoryview | np.ndarray,
             max_size: int) -> np.ndarray:
    """Decompress into buffers that double up to max_size + 1; overflowing that is a bomb.

    Buffers are numpy.empty (a bytearray would zero-fill each one first); the result is a
    view of the last one. Only the "output buffer too small" error retries; garbage fails on
    the first attempt.
    """
    limit = max_size + 1
    size = min(limit, max(_FIRST_GUESS_MIN, _FIRST_GUESS_RATIO * len(data)))
    while True:
        out = np.empty(size, np.uint8)
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
        return out[:n]


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


def _snappy_raw_len(block: bytes | bytearray | memoryview) -> int:
    """A raw snappy block's declared uncompressed length (read before inflating)."""
    return int(cramjam.snappy.decompress_raw_len(block))


def _snappy_decompress(data: bytes | bytearray | memoryview | np.ndarray,
                       max_size: int | None) -> np.ndarray:
    """Xerial-framed (Java clients) or a bare raw block (librdkafka), straight into one array.

    Every raw block declares its length up front, so the whole output is sized and checked
    against ``max_size`` before anything is inflated.
    """
    view = memoryview(data).cast("B")
    if bytes(view[:8]) != XERIAL_MAGIC:
        blocks = [view]
    else:
        if len(view) < len(XERIAL_HEADER):
            raise CompressionError("xerial snappy stream ends inside its header")
        blocks, pos = [], len(XERIAL_HEADER)
        while pos < len(view):
            if pos + 4 > len(view):
                raise CompressionError("xerial snappy stream ends inside a block length")
            (n,) = struct.unpack_from(">i", view, pos)
            pos += 4
            if n < 0 or pos + n > len(view):
                raise CompressionError(f"xerial snappy block length {n} runs past the payload")
            blocks.append(view[pos:pos + n])
            pos += n
    sizes = [_snappy_raw_len(block) for block in blocks]
    _check_size(Codec.SNAPPY, sum(sizes), max_size)
    out = np.empty(sum(sizes), np.uint8)
    pos = 0
    for block, size in zip(blocks, sizes, strict=True):
        if int(cramjam.snappy.decompress_raw_into(block, out[pos:pos + size])) != size:
            raise CompressionError("snappy block is shorter than its declared length")
        pos += size
    return out
