"""One compiled pass over a segment's bytes: a batch index, and Kafka's read_committed filter.

The index (a numpy structured array, one row per batch) is what the decoder, the reader and
the dump tool plan from without touching records; the filter decides per batch which
transactional data to skip, exactly as Kafka's consumer does (CompletedFetch).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from ..codec.batch_header import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG,
    MAX_BATCH_SIZE,
    TRANSACTIONAL_FLAG,
    parse_header,
)
from ..codec.compression import decompress_array
from ..codec.crc import crc32c
from ..errors import CorruptBatchError, CrcMismatchError
from . import _decode_kernels as K

BATCH_INDEX_DTYPE = np.dtype([
    ("position", np.int64), ("size", np.int64), ("base_offset", np.int64),
    ("last_offset_delta", np.int32), ("attributes", np.int16), ("base_timestamp", np.int64),
    ("max_timestamp", np.int64), ("producer_id", np.int64), ("producer_epoch", np.int16),
    ("base_sequence", np.int32), ("records_count", np.int32), ("control_type", np.int16),
])
BatchIndex = np.ndarray  # structured, dtype BATCH_INDEX_DTYPE

CONTROL_NONE = K.CONTROL_NONE
CONTROL_EMPTY = K.CONTROL_EMPTY
CONTROL_UNKNOWN = K.CONTROL_UNKNOWN
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# Bound on one batch's decompressed records: a compression bomb fails instead of eating RAM.
MAX_DECOMPRESSED_BATCH = 1 << 28

_KERNEL_MESSAGES = {
    K.E_TRUNCATED: "record runs past the end of its record or batch",
    K.E_VARINT: "varint longer than Kafka allows",
    K.E_RECORD_LENGTH: "negative record length",
    K.E_FIELD_LENGTH: "key, value or header length is negative or beyond its record",
    K.E_SIZE_MISMATCH: "record fields do not fill exactly the record's declared length",
    K.E_COUNT: "record count mismatch: batch ends before its declared recordsCount",
    K.E_LEFTOVER: "Incorrect declared batch size: bytes remain after recordsCount records",
    K.E_HEADER_COUNT: "negative header count",
    K.E_HEADER_KEY: "negative header key length (header keys are never null)",
    K.E_CONTROL_KEY: "control record key shorter than 4 bytes or with a negative version",
    K.E_CAPACITY: "record data exceeds what its batch can hold",
}


def as_u8(data: Any) -> np.ndarray:
    """A zero-copy, read-only uint8 view of bytes, bytearray, memoryview, numpy or pyarrow
    buffers.

    Read-only whatever the input, because numba compiles (and caches) a kernel per argument
    type and writability is part of the type: a ``bytearray`` or a decompression buffer would
    otherwise need a second compilation that ``warm_up`` never made, paid by the first such
    call of every fresh process (a Spark worker's first task)."""
    arr = (data.view(np.uint8).reshape(-1) if isinstance(data, np.ndarray)
           else np.frombuffer(data, dtype=np.uint8))
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def kernel_message(status: int) -> str:
    return _KERNEL_MESSAGES.get(status, f"corrupt batch (status {status})")


def scan_batches(data: Any, *, source: str | None = None, verify_crc: bool = True) -> BatchIndex:
    """Index every batch of a segment's bytes (compiled walk over the headers).

    Raises TruncatedBatchError, UnsupportedMagicError, CorruptBatchError (impossible sizes,
    counts, corrupt control keys) and, with ``verify_crc``, CrcMismatchError naming the offset.
    """
    buf = as_u8(data)
    empty = np.empty((0, len(K.SCAN_COLUMNS)), np.int64)
    status, pos, count = K.scan(buf, empty, False, MAX_BATCH_SIZE)
    if status != K.OK:
        _raise_scan_error(buf, status, pos, source)
    rows = np.empty((count, len(K.SCAN_COLUMNS)), np.int64)
    status, pos, count = K.scan(buf, rows, True, MAX_BATCH_SIZE)
    if status != K.OK:  # the bytes changed under us
        _raise_scan_error(buf, status, pos, source)
    index = np.empty(count, BATCH_INDEX_DTYPE)
    for i, name in enumerate(K.SCAN_COLUMNS):
        index[name] = rows[:, i]
    pending = np.flatnonzero(index["control_type"] == K.CONTROL_PENDING)
    for i in pending:  # compressed control batches (never written by Kafka, but legal)
        index["control_type"][i] = _compressed_control_type(buf, index[i], source)
    if verify_crc:
        verify_batch_crcs(buf, index, source=source)
    return index


def verify_batch_crcs(buf: np.ndarray, index: BatchIndex, *, source: str | None = None) -> None:
    """CRC-32C of each indexed batch (hardware CRC, one call per batch)."""
    view = memoryview(buf)
    for pos, size, base, stored in zip(index["position"].tolist(), index["size"].tolist(),
                                       index["base_offset"].tolist(),
                                       _stored_crcs(buf, index).tolist(), strict=True):
        actual = crc32c(view[pos + ATTRIBUTES_OFFSET:pos + size])
        if actual != stored:
            raise CrcMismatchError(f"CRC-32C mismatch: stored {stored}, computed {actual}",
                                   position=pos, offset=base, source=source)


def _stored_crcs(buf: np.ndarray, index: BatchIndex) -> np.ndarray:
    at = index["position"][:, None] + np.arange(17, 21)
    return buf[at].astype(np.uint32) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], np.uint32) \
        if len(index) else np.empty(0, np.uint32)


def _raise_scan_error(buf: np.ndarray, status: int, pos: int, source: str | None) -> None:
    offset = None
    if status == K.E_HEADER:
        parse_header(buf, pos, source=source)  # raises the precise typed error
    if len(buf) - pos >= 8:
        offset = int(buf[pos:pos + 8].view(">i8")[0])
    raise CorruptBatchError(kernel_message(status), position=pos, offset=offset, source=source)


def _compressed_control_type(buf: np.ndarray, row: np.void, source: str | None) -> int:
    pos, size = int(row["position"]), int(row["size"])
    inner = as_u8(decompress_array(int(row["attributes"]) & 7, buf[pos + 61:pos + size],
                                   max_size=MAX_DECOMPRESSED_BATCH))  # the warmed signature
    ctype, status = K.control_type_at(inner, 0, len(inner))
    if status != K.OK:
        raise CorruptBatchError(kernel_message(status), position=pos,
                                offset=int(row["base_offset"]), source=source)
    return int(ctype)


class AbortedTxnLike(Protocol):
    producer_id: int
    first_offset: int
    last_offset: int


class AbortedFilter:
    """Kafka's read_committed batch filter (CompletedFetch), stateful across objects.

    Aborted transactions wait in a min-heap on first offset; before each batch with a
    producer id every entry starting at or before the batch's last offset moves its pid into
    the aborted set; an ABORT marker takes its pid out again; a transactional data batch of a
    pid in the set is skipped. Batches must be fed once each, in offset order.
    An entry whose marker lies before the batch being looked at is stale (its marker would have
    cleared it) and is ignored: that makes it safe to pass a whole ``.txnindex``.
    """

    def __init__(self, aborted: Iterable[AbortedTxnLike]) -> None:
        self._heap = [(int(a.first_offset), int(a.producer_id), int(a.last_offset))
                      for a in aborted]
        heapq.heapify(self._heap)
        self._aborted: dict[int, int] = {}  # pid -> offset of its abort marker

    def keep(self, index: BatchIndex) -> np.ndarray:
        """Feed batches (index rows, in offset order); True where a batch is not aborted."""
        keep = np.ones(len(index), dtype=bool)
        if not self._heap and not self._aborted:
            return keep
        heap, aborted = self._heap, self._aborted
        rows = np.flatnonzero(index["producer_id"] >= 0)
        pids = index["producer_id"][rows].tolist()
        bases = index["base_offset"][rows].tolist()
        lasts = (index["base_offset"][rows] + index["last_offset_delta"][rows]).tolist()
        attrs = index["attributes"][rows].tolist()
        ctypes = index["control_type"][rows].tolist()
        for row, pid, base, last, attr, ctype in zip(rows.tolist(), pids, bases, lasts, attrs,
                                                      ctypes, strict=True):
            while heap and heap[0][0] <= last:
                _, apid, marker = heapq.heappop(heap)
                if marker >= base:
                    aborted[apid] = max(marker, aborted.get(apid, marker))
            if attr & CONTROL_FLAG:
                if ctype == CONTROL_ABORT:
                    aborted.pop(pid, None)
            elif attr & TRANSACTIONAL_FLAG and pid in aborted:
                if aborted[pid] < base:  # its marker is behind us: not this transaction
                    del aborted[pid]
                else:
                    keep[row] = False
        return keep
