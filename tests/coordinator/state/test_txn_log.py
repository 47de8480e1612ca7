"""The coordinator's own log in-process: group commit, snapshots, pruning and fencing.

The race here was found by the chaos harness (two-coordinators on S3, once snapshots came
every few seconds): a coordinator loading from a snapshot that the serving one has since
superseded twice and pruned below writes its takeover at an offset whose object was
deleted, and put-if-absent lets it. Both then served, and reused partition offsets.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from txnlog.coordinator.errors import NotCoordinatorError
from txnlog.coordinator.state.txn_log import FencedError, TxnLog, recover
from txnlog.coordinator.state.txn_log_records import LogRecord
from txnlog.log_format.layout import TRANSACTION_STATE_DIR, txn_state_log_path
from txnlog.log_format.storage import Storage


def _takeover(epoch: int, offset: int) -> LogRecord:
    return LogRecord("takeover", {"id": "", "epoch": epoch, "log_offset": offset, "ms": 0,
                                  "pid": 1})


def _new_log(storage: Storage, next_offset: int, fatal: list[BaseException]) -> TxnLog:
    return TxnLog(storage, next_offset, snapshot_fn=lambda: {"state": "opaque"},
                  protected_fn=lambda: [0], on_fatal=fatal.append,
                  snapshot_every_records=10**9, snapshot_every_objects=2,
                  snapshot_every_s=10**9)


async def _settle(log: TxnLog) -> None:
    if log._snapshot_task is not None:  # snapshot written, old objects pruned
        await log._snapshot_task


def test_takeover_on_a_pruned_offset_is_fenced(every_root: str) -> None:
    storage = Storage.for_url(every_root)

    async def scenario() -> None:
        fatal_a: list[BaseException] = []
        a = _new_log(storage, 0, fatal_a)
        a.start()
        await a.append([_takeover(1, 0)])
        for _ in range(2):
            await a.append([_takeover(1, 0)])
            await _settle(a)
        stale = recover(storage)  # what a second coordinator loads ...
        for _ in range(6):  # ... while the first writes on, snapshots and prunes
            await a.append([_takeover(1, 0)])
            await _settle(a)
        assert stale.next_offset < a.next_offset
        assert not storage.exists(txn_state_log_path(stale.next_offset)), \
            "precondition: the object at the stale next offset was pruned"
        fatal_b: list[BaseException] = []
        b = _new_log(storage, stale.next_offset, fatal_b)
        b.start()
        with pytest.raises(NotCoordinatorError, match="moved on"):
            await b.append([_takeover(2, stale.next_offset)])
        assert isinstance(fatal_b[0], FencedError)
        # the serving coordinator goes on; recovery reads its log, not the stray object
        await a.append([_takeover(1, 0)])
        assert not fatal_a
        assert recover(storage).next_offset == a.next_offset
        await a.close()
        with contextlib.suppress(NotCoordinatorError):  # close() re-raises the failure
            await b.close()

    asyncio.run(scenario())


def test_takeover_at_the_end_of_the_log_serves_and_fences_the_old_one(every_root: str
                                                                      ) -> None:
    storage = Storage.for_url(every_root)

    async def scenario() -> None:
        fatal_a: list[BaseException] = []
        a = _new_log(storage, 0, fatal_a)
        a.start()
        for _ in range(5):
            await a.append([_takeover(1, 0)])
            await _settle(a)
        fatal_b: list[BaseException] = []
        b = _new_log(storage, recover(storage).next_offset, fatal_b)
        b.start()
        await b.append([_takeover(2, b.next_offset)])  # the real end: B serves
        assert not fatal_b
        with pytest.raises(NotCoordinatorError, match="fenced"):
            await a.append([_takeover(1, 0)])
        assert isinstance(fatal_a[0], FencedError)
        assert any(o.name.endswith(".log") for o in storage.list(TRANSACTION_STATE_DIR))
        with contextlib.suppress(NotCoordinatorError):  # close() re-raises the failure
            await a.close()
        await b.close()

    asyncio.run(scenario())


def test_a_takeover_that_loses_the_race_replays_the_serving_ones_writes(every_root: str
                                                                        ) -> None:
    """A coordinator started while the old one still writes (its last CompleteCommit) loses
    the put-if-absent race for the log's end: it has written nothing, so it replays what
    the other wrote and takes over after it; the old one is fenced at its next write."""
    storage = Storage.for_url(every_root)

    async def scenario() -> None:
        fatal_a: list[BaseException] = []
        a = _new_log(storage, 0, fatal_a)
        a.start()
        await a.append([_takeover(1, 0)])
        loaded = recover(storage)  # what B loads ...
        late = [LogRecord("takeover", {"id": "", "epoch": 1, "log_offset": n, "ms": n,
                                       "pid": 1}) for n in (7, 8, 9)]
        await a.append(late[:2])  # ... while A writes on (two objects)
        await a.append(late[2:])
        fatal_b: list[BaseException] = []
        b = _new_log(storage, loaded.next_offset, fatal_b)
        replayed: list[LogRecord] = []
        applied: list[LogRecord] = []
        mine = await b.take_over(lambda offset: _takeover(2, offset), replayed.extend,
                                 applied.append)
        assert [r.data["ms"] for r in replayed] == [7, 8, 9]
        assert applied == [mine] and mine.data["log_offset"] == a.next_offset
        assert b.next_offset == a.next_offset + 1 and not fatal_b
        b.start()
        with pytest.raises(NotCoordinatorError, match="fenced"):
            await a.append([_takeover(1, 0)])
        assert isinstance(fatal_a[0], FencedError)
        after = recover(storage)
        assert after.next_offset == b.next_offset
        assert after.records[-1].data["epoch"] == 2
        with contextlib.suppress(NotCoordinatorError):
            await a.close()
        await b.close()

    asyncio.run(scenario())


def test_a_takeover_on_a_pruned_offset_is_fenced_not_replayed(every_root: str) -> None:
    """The same race, but the serving one snapshotted twice and pruned since B loaded: B's
    view is gone, it cannot replay, and it is fenced without applying anything."""
    storage = Storage.for_url(every_root)

    async def scenario() -> None:
        fatal_a: list[BaseException] = []
        a = _new_log(storage, 0, fatal_a)
        a.start()
        for _ in range(3):
            await a.append([_takeover(1, 0)])
            await _settle(a)
        stale = recover(storage)
        for _ in range(6):
            await a.append([_takeover(1, 0)])
            await _settle(a)
        assert not storage.exists(txn_state_log_path(stale.next_offset))
        fatal_b: list[BaseException] = []
        b = _new_log(storage, stale.next_offset, fatal_b)
        applied: list[LogRecord] = []
        with pytest.raises(FencedError, match="moved on"):
            await b.take_over(lambda offset: _takeover(2, offset), applied.extend,
                              applied.append)
        assert not applied and isinstance(fatal_b[0], FencedError)
        await a.append([_takeover(1, 0)])  # the serving one goes on
        assert not fatal_a
        await a.close()

    asyncio.run(scenario())


def _objects(storage: Storage) -> list[str]:
    return sorted(o.name for o in storage.list(TRANSACTION_STATE_DIR)
                  if o.name.endswith(".log"))


def _unsnapshotted_log(storage: Storage, fatal: list[BaseException],
                       lazy_linger_s: float) -> TxnLog:
    """A log that never snapshots, so its objects are exactly its appends."""
    return TxnLog(storage, 0, snapshot_fn=lambda: {}, protected_fn=lambda: [0],
                  on_fatal=fatal.append, snapshot_every_records=10**9,
                  snapshot_every_objects=10**9, snapshot_every_s=10**9,
                  lazy_linger_s=lazy_linger_s)


def test_lazy_records_ride_in_the_next_eager_append(tmp_path) -> None:
    """A lazy append starts no write: it goes out with the next eager one, in the same
    object and before it (the log is sequential), so what depends on it is durable after."""
    storage = Storage.for_url(str(tmp_path))

    async def scenario() -> None:
        fatal: list[BaseException] = []
        log = _unsnapshotted_log(storage, fatal, lazy_linger_s=3600)
        log.start()
        await log.append([_takeover(1, 0)])
        before = _objects(storage)
        lazy = [log.append([_takeover(1, i)], lazy=True) for i in range(1, 4)]
        await asyncio.sleep(0.3)
        assert _objects(storage) == before and not any(f.done() for f in lazy)
        await log.append([_takeover(1, 4)])
        assert all(f.done() for f in lazy)
        assert len(_objects(storage)) == len(before) + 1  # one object for all four
        assert [r.data["log_offset"] for r in recover(storage).records][-4:] == [1, 2, 3, 4]
        await log.close()
        assert not fatal

    asyncio.run(scenario())


def test_lazy_records_are_written_by_sync_or_when_the_linger_is_over(tmp_path) -> None:
    storage = Storage.for_url(str(tmp_path))

    async def scenario() -> None:
        log = _unsnapshotted_log(storage, [], lazy_linger_s=0.2)
        log.start()
        first = log.append([_takeover(1, 0)], lazy=True)
        await asyncio.wait_for(first, 30)  # the linger ran out: written on its own
        assert len(_objects(storage)) == 1
        log.lazy_linger_s = 3600
        second = log.append([_takeover(1, 1)], lazy=True)
        await log.sync()  # an answer that changes nothing still waits for what it saw
        assert second.done() and len(_objects(storage)) == 2
        await log.close()

    asyncio.run(scenario())


def test_a_halted_log_loses_lazy_records_and_nothing_after_them(tmp_path) -> None:
    """SIGKILL before a lazy record was written: it is gone, and so is everything queued
    after it; recovery ends where the last eager append ended."""
    storage = Storage.for_url(str(tmp_path))

    async def scenario() -> None:
        log = _unsnapshotted_log(storage, [], lazy_linger_s=3600)
        log.start()
        await log.append([_takeover(1, 0)])
        log.append([_takeover(1, 1)], lazy=True)
        await asyncio.sleep(0.3)  # long enough for an eager append to be written
        await log.halt()
        assert recover(storage).next_offset == 1

    asyncio.run(scenario())
