"""Retention and DeleteRecords: moving a partition's log start offset, deleting whole
segments.

Kafka's ``UnifiedLog.deleteOldSegments`` runs every ``log.retention.check.interval.ms`` and
deletes, oldest first, the segments that breach one of three predicates:

- ``retention.ms`` (``deleteRetentionMsBreachedSegments``): the segment's largest record
  timestamp is more than ``retention.ms`` before now;
- ``retention.bytes`` (``deleteRetentionSizeBreachedSegments``): the partition is bigger
  than ``retention.bytes`` by at least the segment's size;
- the log start offset (``deleteLogStartOffsetBreachedSegments``): the segment lies wholly
  below it (DeleteRecords moved it there).

The first two apply only with ``cleanup.policy`` containing ``delete``; -1 turns each off.
Only whole closed segments go (level 0 of the manifest: what Kafka calls inactive
segments; the open segment's runs and small objects stay until the segment is rolled by
``segment.bytes``/``segment.ms``), and after deleting, the log start offset is at least the
next segment's base (``maybeIncrementLogStartOffset``). DeleteRecords moves the log start
offset to any offset up to the high watermark, inside a segment too; readers then answer
OffsetOutOfRange below it.

Readers learn the log start offset from the partition's manifest (``log_start`` field), so
a change is published as a new manifest, in the same three durable steps as a merge:

1. log ``retain`` (the plan: manifest seq, how many leading objects go, the new log start);
2. write manifest ``seq`` (put-if-absent; a restart writes the same bytes: the plan fixes
   them);
3. log ``retained``: the dropped segments and the previous manifest become garbage, deleted
   by the merger's cleanup after ``file.delete.delay.ms`` (readers in flight finish).

The role runs inside the merger's task (``LogMerger.hooks``), so a retention and a merge of
one partition never interleave: both write the partition's next manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from txnlog.log_format import layout
from txnlog.log_format.manifest import MIN_GRACE_MS, new_manifest

from .. import faults
from ..errors import (
    OffsetOutOfRangeError,
    PolicyViolationError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from ..state.merge_state import PartitionMerges
from ..state.partition_state import partition_key
from ..state.retention_state import RetainPlan
from ..state.txn_log_records import LogRecord

if TYPE_CHECKING:
    from ..state.coordinator_state import CoordinatorState
    from ..state.runtime import Commits, Observer, StorageIO

log = logging.getLogger("txnlog.coordinator.maintenance.log_retention")

# Kafka's log.retention.check.interval.ms
DEFAULT_CHECK_INTERVAL_MS = 300_000


def now_ms() -> int:
    return int(time.time() * 1000)


# ----------------------------------------------------------------------- what to drop
def _int(cfg: dict[str, str], name: str) -> int:
    return int(cfg[name])


def choose_drop(pm: PartitionMerges, cfg: dict[str, str], wanted: int, now: int,
                small_bytes: int) -> tuple[int, int, str]:
    """(objects to drop from the front, the new log start offset, why) for one partition.

    Kafka's three predicates each take a prefix of the closed segments; the union of
    prefixes is the longest. ``small_bytes``: the bytes not merged yet (they count towards
    the partition's size for ``retention.bytes``)."""
    objects = pm.objects
    # closed segments (level 0) are a prefix: the open segment's runs follow them; every
    # predicate stops at the first segment it keeps, so a pass with nothing due costs O(1)
    # per partition, not O(history)
    n_closed = 0
    while n_closed < len(objects) and objects[n_closed].level == 0 \
            and objects[n_closed].end_offset <= wanted:
        n_closed += 1
    n_start = n_closed
    n_ms = n_bytes = 0
    if "delete" in cfg["cleanup.policy"].replace(" ", "").split(","):
        retention_ms = _int(cfg, "retention.ms")
        if retention_ms >= 0:
            while n_ms < len(objects) and objects[n_ms].level == 0 \
                    and objects[n_ms].max_timestamp >= 0 \
                    and now - objects[n_ms].max_timestamp > retention_ms:
                n_ms += 1
        retention_bytes = _int(cfg, "retention.bytes")
        if retention_bytes >= 0:
            diff = sum(o.size for o in objects) + small_bytes - retention_bytes
            while n_bytes < len(objects) and objects[n_bytes].level == 0 \
                    and diff - objects[n_bytes].size >= 0:
                diff -= objects[n_bytes].size
                n_bytes += 1
    drop = max(n_start, n_ms, n_bytes)
    reasons = [name for name, n in (("log_start", n_start), ("retention.ms", n_ms),
                                    ("retention.bytes", n_bytes)) if n == drop and n]
    log_start = max(pm.log_start, wanted, objects[drop - 1].end_offset if drop else 0)
    return drop, log_start, ",".join(reasons) or "delete_records"


class LogRetention:
    """The retention and DeleteRecords role of one coordinator (runs in the merger's task)."""

    def __init__(self, state: CoordinatorState, commits: Commits, io: StorageIO,
                 observer: Observer, published_hw: Any, kick: Any,
                 check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
                 enabled: bool = True) -> None:
        self.state = state
        self.commits = commits
        self.io = io
        self.storage = io.storage
        self.observer = observer
        self.published_hw = published_hw  # (topic, partition) -> the published HW
        self.kick = kick  # wake the merger's loop
        self.check_interval_ms = check_interval_ms
        self.enabled = enabled
        self._last_check = 0
        self._waiters: list[asyncio.Future[None]] = []  # DeleteRecords waiting for a pass
        self.segments_deleted = 0

    # ------------------------------------------------------------------- the pass
    async def tick(self, now: int | None = None) -> int:
        """Finish planned changes, then (each check interval) apply retention and every
        DeleteRecords not published yet; log start changes published."""
        now = now_ms() if now is None else now
        done = await self.finish_deletes()
        for plan in list(self.state.retain_planned.values()):
            await self._publish(plan)
            done += 1
        keys = [k for k, off in self.state.log_start_wanted.items()
                if off > self._pm(k).log_start]
        if self.enabled and now - self._last_check >= self.check_interval_ms:
            self._last_check = now
            keys += [k for k, pm in self.state.merges.items() if pm.objects]
        configs: dict[str, dict[str, str]] = {}  # one effective config per topic a pass
        for i, key in enumerate(dict.fromkeys(keys)):
            if await self.retain_once(key, now, configs):
                done += 1
            if i % 1000 == 999:
                await asyncio.sleep(0)  # a pass over many partitions lets commits through
        if done:
            self._notify()
        return done

    def _pm(self, key: str) -> PartitionMerges:
        return self.state.merges.get(key) or PartitionMerges()

    async def retain_once(self, key: str, now: int,
                          configs: dict[str, dict[str, str]] | None = None) -> bool:
        topic, _, p_text = key.rpartition("-")
        if topic not in self.state.topics or not p_text.isdigit():
            return False
        p = int(p_text)
        pm = self._pm(key)
        if pm.planned is not None or key in self.state.retain_planned:
            return False  # a merge is being finished: next tick
        cfg = configs.get(topic) if configs is not None else None
        if cfg is None:
            cfg = self.state.topic_config(topic)
            if configs is not None:
                configs[topic] = cfg
        small = 0
        if _int(cfg, "retention.bytes") >= 0 and pm.objects:
            small = await self._small_bytes(topic, p, pm.merged_end)
        wanted = self.state.log_start_wanted.get(key, 0)
        drop, log_start, reason = choose_drop(pm, cfg, wanted, now, small)
        if drop == 0 and log_start <= pm.log_start:
            return False
        grace = max(MIN_GRACE_MS, _int(cfg, "file.delete.delay.ms"))
        plan = RetainPlan(topic, p, pm.seq + 1, drop, log_start, reason, grace, now)
        await self.commits.commit([LogRecord("retain", plan.to_record())])
        faults.point("after_retain_plan")
        await self._publish(plan)
        if drop:
            log.info("%s: log start offset %d -> %d, %d segment(s) deleted (%s)", key,
                     pm.log_start, log_start, drop, reason)
        return True

    async def _small_bytes(self, topic: str, p: int, merged_end: int) -> int:
        after = f"{merged_end:0{layout.OFFSET_DIGITS}d}" if merged_end else None
        listing = await self.io.run(self.storage.list, layout.partition_dir(topic, p), after)
        total = 0
        for obj in listing:
            parsed = layout.parse_segment_name(obj.name)
            if parsed is not None and parsed.suffix == layout.LOG_SUFFIX \
                    and parsed.base_offset >= merged_end:
                total += obj.size
        return total

    async def _publish(self, plan: RetainPlan) -> None:
        """Write the plan's manifest (the same bytes after a restart), log ``retained``."""
        key = partition_key(plan.topic, plan.partition)
        man = plan.manifest(self._pm(key))
        ok = await self.io.run(self.storage.put_if_absent, man.path, man.to_json())
        if not ok:
            raise RuntimeError(f"{self.storage.url}/{man.path} holds another manifest than "
                               f"retention plan #{plan.seq} computes")
        self.observer.object_written("manifest")
        faults.point("after_retain_manifest")
        await self.commits.commit([LogRecord("retained", {"id": key, "seq": plan.seq,
                                                          "ms": now_ms()})])
        self.segments_deleted += plan.drop

    # ------------------------------------------------------------ DeleteTopics
    async def finish_deletes(self) -> int:
        """Delete every object of the topics being deleted (all levels of each partition
        directory), write each partition's next manifest (empty, starting at its log end
        offset: what a re-created topic continues from), log ``topic_delete`` done."""
        done = 0
        for name, n in list(self.state.topics_deleting.items()):
            for p in range(n):
                deleted = await self.io.run(self._delete_tree, layout.partition_dir(name, p))
                self.observer.object_written("deleted", deleted)
                pm = self._pm(partition_key(name, p))
                if pm.start_offset > 0:
                    man = new_manifest(name, p, pm.seq + 1, [], pm.start_offset, 0,
                                       MIN_GRACE_MS, now_ms(), pm.log_start)
                    await self.io.run(self.storage.put, man.path, man.to_json())
            faults.point("after_topic_delete_data")
            await self.commits.commit([LogRecord("topic_delete", {
                "id": name, "name": name, "partitions": n, "done": True})])
            log.info("topic %s deleted (%d partitions)", name, n)
            done += 1
        return done

    def _delete_tree(self, directory: str) -> int:
        total = 0
        stack = [directory]
        while stack:
            d = stack.pop()
            stack.extend(f"{d}/{sub}" for sub in self.storage.list_dirs(d))
            names = [f"{d}/{o.name}" for o in self.storage.list(d)]
            if names:
                self.storage.delete_many(names)
                total += len(names)
        return total

    # ------------------------------------------------------------ DeleteRecords
    def _notify(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def delete_records(self, parts: list[tuple[str, int, int]],
                             timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Kafka's DeleteRecords: move each partition's log start offset to ``offset``
        (-1: the high watermark); answers each partition's new low watermark once readers
        see it (its manifest is durable). An offset above the high watermark is
        OffsetOutOfRange, an unknown partition UnknownTopicOrPartition; nothing is changed
        then."""
        records = []
        targets: dict[str, int] = {}
        for topic, p, offset in parts:
            meta = self.state.topics.get(topic)
            if meta is None or not 0 <= p < int(meta["partitions"]):
                raise UnknownTopicOrPartitionError(f"{topic}-{p} does not exist")
            policy = self.state.topic_config(topic)["cleanup.policy"]
            if "delete" not in policy.replace(" ", "").split(","):
                raise PolicyViolationError(
                    f"records of {topic}-{p} cannot be deleted: its cleanup.policy is "
                    f"{policy!r} (Kafka refuses DeleteRecords without 'delete')")
            hw = self.published_hw(topic, p)
            if offset == -1:
                offset = hw
            if offset < 0 or offset > hw:
                raise OffsetOutOfRangeError(
                    f"{topic}-{p}: cannot delete records before offset {offset}: the high "
                    f"watermark is {hw} (use -1 for the high watermark)")
            key = partition_key(topic, p)
            targets[key] = offset
            if offset > max(self.state.log_start_wanted.get(key, 0), self._pm(key).log_start):
                records.append(LogRecord("log_start", {"id": key, "topic": topic, "p": p,
                                                       "offset": offset}))
        if records:
            await self.commits.commit(records)
        deadline = time.monotonic() + timeout_s
        while any(self._pm(k).log_start < off for k, off in targets.items()):
            if time.monotonic() > deadline:
                raise RequestTimedOutError(
                    "DeleteRecords: the new log start offsets are logged (they will be "
                    f"published) but were not published within {timeout_s} s")
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            self.kick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, 1.0)
        return [{"topic": k.rsplit("-", 1)[0], "partition": int(k.rsplit("-", 1)[1]),
                 "low_watermark": self._pm(k).log_start} for k in targets]
