"""What Kafka's broker refuses of a produced batch beyond its framing (``LogValidator``):
a batch larger than the topic's ``max.message.bytes``, records without a key in a
compacted topic.

The gateway stores batches verbatim, so only what a broker would refuse is looked at, and
only where it can apply: the records of a batch are decoded (decompressed) for topics with
``cleanup.policy`` holding ``compact`` alone, whose keys the log cleaner keeps by.
"""

from __future__ import annotations

from typing import Any

from txnlog.log_format.codec.records import decode_batch
from txnlog.log_format.errors import LogFormatError

from ..topic_config import compacts
from . import errors as E
from .admin_configs import TOPIC_CONFIG_INFO
from .backend import Backend

MAX_RECORD_ERRORS_SHOWN = 3  # Kafka's message shows the first three


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
