"""Arrow columns of one partition -> Kafka v2 batches, byte for byte what Kafka's producer builds.

Every length is known up front, so one compiled pass (_encode_kernels.encode) sizes each
record, splits batches as Kafka's producer does and writes them; Python only compresses and
checksums per batch. Batches carry baseOffset 0: the coordinator assigns offsets later and
``EncodedRecords.with_base_offset`` stamps them without re-encoding (baseOffset is outside the
CRC).
"""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import _encode_kernels as E
from .batch_header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    TRANSACTIONAL_FLAG,
    finish_batch,
)
from .compression import Codec, compress
from .crc import crc32c

_UNIT_DIVISORS = {"us": 1000, "ns": 1_000_000}
_EMPTY_I32 = np.zeros(1, np.int32)
_EMPTY_U8 = np.zeros(1, np.uint8)


def _ro(a: np.ndarray) -> np.ndarray:
    """A read-only view: numba compiles one signature per array layout *and* writability, so
    the kernel sees every array read-only (Arrow's buffers are) and compiles once, not once
    per mix of present and missing columns."""
    v = a.view()
    v.flags.writeable = False
    return v


class EncodedRecords:
    """Whole v2 batches (baseOffset 0, valid CRCs) of one partition's records.

    The bytes are kept in the buffer the kernel wrote; ``data`` converts them to a bytearray
    on first access only (a bytearray is zero-filled on allocation, a full extra pass over
    the data that the hot path, ``with_base_offset``, does not need).
    """

    __slots__ = ("_buf", "_data", "counts", "positions", "record_count")

    def __init__(self, data: bytearray | np.ndarray, positions: np.ndarray, counts: np.ndarray,
                 record_count: int) -> None:
        self._buf = data
        self._data = data if isinstance(data, bytearray) else None
        self.positions = positions  # int64 start of each batch in data
        self.counts = counts  # int32 records per batch
        self.record_count = record_count

    @property
    def data(self) -> bytearray:
        if self._data is None:
            self._data = bytearray(self._buf)
            self._buf = self._data
        return self._data

    def __len__(self) -> int:
        """Size in bytes of all batches."""
        return len(self._buf)

    def __repr__(self) -> str:
        return (f"EncodedRecords({len(self.positions)} batches, {self.record_count} records, "
                f"{len(self)} bytes)")

    def with_base_offset(self, base: int) -> bytes:
        """The batches with batch i at offset base + sum(counts[:i]); CRCs stay valid."""
        if not len(self.positions):
            return b""
        bases = base + np.concatenate(([0], np.cumsum(self.counts[:-1], dtype=np.int64)))
        ends = [*self.positions[1:].tolist(), len(self._buf)]
        view = memoryview(self._buf)
        parts: list[Any] = []
        for pos, end, off in zip(self.positions.tolist(), ends, bases.tolist(), strict=True):
            parts.append(struct.pack(">q", off))
            parts.append(view[pos + 8:end])
        return b"".join(parts)


def encode_arrow(columns: pa.RecordBatch | pa.Table, *, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
                 compression: Codec | int | str = Codec.NONE, level: int | None = None,
                 max_batch_bytes: int = 1 << 20, now_ms: int | None = None) -> EncodedRecords:
    """Encode one partition's records: ``value`` (binary|string, nulls are tombstones), and
    optional ``key``, ``headers`` (list<struct<key string, value binary>>) and ``timestamp``
    (Arrow timestamp of any unit/tz, or int64 ms; null or missing -> ``now_ms``).

    Batches hold at most ``max_batch_bytes`` (header included; a larger record gets a batch
    of its own), in uncompressed bytes, as Kafka's producer fills ``batch.size``.
    """
    codec = Codec.parse(compression)
    names = columns.schema.names
    if "value" not in names:
        raise ValueError("encode_arrow needs a 'value' column (binary or string)")
    n = columns.num_rows
    if n == 0:
        return EncodedRecords(bytearray(), np.empty(0, np.int64), np.empty(0, np.int32), 0)
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    v_off, v_valid, v_data = _binary_parts(_column(columns, "value"), "value")
    key = _column(columns, "key")
    if key is None:
        k_off, k_valid, k_data = np.zeros(n + 1, np.int32), np.zeros(n, np.uint8), _EMPTY_U8
    else:
        k_off, k_valid, k_data = _binary_parts(key, "key")
    ts = _timestamps_ms(_column(columns, "timestamp"), n, now_ms)
    headers = _column(columns, "headers")
    has_headers = headers is not None
    if has_headers:
        h_list_off, h_list_valid, (hk_off, _, hk_data), (hv_off, hv_valid, hv_data) = \
            _header_parts(headers)
    else:
        h_list_off, h_list_valid = np.zeros(1, np.int64), _EMPTY_U8
        hk_off = hv_off = _EMPTY_I32
        hk_data = hv_valid = hv_data = _EMPTY_U8
    attributes = int(codec) | (TRANSACTIONAL_FLAG if transactional else 0)
    args = (*map(_ro, (v_off, v_valid, v_data, k_off, k_valid, k_data, ts)), has_headers,
            *map(_ro, (h_list_off, h_list_valid, hk_off, hk_data, hv_off, hv_valid, hv_data)),
            max(int(max_batch_bytes), 0), attributes, int(producer_id), int(producer_epoch),
            int(base_sequence))
    positions = np.empty(n + 1, np.int64)
    firsts = np.empty(n + 1, np.int64)
    # Written in place into an upper bound (untouched capacity is virtual memory only):
    # a record takes at most RECORD_OVERHEAD bytes besides its data, a batch HEADER_SIZE
    # more. Batch count: two consecutive batches hold more than max_batch_bytes - HEADER_SIZE
    # - RECORD_OVERHEAD record bytes together, or the second one's first record would have
    # joined the first batch.
    data_bytes = (_span(k_off) + _span(v_off) + _span(hk_off) + _span(hv_off)
                  + E.HEADER_OVERHEAD * (len(hk_off) - 1))
    records_bound = data_bytes + E.RECORD_OVERHEAD * n
    room = max(int(max_batch_bytes) - HEADER_SIZE - E.RECORD_OVERHEAD, 1)
    batches_bound = min(n, 2 * records_bound // room + 2)
    out = np.empty(records_bound + HEADER_SIZE * batches_bound, np.uint8)
    status, row, nb, size = E.encode(out, positions, firsts, *args)
    if status == E.E_RECORD_TOO_LARGE:
        raise ValueError(f"record {row} is too large for a Kafka batch (int32 lengths)")
    if status == E.E_BAD_OFFSETS:
        raise ValueError(f"record {row}: Arrow offsets point outside their data buffer")
    if status == E.E_CAPACITY:  # spans undercount only if offsets decrease (invalid Arrow)
        raise ValueError(f"record {row}: Arrow offsets are not monotonic")
    if status != E.OK:
        raise AssertionError(f"encode kernel status {status}")
    counts = np.diff(firsts[:nb + 1]).astype(np.int32)
    ends = positions[1:nb + 1].tolist()
    starts = positions[:nb].tolist()
    view = memoryview(out)
    if codec is Codec.NONE:
        for pos, end in zip(starts, ends, strict=True):
            struct.pack_into(">I", view, pos + CRC_OFFSET,
                             crc32c(view[pos + ATTRIBUTES_OFFSET:end]))
        return EncodedRecords(out[:size], positions[:nb].copy(), counts, n)
    data = bytearray()
    positions_out = np.empty(nb, np.int64)
    for b, (pos, end) in enumerate(zip(starts, ends, strict=True)):
        positions_out[b] = len(data)
        batch = bytearray(view[pos:pos + HEADER_SIZE])  # attributes carry the codec already
        batch += compress(codec, view[pos + HEADER_SIZE:end], level)
        finish_batch(batch)
        data += batch
    return EncodedRecords(data, positions_out, counts, n)


def _span(off: np.ndarray) -> int:
    """Data bytes an offsets array spans (an upper bound on its non-null values' bytes)."""
    return int(off[-1]) - int(off[0]) if len(off) > 1 else 0


def _column(columns: pa.RecordBatch | pa.Table, name: str) -> pa.Array | None:
    if name not in columns.schema.names:
        return None
    col = columns.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col


def _validity(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), np.uint8)
    return arr.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)


def _binary_parts(arr: pa.Array, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(int64 offsets, uint8 validity, data) of a binary-like array, slices honoured."""
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        dtype = np.int32
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        dtype = np.int64
    elif (pa.types.is_binary_view(t) or pa.types.is_string_view(t)
          or pa.types.is_fixed_size_binary(t)):
        return _binary_parts(arr.cast(pa.large_binary()), what)
    else:
        raise TypeError(f"column {what!r} must be binary or string, not {t}")
    n = len(arr)
    bufs = arr.buffers()
    if n == 0 or bufs[1] is None:
        return np.zeros(n + 1, np.int32), np.zeros(n, np.uint8), _EMPTY_U8
    off = np.frombuffer(bufs[1], dtype)[arr.offset:arr.offset + n + 1]  # kernels take both
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else _EMPTY_U8
    return off, _validity(arr), data


def _timestamps_ms(col: pa.Array | None, n: int, now_ms: int) -> np.ndarray:
    if col is None:
        return np.full(n, now_ms, np.int64)
    t = col.type
    if pa.types.is_timestamp(t):
        raw = col.view(pa.int64())
    elif pa.types.is_integer(t):
        raw = col.cast(pa.int64())
    else:
        raise TypeError(f"column 'timestamp' must be a timestamp or int64 ms, not {t}")
    ms = pc.fill_null(raw, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if pa.types.is_timestamp(t) and t.unit != "ms":
        # floor division, like Spark's DateTimeUtils.toMillis (Math.floorDiv), before 1970 too
        ms = ms * 1000 if t.unit == "s" else ms // _UNIT_DIVISORS[t.unit]
    if raw.null_count:
        ms = np.where(_validity(raw).view(bool), ms, np.int64(now_ms))
    return ms


def _header_parts(col: pa.Array) -> tuple:
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) \
            or not pa.types.is_struct(t.value_type):
        raise TypeError(f"column 'headers' must be list<struct<key string, value binary>>, "
                        f"not {t}")
    struct_type = t.value_type
    names = [struct_type.field(i).name for i in range(struct_type.num_fields)]
    if "key" not in names or "value" not in names:
        raise TypeError(f"header structs need fields 'key' and 'value', not {struct_type}")
    list_off = np.asarray(col.offsets).astype(np.int64)
    children = col.values.flatten()  # honours the struct array's own offset
    hkeys = children[names.index("key")]
    hvals = children[names.index("value")]
    if hkeys.null_count:
        raise ValueError("a header key is null: Kafka header keys are non-null strings")
    return list_off, _validity(col), _binary_parts(hkeys, "headers.key"), \
        _binary_parts(hvals, "headers.value")
