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
