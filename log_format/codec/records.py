"""Object-level codec for v2 record batches: one Python object per record.

This is the simple, strict codec for small paths (control batches, the coordinator's own
log, tests and ``txnlog dump``); bulk data goes through the compiled ``arrow_codec``.
Everything written here is Kafka's exact bytes (DefaultRecordBatch / DefaultRecord), and
everything read is validated: a bad batch raises a ``LogFormatError`` subclass naming where.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from ..errors import CompressionError, CorruptBatchError, TruncatedBatchError
from .batch_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    increment_sequence,
    pack_header,
    parse_header,
)
from .batch_header import verify_crc as _check_crc
from .compression import Codec, compress, decompress
from .crc import crc32c
from .varint import MAX_VARINT_BYTES, decode_varint, encode_varint

Header = tuple[str, bytes | None]
RecordInput = tuple  # (key, value, headers, timestamp_ms), see encode_batch

INT32_MAX = 0x7FFFFFFF
INT32_MIN = -0x80000000
# A decompressed batch larger than this is refused unless the caller raises the bound:
# Kafka's batches are ~1 MiB, so this leaves room while stopping decompression bombs.
DEFAULT_MAX_DECOMPRESSED = 256 << 20


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and timestamp, as a consumer would see it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    sequence: int = NO_SEQUENCE


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch's header with its records (control records included, as stored)."""

    header: BatchHeader
    records: list[Record]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


# --------------------------------------------------------------------------- encoding

def _as_bytes(value: bytes | bytearray | memoryview | str | None, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"record {what} must be bytes, str or None, not {type(value).__name__}")


def _encode_record_body(offset_delta: int, timestamp_delta: int, key: bytes | None,
                        value: bytes | None, headers: Sequence[Header]) -> bytes:
    """DefaultRecord.writeTo without the leading length varint."""
    out = bytearray(b"\x00")  # attributes, unused
    out += encode_varint(timestamp_delta)
    out += encode_varint(offset_delta)
    for part in (key, value):
        if part is None:
            out += b"\x01"  # zigzag(-1)
        else:
            out += encode_varint(len(part))
            out += part
    out += encode_varint(len(headers))
    for hkey, hvalue in headers:
        if not isinstance(hkey, str):
            raise TypeError(f"header keys must be str, not {type(hkey).__name__}")
        raw_key = hkey.encode("utf-8")
        out += encode_varint(len(raw_key))
        out += raw_key
        raw_value = _as_bytes(hvalue, "header value")
        if raw_value is None:
            out += b"\x01"
        else:
            out += encode_varint(len(raw_value))
            out += raw_value
    return bytes(out)


def _normalize(records: Iterable[Record | RecordInput], base_offset: int,
               now_ms: int | None) -> list[tuple[int, int, bytes | None, bytes | None,
                                                 list[Header]]]:
    """(offset_delta, timestamp, key, value, headers) per record, validated."""
    out = []
    last_delta = -1
    for i, rec in enumerate(records):
        if isinstance(rec, Record):
            delta = rec.offset - base_offset
            ts, key, value, headers = rec.timestamp, rec.key, rec.value, rec.headers
        else:
            if len(rec) != 4:
                raise TypeError("records are Record or (key, value, headers, timestamp_ms)")
            key, value, headers, ts = rec
            delta = i
        if delta <= last_delta or delta > INT32_MAX:
            raise ValueError(
                f"record offsets must increase within the batch and stay within 2^31 of "
                f"base offset {base_offset}; got offset delta {delta} after {last_delta}")
        last_delta = delta
        if ts is None:
            ts = now_ms if now_ms is not None else int(time.time() * 1000)
        out.append((delta, int(ts), _as_bytes(key, "key"), _as_bytes(value, "value"),
                    list(headers or ())))
    return out


def encode_batch(records: Iterable[Record | RecordInput], *, base_offset: int = 0,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, transactional: bool = False,
                 control: bool = False, compression: Codec | int | str = Codec.NONE,
                 level: int | None = None, timestamp_type: int = 0,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 max_timestamp: int | None = None, last_offset_delta: int | None = None,
                 delete_horizon_ms: int | None = None, now_ms: int | None = None) -> bytes:
    """Kafka's exact bytes for one v2 batch.

    ``records`` are ``Record`` objects (their absolute ``offset`` sets the offset delta, so a
    compacted batch can have gaps) or ``(key, value, headers, timestamp_ms)`` tuples at
    consecutive offsets (a ``None`` timestamp means ``now_ms`` / the wall clock). Like
    Kafka's builder, baseTimestamp is the first record's timestamp (or ``delete_horizon_ms``
    when given, which also sets the hasDeleteHorizonMs bit) and maxTimestamp the largest
    (override with ``max_timestamp``, e.g. a LogAppendTime batch). ``last_offset_delta``
    may exceed the last record's delta (records removed by compaction), never undercut it.
    """
    codec = Codec.parse(compression) if isinstance(compression, str) else Codec(compression)
    recs = _normalize(records, base_offset, now_ms)
    if recs:
        base_ts = recs[0][1] if delete_horizon_ms is None else delete_horizon_ms
        max_ts = max(r[1] for r in recs)
        min_last_delta = recs[-1][0]
    else:
        base_ts = NO_TIMESTAMP if delete_horizon_ms is None else delete_horizon_ms
        max_ts = NO_TIMESTAMP
        min_last_delta = 0
    if max_timestamp is not None:
        max_ts = max_timestamp
    if last_offset_delta is None:
        last_offset_delta = min_last_delta
    elif last_offset_delta < min_last_delta or last_offset_delta > INT32_MAX:
        raise ValueError(f"last_offset_delta {last_offset_delta} is below the last record's "
                         f"delta {min_last_delta} or over 2^31-1")

    body = bytearray()
    for delta, ts, key, value, headers in recs:
        rec = _encode_record_body(delta, ts - base_ts, key, value, headers)
        body += encode_varint(len(rec))
        body += rec
    payload = compress(codec, body, level) if codec is not Codec.NONE else bytes(body)

    attributes = int(codec)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    elif timestamp_type != 0:
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), "
                         f"not {timestamp_type}")
    if transactional:
        attributes |= TRANSACTIONAL_FLAG
    if control:
        attributes |= CONTROL_FLAG
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG

    batch_length = HEADER_SIZE - 12 + len(payload)
    try:
        header = bytearray(pack_header(
            base_offset=base_offset, batch_length=batch_length, crc=0, attributes=attributes,
            last_offset_delta=last_offset_delta, base_timestamp=base_ts, max_timestamp=max_ts,
            producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_sequence, records_count=len(recs),
            partition_leader_epoch=partition_leader_epoch))
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range for its Kafka type: "
                         f"{exc}") from None
    crc = crc32c(payload, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + payload


# --------------------------------------------------------------------------- decoding

class _RecordReader:
    """Strict cursor over a batch's record bytes (DefaultRecord.readFrom's checks)."""

    __slots__ = ("buf", "end", "header", "pos", "source")

    def __init__(self, buf: bytes, header: BatchHeader, source: str | None) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)
        self.header = header
        self.source = source

    def fail(self, message: str, cls: type[CorruptBatchError] = CorruptBatchError) -> None:
        raise cls(message, position=self.header.position, offset=self.header.base_offset,
                  source=self.source)

    def varint(self, limit: int, max_bytes: int = MAX_VARINT_BYTES) -> int:
        try:
            value, self.pos = decode_varint(self.buf, self.pos, max_bytes)
        except CorruptBatchError as exc:
            self.fail(f"bad varint in record data at record byte {self.pos}: {exc}",
                      type(exc))
        if max_bytes == MAX_VARINT_BYTES and not INT32_MIN <= value <= INT32_MAX:
            self.fail(f"varint {value} does not fit an int32")
        if self.pos > limit:
            self.fail("record runs past its declared length")
        return value

    def take(self, n: int, limit: int, what: str) -> bytes:
        if n < 0:
            self.fail(f"negative {what} length {n}")
        if self.pos + n > limit:
            self.fail(f"{what} of {n} bytes runs past the record")
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data

    def nullable(self, limit: int, what: str) -> bytes | None:
        n = self.varint(limit)
        if n == -1:
            return None
        return self.take(n, limit, what)

    def record(self, log_append_ts: int | None) -> Record:
        h = self.header
        length = self.varint(self.end)
        if length < 0:
            self.fail(f"negative record length {length}")
        start = self.pos
        limit = start + length
        if limit > self.end:
            self.fail(f"record of {length} bytes runs past the batch", TruncatedBatchError)
        if self.pos >= limit:
            self.fail("record too short for its attributes")
        self.pos += 1  # attributes byte, unused
        ts_delta = self.varint(limit, max_bytes=10)
        offset_delta = self.varint(limit)
        key = self.nullable(limit, "key")
        value = self.nullable(limit, "value")
        count = self.varint(limit)
        if count < 0:
            self.fail(f"negative header count {count}")
        if count * 2 > limit - self.pos:
            self.fail(f"header count {count} cannot fit in the record")
        headers: list[Header] = []
        for _ in range(count):
            raw_key = self.nullable(limit, "header key")
            if raw_key is None:
                self.fail("null header key")
            try:
                hkey = raw_key.decode("utf-8")
            except UnicodeDecodeError:
                self.fail("header key is not UTF-8")
            headers.append((hkey, self.nullable(limit, "header value")))
        if self.pos != limit:
            self.fail(f"invalid record size: expected {length} bytes but read "
                      f"{self.pos - start}")
        timestamp = log_append_ts if log_append_ts is not None else h.base_timestamp + ts_delta
        if h.base_sequence < 0:  # DefaultRecord.readFrom: any negative base has none
            sequence = NO_SEQUENCE
        else:
            sequence = increment_sequence(h.base_sequence, offset_delta)
        return Record(h.base_offset + offset_delta, timestamp, key, value, headers, sequence)


def decode_batch(buf: bytes | bytearray | memoryview, position: int = 0, *,
                 verify_crc: bool = True, source: str | None = None,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> DecodedBatch:
    """Decode the batch at ``position`` with all of its records, validated.

    Raises TruncatedBatchError, CrcMismatchError, UnsupportedMagicError, CompressionError or
    CorruptBatchError (record count or sizes disagreeing with the content).
    """
    header = parse_header(buf, position, source=source)
    if verify_crc:
        _check_crc(buf, header, source=source)
    start = position + HEADER_SIZE
    payload = bytes(memoryview(buf)[start:position + header.size])
    codec = header.attributes & COMPRESSION_MASK
    if codec != Codec.NONE:
        if codec > Codec.ZSTD:
            raise CorruptBatchError(f"unknown compression codec id {codec}",
                                    position=position, offset=header.base_offset, source=source)
        try:
            payload = decompress(codec, payload, max_decompressed)
        except CompressionError as exc:
            raise CorruptBatchError(str(exc), position=position, offset=header.base_offset,
                                    source=source) from exc
    reader = _RecordReader(payload, header, source)
    log_append_ts = header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    records = []
    last_delta = -1
    for _ in range(header.records_count):
        if reader.pos >= reader.end:
            reader.fail(f"batch declares {header.records_count} records but holds "
                        f"{len(records)}")
        rec = reader.record(log_append_ts)
        delta = rec.offset - header.base_offset
        if delta <= last_delta or delta > header.last_offset_delta:
            reader.fail(f"record offset delta {delta} out of order or past lastOffsetDelta "
                        f"{header.last_offset_delta}")
        last_delta = delta
        records.append(rec)
    if reader.pos != reader.end:
        reader.fail(f"incorrect declared batch size: {reader.end - reader.pos} bytes remain "
                    f"after {header.records_count} records")
    return DecodedBatch(header, records)


def iter_batches(buf: bytes | bytearray | memoryview, *, source: str | None = None,
                 verify_crc: bool = True) -> Iterator[BatchHeader]:
    """Headers of every batch of a whole object, in order, CRC-checked.

    The object must be whole batches: bytes after the last one raise a typed error
    (TruncatedBatchError or CorruptBatchError) rather than being skipped silently.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos, source=source)
        if verify_crc:
            _check_crc(buf, header, source=source)
        yield header
        pos += header.size


def decode_batches(buf: bytes | bytearray | memoryview, *, source: str | None = None,
                   verify_crc: bool = True) -> list[DecodedBatch]:
    """Every batch of a whole object, decoded (see ``iter_batches``)."""
    return [decode_batch(buf, h.position, verify_crc=verify_crc, source=source)
            for h in iter_batches(buf, source=source, verify_crc=False)]
