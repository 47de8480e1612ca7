"""Typed errors of the log format layer.

Every error says what is wrong and where (object, offset or byte position), so a user can
find the bad object; the exception type lets callers tell corruption from a lost race.
"""

from __future__ import annotations


class TxnlogError(Exception):
    """Base of every error txnlog raises on purpose."""


class LogFormatError(TxnlogError, ValueError):
    """Bytes that are not a valid Kafka log."""


class CorruptBatchError(LogFormatError):
    """A record batch that cannot be trusted; carries where it was found."""

    def __init__(self, message: str, *, position: int | None = None,
                 offset: int | None = None, source: str | None = None) -> None:
        where = []
        if source is not None:
            where.append(source)
        if offset is not None:
            where.append(f"batch at offset {offset}")
        if position is not None:
            where.append(f"byte position {position}")
        text = f"{message} ({', '.join(where)})" if where else message
        super().__init__(text)
        self.position = position
        self.offset = offset
        self.source = source


class CrcMismatchError(CorruptBatchError):
    """The stored CRC-32C does not match the batch bytes."""


class TruncatedBatchError(CorruptBatchError):
    """The bytes end before the batch (or a record in it) does."""


class UnsupportedMagicError(CorruptBatchError):
    """A magic byte other than 2 (legacy message sets are not supported)."""


class CompressionError(LogFormatError):
    """A compressed payload that cannot be decoded, or an unknown codec."""


class CorruptIndexError(LogFormatError):
    """An .index, .timeindex or .txnindex file that breaks Kafka's layout."""


class InvalidTopicNameError(TxnlogError, ValueError):
    """A topic name that breaks Kafka's naming rules (raised by ``layout.validate_topic``).

    The coordinator answers it as Kafka's InvalidTopic error
    (``coordinator.errors.InvalidTopicError``, code 17; see ``validate_topic_name`` there).
    """


class OffsetOutOfRangeError(TxnlogError, LookupError):
    """Kafka's OFFSET_OUT_OF_RANGE: a read below the partition's log start offset (records
    deleted by retention or DeleteRecords). Carries the partition, the offset asked for and
    the log start offset, so a caller can name the lost range ``[offset, log_start)`` or
    move on to the log start (Spark's ``failOnDataLoss``)."""

    def __init__(self, topic: str, partition: int, offset: int, log_start: int) -> None:
        super().__init__(f"{topic}-{partition}: offset {offset} is below the log start offset "
                         f"{log_start} (offsets [{offset}, {log_start}) were deleted by "
                         "retention or DeleteRecords)")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start = log_start
