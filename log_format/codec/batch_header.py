"""The 61-byte header of a Kafka v2 RecordBatch (magic 2), parsed and packed.

Layout (big-endian): baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8,
crc u32, attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64,
producerId i64, producerEpoch i16, baseSequence i32, recordsCount i32. The CRC covers
bytes [21, end); baseOffset and partitionLeaderEpoch are outside it, so a batch can be
encoded first and given its offset later without re-encoding (``set_base_offset``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CorruptBatchError, CrcMismatchError, TruncatedBatchError, UnsupportedMagicError
from .crc import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61 == RECORD_BATCH_OVERHEAD
assert HEADER_SIZE == 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAGIC_OFFSET = 16
MAGIC = 2
# batchLength counts bytes after itself: at least the rest of the header.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# Kafka's default message.max.bytes is ~1 MiB; we accept much larger objects but a declared
# size above this is treated as corruption rather than allocated.
MAX_BATCH_SIZE = 1 << 30
# length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount.
MIN_RECORD_SIZE = 7

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

CREATE_TIME = 0
LOG_APPEND_TIME = 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps to 0 past Integer.MAX_VALUE."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Every header field of one v2 batch, plus where it sits in its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size(self) -> int:
        """Whole batch size in bytes, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0,
                 *, source: str | None = None) -> BatchHeader:
    """Parse and sanity-check the header at ``position``; the batch body is not read.

    Raises TruncatedBatchError if the buffer ends inside the header or the declared batch,
    UnsupportedMagicError for magic != 2, CorruptBatchError for impossible sizes or counts.
    """
    avail = len(buf) - position
    if avail < LOG_OVERHEAD:
        raise TruncatedBatchError(
            f"{avail} trailing bytes are too few for a batch header", position=position,
            source=source)
    base_offset, batch_length = struct.unpack_from(">qi", buf, position)
    if batch_length < MIN_BATCH_LENGTH or batch_length > MAX_BATCH_SIZE:
        raise CorruptBatchError(
            f"impossible batch length {batch_length}", position=position, offset=base_offset,
            source=source)
    if avail < MAGIC_OFFSET + 1:
        raise TruncatedBatchError("buffer ends inside the batch header", position=position,
                                  offset=base_offset, source=source)
    magic = buf[position + MAGIC_OFFSET]
    if magic != MAGIC:
        raise UnsupportedMagicError(
            f"magic byte {magic} is not 2 (only v2 record batches are supported)",
            position=position, offset=base_offset, source=source)
    if avail < HEADER_SIZE:
        raise TruncatedBatchError("buffer ends inside the batch header", position=position,
                                  offset=base_offset, source=source)
    fields = HEADER.unpack_from(buf, position)
    header = BatchHeader(*fields, position=position)
    if header.size > avail:
        raise TruncatedBatchError(
            f"batch declares {header.size} bytes but only {avail} remain",
            position=position, offset=base_offset, source=source)
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptBatchError(
            f"negative record count {header.records_count} or lastOffsetDelta "
            f"{header.last_offset_delta}", position=position, offset=base_offset, source=source)
    if (header.compression == 0
            and header.records_count * MIN_RECORD_SIZE > header.batch_length - MIN_BATCH_LENGTH):
        # An uncompressed record takes at least 7 bytes: refuse a count before trusting it.
        raise CorruptBatchError(
            f"record count mismatch: {header.records_count} records cannot fit in "
            f"{header.batch_length - MIN_BATCH_LENGTH} bytes of record data",
            position=position, offset=base_offset, source=source)
    return header


def verify_crc(buf: bytes | bytearray | memoryview, header: BatchHeader,
               *, source: str | None = None) -> None:
    """Raise CrcMismatchError (naming the batch's offset) unless the stored CRC matches."""
    start = header.position + ATTRIBUTES_OFFSET
    end = header.position + header.size
    actual = crc32c(memoryview(buf)[start:end])
    if actual != header.crc:
        raise CrcMismatchError(
            f"CRC-32C mismatch: stored {header.crc}, computed {actual}",
            position=header.position, offset=header.base_offset, source=source)


def pack_header(*, base_offset: int, batch_length: int, crc: int, attributes: int,
                last_offset_delta: int, base_timestamp: int, max_timestamp: int,
                producer_id: int, producer_epoch: int, base_sequence: int, records_count: int,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    return HEADER.pack(base_offset, batch_length, partition_leader_epoch, MAGIC, crc, attributes,
                       last_offset_delta, base_timestamp, max_timestamp, producer_id,
                       producer_epoch, base_sequence, records_count)


def finish_batch(buf: bytearray, position: int = 0) -> None:
    """Fill in batchLength and CRC of a batch laid out at ``position`` to the end of ``buf``."""
    length = len(buf) - position - LOG_OVERHEAD
    struct.pack_into(">i", buf, position + 8, length)
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:])
    struct.pack_into(">I", buf, position + CRC_OFFSET, crc)


def restamp_producer(buf: bytearray, position: int, producer_id: int, producer_epoch: int,
                     base_sequence: int) -> int:
    """Give the batch at ``position`` another producer id, epoch and base sequence (inside
    the CRC, so the CRC is computed again); returns the batch's size. The records are
    untouched (their sequences are deltas from the base)."""
    size = LOG_OVERHEAD + struct.unpack_from(">i", buf, position + 8)[0]
    struct.pack_into(">qhi", buf, position + 43, producer_id, producer_epoch, base_sequence)
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:position + size])
    struct.pack_into(">I", buf, position + CRC_OFFSET, crc)
    return size


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Stamp the offset the coordinator assigned; the CRC stays valid (offset is outside it)."""
    struct.pack_into(">q", buf, position, base_offset)
