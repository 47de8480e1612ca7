"""Zigzag base-128 varints (Kafka's ByteUtils.writeVarint/readVarint), scalar versions.

These serve the small paths (control records, the coordinator's own log, tests). The bulk
record paths are compiled kernels in ``arrow_codec``.
"""

from __future__ import annotations

from ..errors import CorruptBatchError, TruncatedBatchError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


def zigzag(value: int) -> int:
    """Signed 64-bit value -> unsigned zigzag form."""
    return (value << 1) ^ (value >> 63)


def unzigzag(value: int) -> int:
    """Unsigned zigzag form (< 2**64) -> signed value."""
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Zigzag varint for a signed 32- or 64-bit value."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varint value {value} does not fit a signed 64-bit integer")
    v = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int,
                  max_bytes: int = MAX_VARLONG_BYTES) -> tuple[int, int]:
    """Return (value, new position); raises on truncation or an over-long varint."""
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise TruncatedBatchError("buffer ends inside a varint", position=pos)
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            # Bits past 64 are dropped as Java's long arithmetic drops them.
            return unzigzag(result & 0xFFFFFFFFFFFFFFFF), pos + i + 1
        shift += 7
    raise CorruptBatchError(f"varint longer than {max_bytes} bytes", position=pos)


def encode_unsigned_varint(value: int) -> bytes:
    """Unsigned varint (no zigzag), used by Kafka's flexible-version messages."""
    if not 0 <= value < (1 << 32):
        raise ValueError(f"unsigned varint value {value} is outside 0..2^32-1")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= len(buf):
            raise TruncatedBatchError("buffer ends inside a varint", position=pos)
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise CorruptBatchError("unsigned varint longer than 5 bytes", position=pos)
