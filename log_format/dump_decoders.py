"""kafka-dump-log's ``--offsets-decoder`` and ``--transaction-log-decoder`` for ``txnlog dump``.

Kafka's DumpLogSegments prints a decoded record as `` key: <json> payload: <json>``: the
key as ``{"type":"<key version>","data":{...}}``, the value as
``{"version":"<value version>","data":{...}}`` with the fields named as in Kafka's message
schemas (OffsetCommitKey/Value, TransactionLogKey/Value), and ``<DELETE>`` for a tombstone.
Both parsers are here, plus txnlog's own records in ``__transaction_state`` (key types
1000+, value ``int16 0`` + JSON: docs/coordinator.md), which Kafka's parser cannot read:
they print as ``{"type":"1003","data":{"kind":"topic","id":"orders"}}`` and their JSON.
A record a decoder cannot parse prints Kafka's ``unknown::...`` form instead of failing.

Pure functions of bytes, no dependency on the coordinator (which writes these records):
the layouts are Kafka's, fixed.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from .errors import LogFormatError

# txnlog's own __transaction_state record kinds (coordinator/txn_log_records.OWN_KINDS;
# kept in step by tests/test_dump.py).
OWN_KIND_NAMES = {1000: "takeover", 1001: "pid_block", 1002: "producer", 1003: "topic",
                  1004: "member", 1005: "reserve", 1006: "confirm", 1007: "fence",
                  1008: "offsets", 1009: "batch", 1010: "group_delete"}
# Kafka's TransactionState ids, for a readable status beside the number.
TXN_STATUS = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
              4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}

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


def _unknown(what: str, buf: bytes | None) -> str:
    return f"unknown::{what}::{(buf or b'').hex()}"


def decode_offsets_record(key: bytes | None, value: bytes | None) -> Decoded:
    """A ``__consumer_offsets`` record: OffsetCommitKey v0/v1 with OffsetCommitValue v0-v4
    (group metadata records, key version 2, are shown undecoded)."""
    if key is None:
        return None, None if value is None else _unknown("value", value)
    try:
        k = _bytes(key)
        version = k.take(">h")
        if version not in (0, 1):
            return _unknown(f"version={version}", key), \
                None if value is None else _unknown("value", value)
        data = {"group": k.string(), "topic": k.string(), "partition": k.take(">i")}
        key_text = _dumps({"type": str(version), "data": data})
    except LogFormatError:
        return _unknown("key", key), None if value is None else _unknown("value", value)
    if value is None:
        return key_text, "<DELETE>"
    try:
        v = _bytes(value)
        vv = v.take(">h")
        out: dict[str, Any] = {"offset": v.take(">q")}
        if vv >= 3:
            out["leaderEpoch"] = v.take(">i")
        out["metadata"] = v.string()
        out["commitTimestamp"] = v.take(">q")
        if vv == 1:
            out["expireTimestamp"] = v.take(">q")
        return key_text, _dumps({"version": str(vv), "data": out})
    except LogFormatError:
        return key_text, _unknown("value", value)


def decode_transaction_log_record(key: bytes | None, value: bytes | None) -> Decoded:
    """A ``__transaction_state`` record: Kafka's TransactionLogKey/Value v0 (txnlog keeps
    its extras in the ``txnlog.ext`` header), or one of txnlog's own kinds."""
    if key is None:
        return None, None if value is None else _unknown("value", value)
    try:
        k = _bytes(key)
        type_id = k.take(">h")
        ident = k.string()
    except LogFormatError:
        return _unknown("key", key), None if value is None else _unknown("value", value)
    if type_id in OWN_KIND_NAMES:
        key_text = _dumps({"type": str(type_id),
                           "data": {"kind": OWN_KIND_NAMES[type_id], "id": ident}})
        if value is None:
            return key_text, "<DELETE>"
        try:
            (vv,) = struct.unpack_from(">h", value, 0)
            return key_text, _dumps({"version": str(vv), "data": json.loads(value[2:])})
        except (struct.error, ValueError):
            return key_text, _unknown("value", value)
    if type_id != 0:
        return _unknown(f"version={type_id}", key), \
            None if value is None else _unknown("value", value)
    key_text = _dumps({"type": "0", "data": {"transactionalId": ident}})
    if value is None:
        return key_text, "<DELETE>"
    try:
        v = _bytes(value)
        vv = v.take(">h")
        data: dict[str, Any] = {"producerId": v.take(">q"), "producerEpoch": v.take(">h"),
                                "transactionTimeoutMs": v.take(">i")}
        status = v.take(">b")
        data["transactionStatus"] = status
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
        data["transactionState"] = TXN_STATUS.get(status, "Unknown")
        return key_text, _dumps({"version": str(vv), "data": data})
    except LogFormatError:
        return key_text, _unknown("value", value)


DECODERS: dict[str, Callable[[bytes | None, bytes | None], Decoded]] = {
    "offsets": decode_offsets_record,
    "transaction-log": decode_transaction_log_record,
}
