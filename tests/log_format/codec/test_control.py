"""Transaction markers: Kafka's exact 78-byte COMMIT batch and its tolerance rules."""

import struct

import pytest
from txnlog.log_format.codec.control import (
    ControlType,
    Marker,
    control_info,
    encode_control_batch,
    encode_markers,
    parse_control_key,
    parse_end_txn_marker,
)
from txnlog.log_format.codec.records import decode_batch, decode_batches, iter_batches
from txnlog.log_format.errors import CorruptBatchError

# kafka-format.md section 3: a COMMIT at offset 5 from a real Kafka 3.3 segment.
REAL_COMMIT = bytes.fromhex(
    "0000000000000005 00000042 00000000 02 3f7b394d 0030 00000000 0000018799fcd557 "
    "0000018799fcd557 0000000000000000 0000 ffffffff 00000001 "
    "20 00 00 00 08 00000001 0c 0000 00000000 00".replace(" ", ""))


def test_real_kafka_commit_reproduced_exactly() -> None:
    ours = encode_control_batch(ControlType.COMMIT, producer_id=0, producer_epoch=0,
                                coordinator_epoch=0, base_offset=5,
                                timestamp_ms=0x18799FCD557, partition_leader_epoch=0)
    assert len(ours) == 78
    assert ours == REAL_COMMIT
    batch = decode_batch(REAL_COMMIT)
    assert batch.header.crc == 1065040205
    assert batch.header.is_control and batch.header.is_transactional
    info = control_info(batch)
    assert info is not None
    assert (info.control_type, info.coordinator_epoch) == (ControlType.COMMIT, 0)


def test_abort_marker_fields() -> None:
    data = encode_control_batch(ControlType.ABORT, producer_id=77, producer_epoch=3,
                                coordinator_epoch=9, base_offset=100, timestamp_ms=1234)
    batch = decode_batch(data)
    h = batch.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (
        77, 3, -1, -1)
    assert (h.base_timestamp, h.max_timestamp, h.attributes) == (1234, 1234, 0x30)
    rec = batch.records[0]
    assert (rec.offset, rec.key, rec.value) == (100, b"\x00\x00\x00\x00",
                                                 b"\x00\x00\x00\x00\x00\x09")
    assert control_info(batch).control_type is ControlType.ABORT


def test_only_markers_are_written() -> None:
    with pytest.raises(ValueError):
        encode_control_batch(ControlType.LEADER_CHANGE, producer_id=1, producer_epoch=0,
                             coordinator_epoch=0, base_offset=0, timestamp_ms=0)


def test_encode_markers_consecutive_offsets() -> None:
    markers = [Marker(ControlType.COMMIT, 1, 0, 4, 10), Marker(ControlType.ABORT, 2, 5, 4, 11),
               Marker(ControlType.COMMIT, 3, 1, 4, 12)]
    obj = encode_markers(markers, base_offset=40)
    assert len(obj) == 3 * 78
    heads = list(iter_batches(obj))
    assert [(h.base_offset, h.producer_id, h.producer_epoch) for h in heads] == [
        (40, 1, 0), (41, 2, 5), (42, 3, 1)]
    types = [control_info(b).control_type for b in decode_batches(obj)]
    assert types == [ControlType.COMMIT, ControlType.ABORT, ControlType.COMMIT]
    assert encode_markers([]) == b""


def test_control_key_tolerance() -> None:
    assert parse_control_key(b"\x00\x00\x00\x01") == (0, ControlType.COMMIT)
    assert parse_control_key(b"\x00\x00\x00\x06") == (0, ControlType.KRAFT_VOTERS)
    # Unknown types are tolerated as UNKNOWN; higher versions parse as v0; extra bytes ignored.
    assert parse_control_key(b"\x00\x00\x00\x63") == (0, ControlType.UNKNOWN)
    assert parse_control_key(b"\x00\x00\xff\xff") == (0, ControlType.UNKNOWN)
    assert parse_control_key(b"\x00\x05\x00\x00extra") == (5, ControlType.ABORT)
    for bad in (b"", b"\x00\x00\x00", None, b"\xff\xff\x00\x00"):
        with pytest.raises(CorruptBatchError):
            parse_control_key(bad)


def test_end_txn_marker_tolerance() -> None:
    assert parse_end_txn_marker(struct.pack(">hi", 0, 17)) == (0, 17)
    assert parse_end_txn_marker(struct.pack(">hi", 3, -2) + b"more") == (3, -2)
    for bad in (b"", b"\x00\x00\x00\x00\x00", None, struct.pack(">hi", -1, 0)):
        with pytest.raises(CorruptBatchError):
            parse_end_txn_marker(bad)
