"""The bytes of ``__consumer_offsets``: which partition a group lives in, and the
OffsetCommit record a transactional offset commit writes there.

Kafka's GroupCoordinator owns these; here they are pure functions of their arguments (no
storage), so the coordinator, tools and tests agree on the partition and on the bytes, and
kafka-dump-log / Kafka's own consumers read them as Kafka's.
"""

from __future__ import annotations

import struct

OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, int32 overflow)."""
    raw = s.encode("utf-16-be")
    h = 0
    for unit in struct.unpack(f">{len(raw) // 2}H", raw):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group_id: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """Kafka's GroupCoordinator.partitionFor: Utils.abs(groupId.hashCode) % n."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _short_string(x: str) -> bytes:
    raw = x.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_offset_commit(group: str, topic: str, partition: int, offset: int,
                         metadata: str, timestamp: int, leader_epoch: int = -1
                         ) -> tuple[bytes, bytes]:
    """Kafka's OffsetCommitKey v1 and OffsetCommitValue v3 bytes."""
    key = struct.pack(">h", 1) + _short_string(group) + _short_string(topic) \
        + struct.pack(">i", partition)
    value = struct.pack(">hqi", 3, offset, leader_epoch) + _short_string(metadata) \
        + struct.pack(">q", timestamp)
    return key, value
