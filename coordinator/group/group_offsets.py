"""Consumer-group offsets committed inside a transaction (Kafka's TxnOffsetCommit).

Kafka's producer sends AddOffsetsToTxn to the transaction coordinator and TxnOffsetCommit to
the group coordinator, which writes OffsetCommit records to ``__consumer_offsets`` and makes
them visible when the marker arrives. Here one call does both: the OffsetCommit records are
a transactional batch of the producer in the group's ``__consumer_offsets`` partition (so
the markers commit or abort them like any data), and the offsets join the transaction, to be
readable by ``committed`` once it commits (applied with its CompleteCommit record).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.codec.consumer_offsets import (
    OFFSETS_PARTITIONS,
    encode_offset_commit,
    offsets_partition,
)
from txnlog.log_format.codec.records import encode_batch

from ..errors import ConcurrentTransactionsError, InvalidRequestError, ProducerFencedError
from ..state.coordinator_state import CoordinatorState
from ..state.partition_state import partition_key
from ..state.runtime import Commits, StorageIO
from ..state.states import TxnState
from ..state.txn_log_records import LogRecord
from ..state.txn_metadata import now_ms

Reserve = Callable[[int, int, list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]]
EnsureTopic = Callable[[str, int, dict[str, Any]], Awaitable[Any]]


OFFSETS_SEGMENT_BYTES = 100 * 1024 * 1024


def _entry(o: dict[str, Any]) -> list[Any]:
    """An offset of the ``offsets`` log record: [topic, partition, offset], then
    [metadata, leader epoch] where either is not the default ("", -1), so records of
    offsets without them keep their old bytes."""
    out: list[Any] = [o["topic"], o["partition"], o["offset"]]
    metadata, epoch = str(o.get("metadata") or ""), int(o.get("leader_epoch", -1))
    if metadata or epoch != -1:
        out += [metadata, epoch]
    return out


class GroupOffsets:
    """Transactional offset commits and the committed offsets of each group."""

    def __init__(self, state: CoordinatorState, commits: Commits, io: StorageIO,
                 reserve: Reserve, ensure_topic: EnsureTopic) -> None:
        self.state = state
        self.commits = commits
        self.io = io
        self._reserve = reserve
        self._ensure_topic = ensure_topic

    async def _ensure_offsets_topic(self) -> None:
        name = layout.CONSUMER_OFFSETS_TOPIC
        if name not in self.state.topics:
            # Kafka's offsets.topic.segment.bytes: closed segments come at 100 MiB (not the
            # 1 GiB default), so the log cleaner keeps a group's offsets cheap to read
            await self._ensure_topic(name, OFFSETS_PARTITIONS, {
                "cleanup.policy": "compact", "segment.bytes": str(OFFSETS_SEGMENT_BYTES)})

    async def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str,
                          offsets: list[dict[str, Any]], protocol_type: str | None = None
                          ) -> dict[str, Any]:
        """AddOffsetsToTxn + TxnOffsetCommit: OffsetCommit records in the transaction.
        ``protocol_type``: the group's, when a member of a generation commits (kept for
        ListGroups once the group is Empty)."""
        if not isinstance(group_id, str) or not group_id:
            raise InvalidRequestError("group_id must be a non-empty string")
        if not offsets:
            raise InvalidRequestError("offsets must not be empty")
        await self._ensure_offsets_topic()
        txn = self.state.txn(tid)
        txn.check_epoch(pid, epoch)
        if txn.completing:
            raise ConcurrentTransactionsError(f"{tid!r} is completing its transaction")
        topic = layout.CONSUMER_OFFSETS_TOPIC
        p = offsets_partition(group_id)
        seq = self.state.producers[pid].expected_sequence(partition_key(topic, p), epoch)
        res = await self._reserve(pid, epoch, [{"topic": topic, "partition": p,
                                                "base_sequence": seq, "count": len(offsets)}])
        base = res[0]["base_offset"]
        ts = now_ms()
        recs = []
        for o in offsets:
            key, value = encode_offset_commit(group_id, o["topic"], o["partition"],
                                              o["offset"], o.get("metadata", ""), ts,
                                              int(o.get("leader_epoch", -1)))
            recs.append((key, value, [], ts))
        data = encode_batch(recs, base_offset=base, producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)
        path = layout.segment_path(topic, p, base)
        ok = await self.io.call(self.io.storage.put_if_absent, path, data)
        if not ok or txn.state is not TxnState.ONGOING or (txn.pid, txn.epoch) != (pid, epoch):
            raise ProducerFencedError(
                f"the transaction of {tid!r} ended before its offsets were written")
        await self.commits.commit([
            LogRecord("confirm", {"id": str(pid), "pid": pid, "parts": [[topic, p, base]]}),
            LogRecord("offsets", {"id": tid, "tid": tid, "group": group_id,
                                  "offsets": [_entry(o) for o in offsets],
                                  **({"protocol_type": protocol_type} if protocol_type
                                     else {})})])
        return {"partition": p, "base_offset": base}

    def committed_metadata(self, group_id: str) -> dict[str, list[Any]]:
        """``{"t-p": [metadata, leader epoch]}`` of the group's committed offsets that
        were committed with either (Kafka's OffsetFetch answers them); others have "" and
        -1. Read after ``committed``, which waits for the log."""
        return {k: list(v) for k, v in self.state.group_offset_meta.get(group_id, {}).items()}

    async def committed(self, group_id: str) -> dict[str, int]:
        """The group's committed offsets, ``{"t-p": offset}`` (once what is logged is
        durable, so nothing answered is lost in a crash)."""
        await self.commits.sync()
        return dict(self.state.group_offsets.get(group_id, {}))
