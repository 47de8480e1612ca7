"""kafka-dump-log's ``--offsets-decoder`` and ``--transaction-log-decoder`` for ``txnlog dump``.

Kafka's DumpLogSegments prints a decoded record as `` key: <json> payload: <json>``: the
key as ``{"type":"<key version>","data":{...}}``, the value as
``{"version":"<value version>","data":{...}}`` with the fields named as in Kafka's message
schemas (OffsetCommitKey/Value, TransactionLogKey/Value), and ``<DELETE>`` for a tombstone.
Both parsers are here, plus txnlog's own records in ``__transaction_state`` (key types
1000+, value ``int16 0`` + JSON: docs/coordinator.md), which Kafka's parser cannot read:
they print as ``{"type":"1003","data":{"kind":"topic","id":"orders"}}`` and their JSON.
A record of a type the decoder does not know prints Kafka's ``Unknown record type N at
offset O, skipping.``, one that does not parse ``Error at offset O, skipping. <why>``, and a
record without a key stops the file with Kafka's "message had a missing key" error.

Pure functions of bytes, no dependency on the coordinator (which writes these records):
the layouts are Kafka's, fixed.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from ..errors import LogFormatError

# txnlog's own __transaction_state record kinds (coordinator/txn_log_records.OWN_KINDS;
# kept in step by tests/test_dump.py).
OWN_KIND_NAMES = {1000: "takeover", 1001: "pid_block", 1002: "producer", 1003: "topic",
                  1004: "member", 1005: "reserve", 1006: "confirm", 1007: "fence",
                  1008: "offsets", 1009: "batch", 1010: "merge", 1011: "merged",
                  1012: "cleaned", 1013: "swept", 1014: "group_delete",
                  1015: "log_start", 1016: "retain", 1017: "retained", 1018: "topic_config",
                  1019: "topic_delete", 1020: "compact", 1021: "compacted", 1022: "shared_cleaned",
                  1030: "kafka_client"}

Decoded = tuple[str | None, str | None]


class KafkaBytes:
    """A cursor over a record's key or value in Kafka's big-endian encodings (fixed-size
    fields and int16-length STRINGs); ``what`` names the bytes in errors, ``errors`` is how
    bad UTF-8 decodes (the coordinator's own log is strict, the dump tool lenient)."""

    def __init__(self, buf: bytes, what: str = "record", errors: str = "strict") -> None:
        self.buf, self.pos, self.what, self.errors = buf, 0, what, errors

    def take(self, fmt: str) -> Any:
        s = struct.Struct(fmt)
        if self.pos + s.size > len(self.buf):
            raise LogFormatError(f"truncated {self.what}")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def string(self) -> str:
        n = self.take(">h")
        if n < 0 or self.pos + n > len(self.buf):
            raise LogFormatError(f"bad STRING in {self.what}")
        out = self.buf[self.pos:self.pos + n].decode("utf-8", errors=self.errors)
        self.pos += n
        return out


def _bytes(buf: bytes) -> KafkaBytes:
    return KafkaBytes(buf, errors="replace")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _key_json(type_id: int, data: dict[str, Any]) -> str:
    return _dumps({"type": str(type_id), "data": data})


def _value_json(version: int, data: Any) -> str:
    return _dumps({"version": str(version), "data": data})


def _unknown(type_id: int, offset: int) -> Decoded:
    """Kafka's answer for a record type its serde does not know."""
    return f"Unknown record type {type_id} at offset {offset}, skipping.", None


def _error(offset: int, why: str) -> Decoded:
    """Kafka's answer for a record that does not parse."""
    return f"Error at offset {offset}, skipping. {why}", None


def _missing_key(offset: int) -> LogFormatError:
    return LogFormatError(f"Failed to decode message at offset {offset} using the specified "
                          "decoder (message had a missing key)")


def decode_offsets_record(key: bytes | None, value: bytes | None, offset: int) -> Decoded:
    """A ``__consumer_offsets`` record: OffsetCommitKey (types 0, 1) with OffsetCommitValue
    v0-v3, as Kafka's OffsetsMessageParser prints them. Group metadata (type 2) and the
    flexible v4 value are not decoded: txnlog never writes them."""
    if key is None:
        raise _missing_key(offset)
    try:
        k = _bytes(key)
        type_id = k.take(">h")
        if type_id not in (0, 1):
            return _unknown(type_id, offset)
        key_text = _key_json(type_id, {"group": k.string(), "topic": k.string(),
                                       "partition": k.take(">i")})
        if value is None:
            return key_text, "<DELETE>"
        v = _bytes(value)
        version = v.take(">h")
        if version not in (0, 1, 2, 3):
            return _error(offset, f"OffsetCommitValue version {version} is not decoded")
        data: dict[str, Any] = {"offset": v.take(">q")}
        if version >= 3:
            data["leaderEpoch"] = v.take(">i")
        data["metadata"] = v.string()
        data["commitTimestamp"] = v.take(">q")
        if version == 1:
            data["expireTimestamp"] = v.take(">q")
        return key_text, _value_json(version, data)
    except LogFormatError as exc:
        return _error(offset, str(exc))


def decode_transaction_log_record(key: bytes | None, value: bytes | None,
                                  offset: int) -> Decoded:
    """A ``__transaction_state`` record: Kafka's TransactionLogKey/Value v0 (txnlog keeps
    its extras in the ``txnlog.ext`` header), or one of txnlog's own kinds (types 1000+),
    shown as ``{"kind", "id"}`` and their JSON value."""
    if key is None:
        raise _missing_key(offset)
    try:
        k = _bytes(key)
        type_id = k.take(">h")
        ident = k.string()
        if type_id in OWN_KIND_NAMES:
            key_text = _key_json(type_id, {"kind": OWN_KIND_NAMES[type_id], "id": ident})
            if value is None:
                return key_text, "<DELETE>"
            v = _bytes(value)
            version = v.take(">h")
            try:
                return key_text, _value_json(version, json.loads(value[2:]))
            except ValueError as exc:
                return _error(offset, f"value is not JSON: {exc}")
        if type_id != 0:
            return _unknown(type_id, offset)
        key_text = _key_json(0, {"transactionalId": ident})
        if value is None:
            return key_text, "<DELETE>"
        v = _bytes(value)
        version = v.take(">h")
        if version != 0:
            return _error(offset, f"TransactionLogValue version {version} is not decoded")
        data: dict[str, Any] = {"producerId": v.take(">q"), "producerEpoch": v.take(">h"),
                                "transactionTimeoutMs": v.take(">i"),
                                "transactionStatus": v.take(">b")}
        n = v.take(">i")
        parts = None
        if n >= 0:
            parts = []
            for _ in range(n):
                topic = v.string()
                parts.append({"topic": topic,
                              "partitionIds": [v.take(">i") for _ in range(v.take(">i"))]})
        data["transactionPartitions"] = parts
        data["transactionLastUpdateTimestampMs"] = v.take(">q")
        data["transactionStartTimestampMs"] = v.take(">q")
        return key_text, _value_json(version, data)
    except LogFormatError as exc:
        return _error(offset, str(exc))


DECODERS: dict[str, Callable[[bytes | None, bytes | None, int], Decoded]] = {
    "offsets": decode_offsets_record,
    "transaction-log": decode_transaction_log_record,
}
