"""The records of ``__transaction_state-0``: Kafka's TransactionLogKey/Value plus our own.

Every state change of the coordinator is one of these records; replaying them in order
rebuilds the state exactly (``CoordinatorState.apply`` runs the same dicts live and on
replay).

- Transaction state (kind ``txn``): Kafka's bytes. Key = ``int16 0`` + ``STRING
  transactionalId`` (TransactionLogKey v0); value = TransactionLogValue v0 (ProducerId,
  ProducerEpoch, TransactionTimeoutMs, TransactionStatus, TransactionPartitions,
  TransactionLastUpdateTimestampMs, TransactionStartTimestampMs); a null value is the
  tombstone of an expired id. What Kafka keeps elsewhere (members, marker plan, streaming
  batch ids) rides in one record header, ``txnlog.ext`` (JSON), so kafka-dump-log and
  Kafka's own parser still read key and value.
- Our own kinds: key = ``int16 type`` (1000 + n, never a Kafka key version) + ``STRING id``;
  value = ``int16 0`` + UTF-8 JSON. See docs/coordinator.md for each kind's fields.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from txnlog.log_format.codec.dump_decoders import KafkaBytes
from txnlog.log_format.codec.records import Record
from txnlog.log_format.errors import LogFormatError

EXT_HEADER = "txnlog.ext"
TXN_KEY_VERSION = 0
TXN_VALUE_VERSION = 0

# Our record kinds and their key type ids (Kafka's TransactionLogKey uses version 0).
OWN_KINDS: dict[str, int] = {
    "takeover": 1000,     # a coordinator took over the log; carries the coordinator epoch
    "pid_block": 1001,    # producer ids below next_pid are handed out
    "producer": 1002,     # an idempotent (non-transactional) producer id was handed out
    "topic": 1003,        # a topic was created
    "member": 1004,       # a member producer joined a transaction
    "reserve": 1005,      # offsets reserved for a producer in some partitions
    "confirm": 1006,      # reserved ranges written to storage (own objects or shared runs)
    "fence": 1007,        # reserved ranges closed by a 0-byte object (never written)
    "offsets": 1008,      # consumer-group offsets added to a transaction
    "batch": 1009,        # a streaming batch began under a transactional id
    "merge": 1010,        # a merge of a partition's objects was planned (merge_state.py)
    "merged": 1011,       # its output and manifest are durable: readers use them
    "cleaned": 1012,      # objects it replaced are deleted (after the grace period)
    "swept": 1013,        # every partition was looked at for merging once (old roots)
    "group_delete": 1014,  # an operator deleted a consumer group's committed offsets
    "log_start": 1015,    # DeleteRecords: a partition's log start offset must move
    "retain": 1016,       # a log start change planned: the next manifest (log_retention.py)
    "retained": 1017,     # its manifest is durable: dropped segments are garbage
    "topic_config": 1018,  # a topic's configs were altered (IncrementalAlterConfigs)
    "topic_delete": 1019,  # a topic was deleted
    "compact": 1020,      # a compaction of a partition's closed segments was planned
    "compacted": 1021,    # its cleaned segments and manifest are durable (clean_state.py)
    "shared_cleaned": 1022,  # shared objects no partition's tail names were deleted
    "kafka_client": 1030,  # a Kafka client's transactional id got its epoch (kafka_txn.py)
}
KIND_OF_TYPE = {v: k for k, v in OWN_KINDS.items()}


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One state change: its kind and its fields (plain JSON-able values)."""

    kind: str
    data: dict[str, Any]


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError("string too long for a Kafka STRING")
    return struct.pack(">h", len(raw)) + raw


def _reader(buf: bytes) -> KafkaBytes:
    return KafkaBytes(buf, "__transaction_state record")


def encode_txn_value(d: dict[str, Any]) -> bytes:
    """TransactionLogValue v0 (Kafka's bytes)."""
    out = bytearray(struct.pack(">hqhib", TXN_VALUE_VERSION, d["pid"], d["epoch"],
                                d["timeout_ms"], d["state"]))
    parts = d.get("partitions")
    if parts is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(parts))
        for topic, ids in parts:
            out += _string(topic) + struct.pack(">i", len(ids))
            out += b"".join(struct.pack(">i", p) for p in ids)
    out += struct.pack(">qq", d["last_update_ms"], d["start_ms"])
    return bytes(out)


def decode_txn_value(buf: bytes) -> dict[str, Any]:
    r = _reader(buf)
    version = r.take(">h")
    if version not in (0,):
        raise LogFormatError(f"TransactionLogValue version {version} is not supported")
    d: dict[str, Any] = {"pid": r.take(">q"), "epoch": r.take(">h"),
                         "timeout_ms": r.take(">i"), "state": r.take(">b")}
    n = r.take(">i")
    if n < 0:
        d["partitions"] = None
    else:
        parts = []
        for _ in range(n):
            topic = r.string()
            parts.append([topic, [r.take(">i") for _ in range(r.take(">i"))]])
        d["partitions"] = parts
    d["last_update_ms"] = r.take(">q")
    d["start_ms"] = r.take(">q")
    return d


def to_kafka_record(rec: LogRecord, timestamp_ms: int
                    ) -> tuple[bytes, bytes | None, list[tuple[str, bytes]], int]:
    """``(key, value, headers, timestamp)`` for ``records.encode_batch``."""
    if rec.kind == "txn":
        d = rec.data
        key = struct.pack(">h", TXN_KEY_VERSION) + _string(d["tid"])
        if d.get("tombstone"):
            return key, None, [], timestamp_ms
        ext = json.dumps(d.get("ext") or {}, separators=(",", ":")).encode()
        return key, encode_txn_value(d), [(EXT_HEADER, ext)], timestamp_ms
    type_id = OWN_KINDS[rec.kind]
    key = struct.pack(">h", type_id) + _string(str(rec.data.get("id", "")))
    value = struct.pack(">h", 0) + json.dumps(rec.data, separators=(",", ":")).encode()
    return key, value, [], timestamp_ms


def from_kafka_record(record: Record) -> LogRecord:
    """Decode one stored record back into the LogRecord that produced it."""
    if record.key is None or len(record.key) < 2:
        raise LogFormatError(f"__transaction_state record at offset {record.offset} has no key")
    r = _reader(record.key)
    type_id = r.take(">h")
    ident = r.string()
    if type_id == TXN_KEY_VERSION:
        if record.value is None:
            return LogRecord("txn", {"tid": ident, "tombstone": True})
        d = decode_txn_value(record.value)
        d["tid"] = ident
        ext = dict(record.headers).get(EXT_HEADER)
        d["ext"] = json.loads(ext) if ext else {}
        return LogRecord("txn", d)
    kind = KIND_OF_TYPE.get(type_id)
    if kind is None or record.value is None or len(record.value) < 2:
        raise LogFormatError(
            f"unknown __transaction_state record type {type_id} at offset {record.offset}")
    return LogRecord(kind, json.loads(record.value[2:]))
