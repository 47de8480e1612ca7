"""Control records: transaction markers (COMMIT/ABORT) and Kafka's other control types.

A control batch holds one record whose key is ``int16 version, int16 type`` and, for
ABORT/COMMIT, whose value is the EndTxnMarker ``int16 version, int32 coordinatorEpoch``.
Parsing follows Kafka's tolerance rules (ControlRecordType.parseTypeId,
EndTransactionMarker.deserializeValue): unknown types are UNKNOWN (consumers ignore them),
higher versions are read as version 0, short buffers and negative versions are corrupt.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from ..errors import CorruptBatchError
from .batch_header import NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE
from .records import DecodedBatch, encode_batch

CONTROL_KEY = struct.Struct(">hh")
END_TXN_VALUE = struct.Struct(">hi")
CURRENT_CONTROL_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0
# A whole marker batch: 61-byte header + one record of 17 bytes.
MARKER_BATCH_SIZE = 78


class ControlType(IntEnum):
    """ControlRecordType ids; any id not listed parses as UNKNOWN."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @property
    def is_end_txn(self) -> bool:
        return self in (ControlType.ABORT, ControlType.COMMIT)


def control_key(control_type: ControlType | int) -> bytes:
    """The 4-byte key of a control record of ``control_type``."""
    if int(control_type) < 0:
        raise ValueError("cannot write a control record of UNKNOWN type")
    return CONTROL_KEY.pack(CURRENT_CONTROL_KEY_VERSION, int(control_type))


def end_txn_marker_value(coordinator_epoch: int) -> bytes:
    """The 6-byte EndTxnMarker value (version 0)."""
    return END_TXN_VALUE.pack(CURRENT_END_TXN_MARKER_VERSION, coordinator_epoch)


def parse_control_key(key: bytes | bytearray | memoryview | None) -> tuple[int, ControlType]:
    """(version, type) of a control record key, with Kafka's tolerance rules."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptBatchError(
            f"control record key has {0 if key is None else len(key)} bytes, need at least 4")
    version, type_id = CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptBatchError(f"invalid negative control record key version {version}")
    try:
        control_type = ControlType(type_id)
    except ValueError:
        control_type = ControlType.UNKNOWN
    return version, control_type


def parse_end_txn_marker(value: bytes | bytearray | memoryview | None) -> tuple[int, int]:
    """(version, coordinator_epoch) of an EndTxnMarker value; versions above 0 read as v0."""
    if value is None or len(value) < END_TXN_VALUE.size:
        raise CorruptBatchError(
            f"end transaction marker value has {0 if value is None else len(value)} bytes, "
            "need at least 6")
    version, coordinator_epoch = END_TXN_VALUE.unpack_from(value, 0)
    if version < 0:
        raise CorruptBatchError(f"invalid negative end transaction marker version {version}")
    return version, coordinator_epoch


# Kept under the name the module map uses.
parse_control_value = parse_end_txn_marker


def encode_control_batch(control_type: ControlType | int, *, producer_id: int,
                         producer_epoch: int, coordinator_epoch: int, base_offset: int,
                         timestamp_ms: int,
                         partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """One marker batch as the broker writes it (MemoryRecords.withEndTransactionMarker).

    Transactional + control attributes, baseSequence -1, one record with the control key
    and the EndTxnMarker value, base = max timestamp = ``timestamp_ms``: 78 bytes.
    """
    control_type = ControlType(control_type)
    if not control_type.is_end_txn:
        raise ValueError(f"only COMMIT and ABORT markers are written, not {control_type.name}")
    return encode_batch(
        [(control_key(control_type), end_txn_marker_value(coordinator_epoch), (), timestamp_ms)],
        base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE, transactional=True, control=True,
        partition_leader_epoch=partition_leader_epoch)


@dataclass(frozen=True, slots=True)
class Marker:
    """One transaction marker to write: which producer's transaction ends, and how."""

    control_type: ControlType
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    timestamp_ms: int


def encode_markers(markers: Sequence[Marker], *, base_offset: int = 0,
                   partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """Several marker batches at consecutive offsets from ``base_offset``, one object.

    This is how all markers of one partition for one coordinator round land in a single
    put: marker i gets offset ``base_offset + i``.
    """
    return b"".join(
        encode_control_batch(m.control_type, producer_id=m.producer_id,
                             producer_epoch=m.producer_epoch,
                             coordinator_epoch=m.coordinator_epoch, base_offset=base_offset + i,
                             timestamp_ms=m.timestamp_ms,
                             partition_leader_epoch=partition_leader_epoch)
        for i, m in enumerate(markers))


@dataclass(frozen=True, slots=True)
class ControlInfo:
    """What a control batch says: its type and, for markers, the coordinator epoch."""

    control_type: ControlType
    key_version: int
    coordinator_epoch: int | None


def control_info(batch: DecodedBatch) -> ControlInfo | None:
    """Parse the first record of a control batch (None for data or emptied batches)."""
    if not batch.header.is_control or not batch.records:
        return None
    first = batch.records[0]
    try:
        version, control_type = parse_control_key(first.key)
        epoch = None
        if control_type.is_end_txn:
            epoch = parse_end_txn_marker(first.value)[1]
    except CorruptBatchError as exc:
        raise CorruptBatchError(str(exc), position=batch.header.position,
                                offset=batch.header.base_offset) from None
    return ControlInfo(control_type, version, epoch)
