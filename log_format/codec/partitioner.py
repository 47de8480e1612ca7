"""Kafka's default partitioner for keyed records: toPositive(murmur2(key)) % partitions.

Kept bit-exact with Kafka's ``Utils.murmur2`` (32-bit wrapping arithmetic, little-endian
words, signed int32 result), so Spark and any Kafka producer agree on where a key lives.
Null keys are not hashed: Kafka places them with its sticky partitioner instead.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..arrow.kernel_loading import kernel

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 of ``data`` as a signed int32 (scalar path for single keys)."""
    data = bytes(data)
    length = len(data)
    h = (SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * M) & _MASK
        k ^= k >> R
        k = (k * M) & _MASK
        h = (h * M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * M) & _MASK
    h ^= h >> 13
    h = (h * M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's Utils.toPositive: clear the sign bit (not abs)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


@kernel(entry=True, cache=True, nogil=True)
def _partitions(off, valid, data, num_partitions, out):
    # int64 arithmetic masked to 32 bits: numba widens uint32 products, so wrap by hand
    # (the low 32 bits of a product do not depend on any overflow above them).
    n = out.shape[0]
    for i in range(n):
        if valid[i] == 0:
            out[i] = -1
            continue
        start = off[i]
        length = off[i + 1] - start
        if start < 0 or length < 0 or off[i + 1] > data.shape[0]:
            return i
        h = (SEED ^ length) & _MASK
        whole = length & ~3
        for j in range(0, whole, 4):
            p = start + j
            k = (np.int64(data[p]) | (np.int64(data[p + 1]) << 8)
                 | (np.int64(data[p + 2]) << 16) | (np.int64(data[p + 3]) << 24))
            k = (k * M) & _MASK
            k ^= k >> R
            k = (k * M) & _MASK
            h = (h * M) & _MASK
            h ^= k
        rest = length & 3
        tail = start + whole
        if rest == 3:
            h ^= np.int64(data[tail + 2]) << 16
        if rest >= 2:
            h ^= np.int64(data[tail + 1]) << 8
        if rest >= 1:
            h ^= np.int64(data[tail])
            h = (h * M) & _MASK
        h ^= h >> 13
        h = (h * M) & _MASK
        h ^= h >> 15
        out[i] = (h & 0x7FFFFFFF) % num_partitions
    return -1


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> np.ndarray:
    """Partition of every key (binary, string or their large variants); -1 for null keys."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    t = keys.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        dtype = np.int32
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        dtype = np.int64
    elif pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        return partitions_for_keys(keys.cast(pa.large_binary()), num_partitions)
    else:
        raise TypeError(f"keys must be binary or string, not {t}")
    n = len(keys)
    out = np.empty(n, np.int32)
    if n == 0:
        return out
    bufs = keys.buffers()
    off = np.frombuffer(bufs[1], dtype)[keys.offset:keys.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(1, np.uint8)
    if data.flags.writeable:
        # Read-only whatever the buffer (Arrow IPC from Spark is read-only, a batch built
        # in Python is not): writability is part of the kernel's type, and one signature is
        # what warm_up() compiles, numba caches and the ahead-of-time module takes.
        data = data.view()
        data.flags.writeable = False
    if keys.null_count:
        valid = keys.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)
    else:
        valid = np.ones(n, np.uint8)
    bad = _partitions(off, valid, data, num_partitions, out)
    if bad >= 0:
        raise ValueError(f"key {bad}: Arrow offsets point outside the data buffer")
    return out

