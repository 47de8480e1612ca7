"""What Kafka's broker refuses or changes of a produced batch beyond its framing
(``LogValidator``): a batch larger than the topic's ``max.message.bytes``, records
without a key in a compacted topic; the timestamps of a ``LogAppendTime`` topic's batch.

The gateway stores batches verbatim, so only what a broker would refuse is looked at, and
only where it can apply: the records of a batch are decoded (decompressed) for topics with
``cleanup.policy`` holding ``compact`` alone, whose keys the log cleaner keeps by.
"""

from __future__ import annotations

import struct
import time
from typing import Any

from txnlog.log_format.codec.batch_header import (
    ATTRIBUTES_OFFSET,
    TIMESTAMP_TYPE_MASK,
    finish_batch,
)
from txnlog.log_format.codec.records import decode_batch
from txnlog.log_format.errors import LogFormatError

from ..topic_config import compacts
from . import errors as E
from .admin_configs import TOPIC_CONFIG_INFO
from .backend import Backend

MAX_RECORD_ERRORS_SHOWN = 3  # Kafka's message shows the first three
# baseOffset 8, batchLength 4, leaderEpoch 4, magic 1, crc 4, attributes 2,
# lastOffsetDelta 4, baseTimestamp 8: maxTimestamp follows
MAX_TIMESTAMP_OFFSET = ATTRIBUTES_OFFSET + 2 + 4 + 8


def keyless(data: bytes | bytearray) -> list[int]:
    """The indexes (in the batch) of its records without a key."""
    batch = decode_batch(data, 0, verify_crc=False)
    return [i for i, r in enumerate(batch.records) if r.key is None]


async def refusal(backend: Backend, topic: str, partition: int, data: bytes | bytearray
                  ) -> tuple[int, str, list[dict[str, Any]]] | None:
    """(INVALID_RECORD, Kafka's message, Kafka's per-record ``record_errors``) for a batch
    with records a broker would refuse, None for one it would take. A batch that cannot
    be decoded is CORRUPT_MESSAGE, as from a broker."""
    meta = await backend.run(backend.topic_meta, topic)
    if meta is None:
        return None
    limit = int(meta.config.get("max.message.bytes",
                                TOPIC_CONFIG_INFO["max.message.bytes"][0]))
    if len(data) > limit:  # Kafka's RecordTooLargeException
        return E.MESSAGE_TOO_LARGE, (
            f"The request included a message larger than the max message size the server "
            f"will accept: a batch of {len(data)} bytes, above {topic}'s max.message.bytes "
            f"{limit}."), []
    if not compacts(meta.config):
        return None
    try:
        missing = await backend.run(keyless, data)
    except LogFormatError as exc:
        return E.CORRUPT_MESSAGE, str(exc)[:500], []
    if not missing:
        return None
    text = ("Compacted topic cannot accept message without key in topic partition "
            f"{topic}-{partition}.")
    errors = [{"batch_index": i, "batch_index_error_message": text} for i in missing]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{text}')"
                      for i in missing[:MAX_RECORD_ERRORS_SHOWN])
    message = (f"One or more records have been rejected due to {len(missing)} record errors "
               "in total, and only showing the first three errors at most: "
               f"[{shown}]")
    return E.INVALID_RECORD, message, errors


def log_append_time(backend: Backend, topic: str, data: bytearray) -> int | None:
    """A topic with ``message.timestamp.type=LogAppendTime``: the batch's timestamp type
    and max timestamp are set to now, as Kafka's broker sets them on append (records keep
    their deltas; consumers take the batch's max timestamp for each record), and its CRC
    is computed again. Answers that time (the Produce response's ``log_append_time``),
    None for CreateTime topics (the batch is stored as sent).

    Cost: one CRC32C pass over the batch (the attributes and timestamp are inside the
    CRC), which verifying it on arrival already paid once; nothing is decompressed."""
    meta = backend.topic_meta(topic)
    if meta is None or meta.config.get("message.timestamp.type") != "LogAppendTime":
        return None
    now = int(time.time() * 1000)
    attributes = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", data, MAX_TIMESTAMP_OFFSET, now)
    finish_batch(data)
    return now
