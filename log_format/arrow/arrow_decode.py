"""Kafka v2 batches -> one Arrow RecordBatch with Spark's Kafka source schema.

Python does per-batch work only (plan, CRC, decompression); the record walk is compiled
(_decode_kernels.decode_records) and its buffers become Arrow arrays without copies.
Uncompressed batches are decoded straight from the input buffer.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

import cramjam
import numpy as np
import pyarrow as pa

from ..codec.batch_header import CONTROL_FLAG, HEADER_SIZE, TIMESTAMP_TYPE_MASK
from ..codec.compression import decompress_array
from ..errors import CorruptBatchError, LogFormatError
from . import _decode_kernels as K
from .arrow_scan import (
    MAX_DECOMPRESSED_BATCH,
    AbortedFilter,
    as_u8,
    kernel_message,
    scan_batches,
    verify_batch_crcs,
)

MAX_OFFSET = 2**63 - 1
_INT32_MAX = 2**31 - 1

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def read_schema(include_headers: bool = False) -> pa.Schema:
    """Spark's Kafka source schema, as PySpark's to_arrow_schema(timezone="UTC") gives it."""
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()),
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()), pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True)
class DecodeResult:
    batch: pa.RecordBatch
    next_offset: int


def decode_to_arrow(data: Any, *, topic: str, partition: int, start_offset: int = 0,
                    end_offset: int = MAX_OFFSET, aborted: AbortedFilter | None = None,
                    include_headers: bool = False, verify_crc: bool = True,
                    source: str | None = None) -> DecodeResult:
    """Decode the records in [start_offset, end_offset) of whole v2 batches to Arrow.

    Control batches are consumed but not returned; with ``aborted`` (read_committed) batches of
    aborted transactions are skipped. ``next_offset`` is the offset after the last batch
    consumed (capped at end_offset), or start_offset if none was.
    """
    buf = as_u8(data)
    index = scan_batches(buf, source=source, verify_crc=False)
    last = index["base_offset"] + index["last_offset_delta"]
    consumed = index[(last >= start_offset) & (index["base_offset"] < end_offset)]
    next_offset = start_offset
    if len(consumed):
        tail = consumed[-1]
        tail_next = int(tail["base_offset"]) + int(tail["last_offset_delta"]) + 1
        next_offset = max(start_offset, min(tail_next, end_offset))
    if verify_crc:
        verify_batch_crcs(buf, consumed, source=source)
    keep = (consumed["attributes"] & CONTROL_FLAG) == 0
    if aborted is not None:
        keep &= aborted.keep(consumed)
    batches = consumed[keep & (consumed["records_count"] > 0)]
    records, starts, ends = _record_regions(buf, batches, source)
    scratch = records if isinstance(records, _Records) else None
    if scratch is not None:
        records = as_u8(scratch.buf[:scratch.size])  # read-only: the kernels' one signature
    counts = batches["records_count"].astype(np.int64)
    n_cap = int(counts.sum())
    data_cap = int((ends - starts).sum())
    if data_cap > _INT32_MAX:
        raise LogFormatError(
            f"{data_cap} bytes of records are too many for one Arrow batch; decode a smaller "
            "offset range")
    log_append = ((batches["attributes"] & TIMESTAMP_TYPE_MASK) != 0).astype(np.uint8)
    cols = _Columns.take(n_cap, data_cap, include_headers)
    # Fields of the structured index are strided views, except when there is one batch: as
    # is, the kernel's argument types (and numba's compilation and cache entry) would differ
    # between one batch and many. Contiguous copies (one value per batch) give one signature.
    out = K.decode_records(records, starts, ends,
                           np.ascontiguousarray(batches["base_offset"]),
                           np.ascontiguousarray(batches["base_timestamp"]),
                           np.ascontiguousarray(batches["max_timestamp"]), log_append,
                           counts, start_offset, end_offset, include_headers, *cols.buffers())
    status, eb, epos = out[0], out[1], out[2]
    if status != K.OK:
        row = batches[eb]
        where = int(epos)
        if records is not buf:
            message = (f"{kernel_message(status)} (byte {where - int(starts[eb])} of the "
                       "decompressed records)")
            where = int(row["position"])
        else:
            message = kernel_message(status)
        raise CorruptBatchError(message, position=where, offset=int(row["base_offset"]),
                                source=source)
    batch = _to_record_batch(records, cols, out, topic, partition, include_headers, source)
    if scratch is not None:
        scratch.release()
    return DecodeResult(batch, next_offset)


def _record_regions(buf: np.ndarray, batches: np.ndarray,
                    source: str | None) -> tuple[np.ndarray | _Records, np.ndarray, np.ndarray]:
    """Where each batch's record bytes are: in ``buf`` if none is compressed, else in one
    buffer holding every batch's records (decompressed, or copied when not compressed): a
    _Records, to release() once decoded."""
    starts = batches["position"] + HEADER_SIZE
    ends = batches["position"] + batches["size"]
    codecs = batches["attributes"] & 7
    if not codecs.any():
        return buf, starts, ends
    out = _Records(int((ends - starts).sum()) * 4)
    new_starts = np.empty(len(batches), np.int64)
    for i, (pos, end, codec, base, count) in enumerate(zip(
            starts.tolist(), ends.tolist(), codecs.tolist(), batches["base_offset"].tolist(),
            batches["records_count"].tolist(), strict=True)):
        new_starts[i] = out.size
        try:
            out.append_payload(codec, buf[pos:end])
        except LogFormatError as exc:
            raise CorruptBatchError(str(exc), position=pos - HEADER_SIZE, offset=base,
                                    source=source) from exc
        size = out.size - new_starts[i]
        if count * K.MIN_RECORD_SIZE > size:
            raise CorruptBatchError(
                f"record count {count} cannot fit in {size} decompressed bytes",
                position=pos - HEADER_SIZE, offset=base, source=source)
    new_ends = np.append(new_starts[1:], out.size)
    return out, new_starts, new_ends


_DECOMPRESS_INTO = {1: cramjam.gzip, 3: cramjam.lz4, 4: cramjam.zstd}
# Largest decompression buffer (virtual size) a thread keeps between decodes.
KEEP_SCRATCH_BYTES = 512 << 20
_SCRATCH = threading.local()


class _Records:
    """One growing buffer of record bytes; payloads are decompressed straight into it.

    The fast path is cramjam's decompress_into with the output bounded by the free space
    (at most MAX_DECOMPRESSED_BATCH + 1 bytes); anything else -- snappy, a payload larger
    than the free space, garbage, a bomb -- goes through compression.decompress_array, which
    decides between data and a typed error.
    """

    def __init__(self, capacity: int) -> None:
        kept = getattr(_SCRATCH, "buf", None)
        if kept is not None and len(kept) >= capacity:
            _SCRATCH.buf = None  # in use until release()
            self.buf = kept
        else:
            self.buf = np.empty(max(capacity, 1 << 16), np.uint8)  # untouched pages are free
        self.size = 0

    def release(self) -> None:
        """Keep the buffer for this thread's next decode (nothing returned references it).

        Faulting in ~100 MB of fresh pages per decode cost 40-300 ms of kernel time here
        (it varies with the machine's memory traffic), more than the decompression itself
        at times. The pages kept are at most the largest decompressed size seen.
        """
        if len(self.buf) <= KEEP_SCRATCH_BYTES:
            _SCRATCH.buf = self.buf

    def _reserve(self, n: int) -> None:
        if self.size + n > len(self.buf):
            grown = np.empty(max(2 * len(self.buf), self.size + n), np.uint8)
            grown[:self.size] = self.buf[:self.size]
            self.buf = grown

    def append_payload(self, codec: int, payload: np.ndarray) -> None:
        limit = MAX_DECOMPRESSED_BATCH
        if codec == 0:
            data = payload
        else:
            module = _DECOMPRESS_INTO.get(codec)
            if module is not None:
                self._reserve(min(limit + 1, 8 * len(payload) + (1 << 16)))
                room = min(len(self.buf) - self.size, limit + 1)
                try:
                    n = module.decompress_into(payload, self.buf[self.size:self.size + room])
                except Exception:  # full window or bad payload: the careful path decides
                    n = -1
                if 0 <= n <= limit:
                    self.size += n
                    return
            data = decompress_array(codec, payload, max_size=limit)
        self._reserve(len(data))
        self.buf[self.size:self.size + len(data)] = data
        self.size += len(data)


class _Columns:
    """The decoder's per-record output arrays, allocated here rather than in the kernel.

    numpy maps large arrays with transparent huge pages (madvise), so first-touch page
    faults on the ~100 MB of a 1 M-record decode cost a third of what numba's allocator
    (4 KiB pages) does. Untouched capacity is virtual memory only.

    Sets are recycled per thread (``take``): the Arrow batches a decode returns are views
    of these arrays, and first-touch page faults on fresh ones cost ~25% of the read path's
    CPU outside Spark (system time on this VM; 23k -> 10k minor faults per 3 M rows). A set
    is reused only once nothing refers to its arrays any more: every Arrow buffer over them
    is made by ``pa.py_buffer``, which holds a reference to the numpy view (and the view to
    its array) for as long as the buffer lives, so reference counts at their fresh values
    prove no batch, slice, table or zero-copy view can still see the memory.
    """

    def __init__(self, n_cap: int, data_cap: int, include_headers: bool) -> None:
        rows = n_cap if include_headers else 0
        self.n_cap, self.data_cap, self.rows = n_cap, data_cap, rows
        self.key_off = np.empty(n_cap + 1, np.int32)
        self.key_data = np.empty(data_cap, np.uint8)
        self.key_valid = np.empty(n_cap, np.uint8)
        self.val_off = np.empty(n_cap + 1, np.int32)
        self.val_data = np.empty(data_cap, np.uint8)
        self.val_valid = np.empty(n_cap, np.uint8)
        self.offsets = np.empty(n_cap, np.int64)
        self.stamps = np.empty(n_cap, np.int64)
        self.ts_types = np.empty(n_cap, np.int32)
        self.list_off = np.empty(rows + 1, np.int32)
        self.list_valid = np.empty(rows, np.uint8)
        self.header_pos = np.empty(rows, np.int64)
        self._free_refs = self._refs()

    @classmethod
    def take(cls, n_cap: int, data_cap: int, include_headers: bool) -> _Columns:
        """A set with at least this capacity: a free recycled one of this thread, else new
        (kept for reuse while the thread holds fewer than POOL_SETS, each at most
        POOL_MAX_DATA bytes)."""
        pool: list[_Columns] | None = getattr(_POOL, "sets", None)
        if pool is None:
            pool = _POOL.sets = []
        rows = n_cap if include_headers else 0
        for cols in pool:
            if (cols.n_cap >= n_cap and cols.data_cap >= data_cap and cols.rows >= rows
                    and cols.is_free()):
                return cols
        # Headroom, so the next piece (sizes vary by a few %) fits the recycled set too.
        cols = cls(n_cap + (n_cap >> 3), data_cap + (data_cap >> 3), include_headers)
        if cols.data_cap <= POOL_MAX_DATA:
            if len(pool) >= POOL_SETS:
                free = [i for i, c in enumerate(pool) if c.is_free()]
                if not free:
                    return cols
                del pool[free[0]]
            pool.append(cols)
        return cols

    def _refs(self) -> list[int]:
        return [sys.getrefcount(a) for a in self.buffers()]

    def is_free(self) -> bool:
        """Nothing but this set refers to its arrays (see the class docstring)."""
        return self._refs() == self._free_refs

    def buffers(self) -> tuple[np.ndarray, ...]:
        return (self.key_off, self.key_data, self.key_valid, self.val_off, self.val_data,
                self.val_valid, self.offsets, self.stamps, self.ts_types, self.list_off,
                self.list_valid, self.header_pos)


# Output sets a thread recycles: a Spark task holds ~3 decoded chunks at once (the one
# PySpark is writing, PartitionReader's one-behind chunk, the one being decoded).
POOL_SETS = 4
POOL_MAX_DATA = 64 << 20
_POOL = threading.local()


def _bitmap(valid: np.ndarray, n: int, nulls: int) -> pa.Buffer | None:
    """Arrow validity bitmap from one byte per row; None when nothing is null."""
    return pa.py_buffer(np.packbits(valid[:n], bitorder="little")) if nulls else None


def _binary(type_: pa.DataType, n: int, validity: pa.Buffer | None, nulls: int,
            off: np.ndarray, data: np.ndarray, used: int) -> pa.Array:
    return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(off[:n + 1]),
                                            pa.py_buffer(data[:used])], null_count=nulls)


def _raise_bad_header_key(hk_off: np.ndarray, hk_data: np.ndarray, nh: int,
                          list_off: np.ndarray, offsets: np.ndarray, source: str | None) -> None:
    """Error path only: find the record whose header key is not UTF-8 and name its offset."""
    for h in range(nh):
        try:
            bytes(hk_data[hk_off[h]:hk_off[h + 1]]).decode("utf-8")
        except UnicodeDecodeError:
            row = int(np.searchsorted(list_off, h, side="right")) - 1
            raise CorruptBatchError("record header key is not valid UTF-8",
                                    offset=int(offsets[row]), source=source) from None
    raise CorruptBatchError("record header keys are not valid UTF-8", source=source)


def _to_record_batch(records: np.ndarray, cols: _Columns, out: tuple, topic: str,
                     partition: int, include_headers: bool,
                     source: str | None = None) -> pa.RecordBatch:
    _, _, _, n, kpos, vpos, key_nulls, val_nulls, nh, hk_bytes, hv_bytes = out
    topic_bytes = topic.encode("utf-8")
    topic_off = np.arange(0, (n + 1) * len(topic_bytes), len(topic_bytes) or 1, dtype=np.int32) \
        if topic_bytes else np.zeros(n + 1, np.int32)
    columns = [
        _binary(pa.binary(), n, _bitmap(cols.key_valid, n, key_nulls), key_nulls, cols.key_off,
                cols.key_data, kpos),
        _binary(pa.binary(), n, _bitmap(cols.val_valid, n, val_nulls), val_nulls, cols.val_off,
                cols.val_data, vpos),
        pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(topic_off[:n + 1]),
                                               pa.py_buffer(topic_bytes * n)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(
            np.full(n, partition, np.int32))]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets[:n])]),
        pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, pa.py_buffer(cols.stamps[:n])]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.ts_types[:n])]),
    ]
    if include_headers:
        hk_off, hv_off = np.empty(nh + 1, np.int32), np.empty(nh + 1, np.int32)
        hk_data, hv_data = np.empty(hk_bytes, np.uint8), np.empty(hv_bytes, np.uint8)
        hv_valid = np.empty(nh, np.uint8)
        status, hv_nulls = K.gather_headers(records, cols.header_pos, cols.list_off, n, hk_off,
                                            hk_data, hv_off, hv_data, hv_valid)
        if status != K.OK:
            raise AssertionError(f"header kernel status {status}")  # decode_records validated
        hkeys = _binary(pa.string(), nh, None, 0, hk_off, hk_data, hk_bytes)
        try:
            hkeys.validate(full=True)
        except pa.ArrowInvalid:
            _raise_bad_header_key(hk_off, hk_data, nh, cols.list_off[:n + 1], cols.offsets,
                                  source)
        hvals = _binary(pa.binary(), nh, _bitmap(hv_valid, nh, hv_nulls), hv_nulls, hv_off,
                        hv_data, hv_bytes)
        structs = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADER_TYPE))
        list_nulls = n - int(np.count_nonzero(cols.list_valid[:n]))
        columns.append(pa.Array.from_buffers(
            HEADERS_TYPE, n,
            [_bitmap(cols.list_valid, n, list_nulls), pa.py_buffer(cols.list_off[:n + 1])],
            null_count=list_nulls, children=[structs]))
    return pa.RecordBatch.from_arrays(columns, schema=read_schema(include_headers))
