"""Kafka's batch compression codecs, through cramjam (one native library for all five).

The streams are Kafka's: gzip members; snappy in the xerial framing the Java client writes
(raw snappy blocks from librdkafka are read too); LZ4 frames with independent 64 KiB blocks
and no content checksum (KIP-57); standard zstd frames.
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


def compress(codec: Codec | int, data: bytes | bytearray | memoryview,
             level: int | None = None) -> bytes:
    """Compress one batch's record bytes as Kafka would."""
    codec = Codec(codec)
    if codec is Codec.NONE:
        return bytes(data)
    if level is None:
        level = DEFAULT_LEVELS.get(codec)
    if codec is Codec.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec is Codec.SNAPPY:
        return _xerial_compress(data)
    if codec is Codec.LZ4:
        comp = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        comp.compress(data)
        return bytes(comp.finish())
    return bytes(cramjam.zstd.compress(data, level=level))


def decompress(codec: Codec | int, data: bytes | bytearray | memoryview,
               max_size: int | None = None) -> bytes:
    """Decompress a batch payload; ``max_size`` bounds the output (decompression bombs)."""
    try:
        codec = Codec(codec)
    except ValueError:
        raise CompressionError(f"unknown compression codec id {codec}") from None
    try:
        if codec is Codec.NONE:
            out = bytes(data)
        elif codec is Codec.GZIP:
            out = bytes(cramjam.gzip.decompress(data))
        elif codec is Codec.SNAPPY:
            out = _snappy_decompress(data)
        elif codec is Codec.LZ4:
            out = bytes(cramjam.lz4.decompress(data))
        else:
            out = bytes(cramjam.zstd.decompress(data))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError / ValueError
        raise CompressionError(f"{codec.kafka_name} payload does not decompress: {exc}") from exc
    if max_size is not None and len(out) > max_size:
        raise CompressionError(
            f"{codec.kafka_name} payload decompresses to {len(out)} bytes, over the "
            f"{max_size}-byte limit")
    return out


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos = 16
    out = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CompressionError("xerial snappy stream ends inside a block length")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise CompressionError(f"xerial snappy block length {n} runs past the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos:pos + n])))
        pos += n
    return b"".join(out)
