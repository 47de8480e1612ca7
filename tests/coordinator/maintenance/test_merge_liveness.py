"""Merging runs by itself: a backlog is merged whether or not commits touch it again.

What the merger looks at (``LogMerger.dirty``) lives in the process. The chaos harness found
two ways a partition kept its small objects for good: a coordinator that started after a
restart knew nothing of what its predecessor left unmerged (a coordinator-kill run ended
with 600+ small objects above M in three partitions, and every fresh reader listed them),
and a tick whose merge budget ran out dropped the partitions it had not reached. Both are
driven here tick by tick, in process, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from txnlog.coordinator.maintenance import log_merger
from txnlog.coordinator.maintenance.merge_policy import MergeSettings
from txnlog.coordinator.state.txn_log import TxnLog, recover
from txnlog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from txnlog.log_format.manifest import read_latest_manifest
from txnlog.log_format.storage import Storage

from tests.coordinator.transaction.test_stable_delta import Producer

# no merge unless a test ticks (the loop's own tick comes once an hour)
IDLE_LOOP = dict(min_objects=4, fanout=3, interval_s=3600.0)


def _snapshot_every_write(engine: TransactionCoordinator, recovered: Any) -> TxnLog:
    """A log that snapshots at every write: a successor replays (almost) nothing, so it
    learns what is unmerged from the state alone, as after a long-running predecessor."""
    return TxnLog(engine.storage, recovered.next_offset, snapshot_fn=engine.to_snapshot,
                  snapshot_offsets=recovered.snapshot_offsets,
                  protected_fn=lambda: list(engine.takeover_offsets),
                  on_fatal=lambda exc: None, snapshot_every_objects=1)


async def _start(st: Storage, settings: MergeSettings) -> TransactionCoordinator:
    engine = TransactionCoordinator(st, merge_settings=settings)
    await engine.start(_snapshot_every_write, await asyncio.to_thread(recover, st))
    return engine


async def _backlog(st: Storage, partitions: int, txns: int) -> None:
    """A coordinator that never merges (too few objects for its policy) leaves ``txns``
    commits' small objects in each partition, then stops."""
    first = await _start(st, MergeSettings(min_objects=10_000, interval_s=0.05))
    await first.create_topic("t", partitions)
    prod = Producer(first, st, "x")
    for _ in range(txns):
        await prod.txn([("t", p) for p in range(partitions)])
    for _ in range(200):  # its merger looked once (the root is marked swept: no sweep later)
        if first.state.merge_swept:
            break
        await asyncio.sleep(0.05)
    assert first.state.merge_swept
    await first.stop()


async def _tick_until_merged(engine: TransactionCoordinator, st: Storage,
                             partitions: list[int], ticks: int) -> dict[int, int]:
    """Merged end per partition after at most ``ticks`` ticks (0: nothing merged)."""
    ends: dict[int, int] = {}
    for _ in range(ticks):
        await engine.merger.tick()
        ends = {p: (m.end_offset if (m := read_latest_manifest(st, "t", p)) else 0)
                for p in partitions}
        if all(ends.values()):
            break
        await asyncio.sleep(0.05)  # the first tick waits for this coordinator's first head
    return ends


def test_a_restarted_coordinator_merges_the_backlog_no_commit_touches_again(
        file_root: str) -> None:
    st = Storage.for_url(file_root)

    async def scenario() -> None:
        await _backlog(st, 1, 12)
        second = await _start(st, MergeSettings(**IDLE_LOOP))
        try:
            ends = await _tick_until_merged(second, st, [0], 100)
            assert ends[0] >= 8, ends  # no commit since the restart: found by itself
        finally:
            await second.stop()

    asyncio.run(scenario())


def test_partitions_a_tick_had_no_budget_for_are_merged_by_the_next(
        file_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    st = Storage.for_url(file_root)
    monkeypatch.setattr(log_merger, "MERGES_PER_TICK", 1)

    async def scenario() -> None:
        await _backlog(st, 3, 8)
        second = await _start(st, MergeSettings(**IDLE_LOOP))
        try:
            ends = await _tick_until_merged(second, st, [0, 1, 2], 100)
            assert all(e >= 8 for e in ends.values()), ends
        finally:
            await second.stop()

    asyncio.run(scenario())


async def _merged_end(st: Storage, p: int = 0) -> int:
    man = await asyncio.to_thread(read_latest_manifest, st, "t", p)
    return man.end_offset if man is not None else 0


def test_a_tail_too_small_for_a_run_closes_by_segment_ms_with_no_more_appends(
        file_root: str) -> None:
    """A few commits, then nothing: once older than ``segment.ms`` they are one closed
    segment (all but the last object, whose end a later append would tell), found by the
    merger's own timer — no commit touches the partition again, no run was ever made."""
    st = Storage.for_url(file_root)

    async def scenario() -> None:
        engine = await _start(st, MergeSettings(min_objects=1000, interval_s=3600.0))
        try:
            await engine.create_topic("t", 1, {"segment.ms": "300"})
            prod = Producer(engine, st, "x")
            for _ in range(5):
                await prod.txn([("t", 0)])
            leo = engine.state.partition("t-0").leo
            await engine.merger.tick()
            assert await _merged_end(st) == 0  # younger than segment.ms: nothing due
            await asyncio.sleep(0.4)
            for _ in range(20):
                await engine.merger.tick()
                if await _merged_end(st):
                    break
                await asyncio.sleep(0.05)
            man = await asyncio.to_thread(read_latest_manifest, st, "t", 0)
            # every run, the last one too (a run's end is known: it needs no successor)
            assert man is not None and man.end_offset == leo, (man, leo)
            assert [o.level for o in man.objects] == [0]
            looks = engine.merger.quiet.get("t-0")
            assert looks is not None  # nothing left to merge: no LIST at every tick
        finally:
            await engine.stop()

    asyncio.run(scenario())


def test_an_idle_partitions_few_objects_become_a_run(file_root: str) -> None:
    """The idle rule merges: a partition with no append for ``idle_ms`` has its few small
    objects made a run (before, the look found fewer than ``min_objects``, did nothing, and
    dropped the partition from what it looks at)."""
    st = Storage.for_url(file_root)

    async def scenario() -> None:
        engine = await _start(st, MergeSettings(min_objects=1000, interval_s=3600.0,
                                                idle_ms=300))
        try:
            await engine.create_topic("t", 1)
            prod = Producer(engine, st, "x")
            for _ in range(3):
                await prod.txn([("t", 0)])
            await asyncio.sleep(0.4)
            for _ in range(20):
                await engine.merger.tick()
                if await _merged_end(st):
                    break
                await asyncio.sleep(0.05)
            man = await asyncio.to_thread(read_latest_manifest, st, "t", 0)
            assert man is not None and [o.level for o in man.objects] == [1], man
            assert man.end_offset == engine.state.partition("t-0").leo  # the last run too
        finally:
            await engine.stop()

    asyncio.run(scenario())


def test_a_compacted_topic_rolls_its_open_segment_within_max_compaction_lag(
        file_root: str) -> None:
    """KIP-354: with Kafka's default ``segment.ms`` (7 days) the open segment of a
    compacted topic still closes once its first record is ``max.compaction.lag.ms`` old
    (Kafka's ``LogConfig.maxSegmentMs``), so the cleaner, which never touches the open
    segment, can compact it within the lag; a topic that does not compact keeps it open."""
    st = Storage.for_url(file_root)

    async def scenario() -> None:
        engine = await _start(st, MergeSettings(min_objects=1000, interval_s=3600.0))
        try:
            lag = {"max.compaction.lag.ms": "300"}
            await engine.create_topic("t", 2, {"cleanup.policy": "compact", **lag})
            await engine.create_topic("d", 1, {"cleanup.policy": "delete", **lag})
            prod = Producer(engine, st, "x")
            for i in range(4):
                await prod.txn([("t", 0), ("d", 0)], commit=i % 2 == 0)
            await asyncio.sleep(0.4)
            for _ in range(20):
                await engine.merger.tick()
                if await _merged_end(st):
                    break
                await asyncio.sleep(0.05)
            man = await asyncio.to_thread(read_latest_manifest, st, "t", 0)
            assert man is not None and \
                man.end_offset == engine.state.partition("t-0").leo  # the last run too
            assert man.objects[0].level == 0
            assert await asyncio.to_thread(read_latest_manifest, st, "d", 0) is None
        finally:
            await engine.stop()

    asyncio.run(scenario())


def test_each_merge_reads_its_inputs_and_writes_its_output_once(
        file_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge is built, logged, written and published once. The merger used to check that
    the state's plan was still "its" plan by identity, while the state holds the plan parsed
    back from the log record (an equal, other object): every merge stopped after writing its
    output, and the next look finished it as if after a restart, reading every input and
    writing (and reading back) the output a second time."""
    from txnlog.log_format.storage.local import LocalStorage

    st = Storage.for_url(file_root)
    puts: list[str] = []
    reads: list[tuple[str, int | None]] = []
    put_if_absent, get = LocalStorage.put_if_absent, LocalStorage.get

    def counting_put(self: LocalStorage, path: str, data: bytes) -> bool:
        puts.append(path)
        return put_if_absent(self, path, data)

    def counting_get(self: LocalStorage, path: str, start: int | None = None,
                     end: int | None = None) -> bytes:
        reads.append((path, start))
        return get(self, path, start, end)

    async def scenario() -> None:
        await _backlog(st, 2, 12)
        second = await _start(st, MergeSettings(**IDLE_LOOP))
        try:
            monkeypatch.setattr(LocalStorage, "put_if_absent", counting_put)
            monkeypatch.setattr(LocalStorage, "get", counting_get)
            ends = await _tick_until_merged(second, st, [0, 1], 100)
            assert all(e >= 8 for e in ends.values()), ends
            for _ in range(3):  # later looks finish nothing again
                await second.merger.tick()
            assert second.merger.merges_done >= 2
        finally:
            await second.stop()

    asyncio.run(scenario())
    outputs = [p for p in puts if p.startswith("t-")]  # runs, their indexes, manifests
    assert any("/runs/" in p for p in outputs), puts
    assert len(outputs) == len(set(outputs)), sorted(outputs)  # each written once
    inputs = [r for r in reads if r[0].startswith("_wal/")]  # the commits' shared objects
    assert len(inputs) >= 16, reads
    assert len(inputs) == len(set(inputs)), sorted(inputs)  # each run read once
