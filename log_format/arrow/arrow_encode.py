"""Arrow columns of one partition -> Kafka v2 batches, byte for byte what Kafka's producer builds.

Every length is known up front, so one compiled pass (_encode_kernels.encode) sizes each
record, splits batches as Kafka's producer does and writes them; Python only compresses and
checksums per batch. Batches carry baseOffset 0: the coordinator assigns offsets later and
``EncodedRecords.with_base_offset`` (a copy) or ``stamp_base_offset`` (in place) stamps them
without re-encoding (baseOffset is outside the CRC). ``StreamEncoder`` takes a partition's rows
batch by batch, by row numbers, so a task routing rows to partitions copies them only once.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np
import pyarrow as pa

from ..codec.batch_header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    TRANSACTIONAL_FLAG,
    finish_batch,
)
from ..codec.compression import Codec, compress
from ..codec.crc import crc32c
from . import _encode_kernels as E

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


_NO_ROWS = _ro(np.zeros(0, np.int64))
# Kernel arguments for a call that appends no rows (finish): the common layout (int32
# offsets, read-only), so it needs no signature of its own.
_NO_COLUMNS = (*map(_ro, (_EMPTY_I32, _EMPTY_U8, _EMPTY_U8, _EMPTY_I32, _EMPTY_U8, _EMPTY_U8,
                          np.zeros(0, np.int64))), False,
               *map(_ro, (np.zeros(1, np.int64), _EMPTY_U8, _EMPTY_I32, _EMPTY_U8, _EMPTY_I32,
                          _EMPTY_U8, _EMPTY_U8)))


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

    def _batch_bases(self, base: int) -> np.ndarray:
        """Each batch's base offset when the first one starts at ``base``."""
        return base + np.concatenate(([0], np.cumsum(self.counts[:-1], dtype=np.int64)))

    def stamp_base_offset(self, base: int) -> memoryview:
        """Like ``with_base_offset``, but stamps the offsets into the encoded buffer itself and
        returns a view of it: no copy of the (segment-sized) data. Stamping again with another
        base rewrites them; views handed out before see the change."""
        buf = self._buf
        if not len(self.positions):
            return memoryview(b"")
        bases = self._batch_bases(base)
        arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        arr[self.positions[:, None] + np.arange(8)] = bases.astype(">i8").view(np.uint8) \
            .reshape(-1, 8)
        return memoryview(buf)

    def with_base_offset(self, base: int) -> bytes:
        """The batches with batch i at offset base + sum(counts[:i]); CRCs stay valid."""
        if not len(self.positions):
            return b""
        bases = self._batch_bases(base)
        ends = [*self.positions[1:].tolist(), len(self._buf)]
        view = memoryview(self._buf)
        parts: list[Any] = []
        for pos, end, off in zip(self.positions.tolist(), ends, bases.tolist(), strict=True):
            parts.append(struct.pack(">q", off))
            parts.append(view[pos + 8:end])
        return b"".join(parts)


class PreparedColumns:
    """One Arrow batch's columns as the encode kernel takes them, extracted once so that a
    batch whose rows go to several partitions is not taken apart once per partition."""

    __slots__ = ("_k_off", "_row_bytes", "_v_off", "cols", "header_bytes", "num_rows",
                 "span_bytes")

    def __init__(self, num_rows: int, cols: tuple, k_off: np.ndarray, v_off: np.ndarray,
                 header_bytes: int) -> None:
        self.num_rows = num_rows
        self.cols = cols
        self._k_off, self._v_off = k_off, v_off
        self.span_bytes = _span(k_off) + _span(v_off)
        self.header_bytes = header_bytes  # headers' whole span: a bound for any selection
        self._row_bytes: np.ndarray | None = None

    @property
    def row_bytes(self) -> np.ndarray:
        """int64 key + value data bytes of each row (computed on first use, once)."""
        if self._row_bytes is None:
            self._row_bytes = _row_bytes(self._k_off) + _row_bytes(self._v_off)
        return self._row_bytes


def prepare_columns(columns: pa.RecordBatch | pa.Table, now_ms: int | None = None
                    ) -> PreparedColumns:
    """``columns`` (see ``encode_arrow``) ready for ``StreamEncoder.append``; null or missing
    timestamps become ``now_ms`` (default: now)."""
    names = columns.schema.names
    if "value" not in names:
        raise ValueError("encode_arrow needs a 'value' column (binary or string)")
    n = columns.num_rows
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
    cols = (*map(_ro, (v_off, v_valid, v_data, k_off, k_valid, k_data, ts)), has_headers,
            *map(_ro, (h_list_off, h_list_valid, hk_off, hk_data, hv_off, hv_valid,
                       hv_data)))
    header_bytes = _span(hk_off) + _span(hv_off) + E.HEADER_OVERHEAD * (len(hk_off) - 1)
    return PreparedColumns(n, cols, k_off, v_off, header_bytes)


class StreamEncoder:
    """One partition's records, appended Arrow batch by Arrow batch, as one run of v2 batches.

    A Spark task hands rows in 10,000-row Arrow batches and routes them to partitions; each
    partition's rows are appended straight from the task's batch (``rows`` selects them), so
    the only copy of the data is the kernel's write of Kafka's bytes. Kafka batches span
    appends exactly as if all rows had come in one call (the kernel carries the open batch
    across calls), so ``encode_arrow`` is one append and ``finish``.

    ``buffer``: a uint8 array to write into (e.g. one whose write finished, so its pages are
    already faulted in); it grows (one copy) when an append may not fit.
    """

    def __init__(self, *, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, transactional: bool = False,
                 compression: Codec | int | str = Codec.NONE, level: int | None = None,
                 max_batch_bytes: int = 1 << 20, buffer: np.ndarray | None = None) -> None:
        self.codec = Codec.parse(compression)
        self.level = level
        self.max_batch_bytes = max(int(max_batch_bytes), 0)
        self.attributes = int(self.codec) | (TRANSACTIONAL_FLAG if transactional else 0)
        self.producer_id = int(producer_id)
        self.producer_epoch = int(producer_epoch)
        self.base_sequence = int(base_sequence)
        self._out = buffer if buffer is not None else _EMPTY_U8
        self._positions = np.empty(1, np.int64)
        self._firsts = np.empty(1, np.int64)
        self._state = np.zeros(E.STATE_SIZE, np.int64)
        self._finished = False

    @property
    def record_count(self) -> int:
        return int(self._state[E.S_COUNT])

    @property
    def buffer(self) -> np.ndarray | None:
        """The array written into (None before the first append): the uncompressed result
        of ``finish`` is a view of it, so reuse it only once that result is done with."""
        return self._out if self._out is not _EMPTY_U8 else None

    @property
    def nbytes(self) -> int:
        """Bytes written so far (the open batch's header included)."""
        return int(self._state[E.S_POS])

    def append(self, columns: pa.RecordBatch | pa.Table | PreparedColumns,
               rows: np.ndarray | None = None, now_ms: int | None = None) -> None:
        """Append ``columns`` (all rows, or the row numbers in ``rows``, in that order); see
        ``encode_arrow`` for the columns. ``columns`` may be ``prepare_columns``' result, to
        append rows of one batch to several encoders with its columns extracted once (then
        ``now_ms`` is the one given to ``prepare_columns``)."""
        self._run(columns, rows, now_ms, close=False)

    def finish(self) -> EncodedRecords:
        """Close the open batch, checksum (and compress) every batch; the encoder is done."""
        if self._finished:
            raise RuntimeError("StreamEncoder.finish() called twice")
        self._run(None, None, None, close=True)
        self._finished = True
        nb, size, n = int(self._state[E.S_NB]), self.nbytes, self.record_count
        if n == 0:
            return EncodedRecords(bytearray(), np.empty(0, np.int64), np.empty(0, np.int32), 0)
        counts = np.diff(self._firsts[:nb + 1]).astype(np.int32)
        ends = self._positions[1:nb + 1].tolist()
        starts = self._positions[:nb].tolist()
        out = self._out
        view = memoryview(out)
        if self.codec is Codec.NONE:
            for pos, end in zip(starts, ends, strict=True):
                struct.pack_into(">I", view, pos + CRC_OFFSET,
                                 crc32c(view[pos + ATTRIBUTES_OFFSET:end]))
            return EncodedRecords(out[:size], self._positions[:nb].copy(), counts, n)
        data = bytearray()
        positions_out = np.empty(nb, np.int64)
        for b, (pos, end) in enumerate(zip(starts, ends, strict=True)):
            positions_out[b] = len(data)
            batch = bytearray(view[pos:pos + HEADER_SIZE])  # attributes carry the codec already
            batch += compress(self.codec, view[pos + HEADER_SIZE:end], self.level)
            finish_batch(batch)
            data += batch
        return EncodedRecords(data, positions_out, counts, n)

    def _run(self, columns: pa.RecordBatch | pa.Table | PreparedColumns | None,
             rows: np.ndarray | None,
             now_ms: int | None, close: bool) -> None:
        if self._finished:
            raise RuntimeError("StreamEncoder: append() after finish()")
        if columns is None or columns.num_rows == 0 or (rows is not None and not len(rows)):
            if close:
                self._call(_NO_COLUMNS, None, close=True)
            return
        prep = columns if isinstance(columns, PreparedColumns) else \
            prepare_columns(columns, now_ms)
        n, cols = prep.num_rows, prep.cols
        m = n
        if rows is not None:
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            m = len(rows)
            if int(rows.min()) < 0 or int(rows.max()) >= n:
                raise ValueError(f"a row number is out of range for {n} rows")
        # Capacity (untouched capacity is virtual memory only): a record takes at most
        # RECORD_OVERHEAD bytes besides its data, a batch HEADER_SIZE more. Batch count: two
        # consecutive batches hold more than max_batch_bytes - HEADER_SIZE - RECORD_OVERHEAD
        # record bytes together, or the second one's first record would have joined the
        # first batch. With a row selection the bound takes the selected rows' key and value
        # bytes (headers: their whole span, a looser bound).
        if rows is None or m == n:
            data_bytes = prep.span_bytes
        else:
            data_bytes = int(prep.row_bytes[rows].sum())
        data_bytes += prep.header_bytes
        records_bound = data_bytes + E.RECORD_OVERHEAD * m
        room = max(self.max_batch_bytes - HEADER_SIZE - E.RECORD_OVERHEAD, 1)
        batches_bound = min(m, 2 * records_bound // room + 2) + 1  # + the open one's rest
        self._reserve(records_bound + HEADER_SIZE * batches_bound, m)
        self._call(cols, rows, close)

    def _reserve(self, nbytes: int, rows: int) -> None:
        pos, nb = self.nbytes, int(self._state[E.S_NB])
        if pos + nbytes > len(self._out):
            grown = np.empty(pos + nbytes if pos == 0 else max(pos + nbytes, 2 * len(self._out)),
                             np.uint8)
            grown[:pos] = self._out[:pos]
            self._out = grown
        if nb + rows + 1 > len(self._positions):
            cap = max(nb + rows + 1, 2 * len(self._positions))
            for name in ("_positions", "_firsts"):
                old = getattr(self, name)
                new = np.empty(cap, np.int64)
                new[:nb + 1] = old[:nb + 1]
                setattr(self, name, new)

    def _call(self, cols: tuple, rows: np.ndarray | None, close: bool) -> None:
        sel = _ro(rows) if rows is not None else _NO_ROWS
        status, row = E.encode(self._out, self._positions, self._firsts, self._state, sel,
                               rows is not None, close, *cols, self.max_batch_bytes,
                               self.attributes, self.producer_id, self.producer_epoch,
                               self.base_sequence)
        if status == E.E_RECORD_TOO_LARGE:
            raise ValueError(f"record {row} is too large for a Kafka batch (int32 lengths)")
        if status == E.E_BAD_OFFSETS:
            raise ValueError(f"record {row}: Arrow offsets point outside their data buffer "
                             "(or a row number is out of range)")
        if status == E.E_CAPACITY:  # spans undercount only if offsets decrease (invalid Arrow)
            raise ValueError(f"record {row}: Arrow offsets are not monotonic")
        if status != E.OK:
            raise AssertionError(f"encode kernel status {status}")


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
    enc = StreamEncoder(producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence, transactional=transactional,
                        compression=compression, level=level, max_batch_bytes=max_batch_bytes)
    if "value" not in columns.schema.names:
        raise ValueError("encode_arrow needs a 'value' column (binary or string)")
    enc.append(columns, now_ms=now_ms)
    return enc.finish()


def _row_bytes(off: np.ndarray) -> np.ndarray:
    """int64 data bytes of each row of an offsets array (nulls count their span: 0)."""
    return np.diff(off).astype(np.int64, copy=False)


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
    if raw.null_count:
        import pyarrow.compute as pc  # here: pyarrow.compute costs a fresh worker ~30 ms

        raw_filled = pc.fill_null(raw, 0)
    else:
        raw_filled = raw
    ms = raw_filled.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
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
