"""One-shot transactional ids (a batch write's own): kept for a retention period after their
transaction is decided, then dropped by a tombstone record; reusable ids keep Kafka's
expiration.

In-process coordinators on file storage. Time never decides a test's outcome: the retention
period is set to an hour ("within it") or to 0 ("after it") and the timer check is run by
hand, so each assertion holds whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from txnlog.coordinator import errors
from txnlog.coordinator.state.coordinator_state import CoordinatorState
from txnlog.coordinator.state.partition_state import visible_offsets
from txnlog.coordinator.state.states import TxnState
from txnlog.coordinator.state.txn_log import TxnLog, recover
from txnlog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from txnlog.log_format import layout
from txnlog.log_format.codec.records import decode_batches
from txnlog.log_format.storage import Storage

HOUR_MS = 3600 * 1000
TOPIC = "t"


def _factory(c: TransactionCoordinator, rec: Any) -> TxnLog:
    return TxnLog(c.storage, rec.next_offset, snapshot_fn=c.to_snapshot,
                  snapshot_offsets=rec.snapshot_offsets,
                  protected_fn=lambda: list(c.takeover_offsets), on_fatal=lambda exc: None,
                  snapshot_every_records=7)  # snapshots in the middle of the scenarios


async def _started(st: Storage, retention_ms: int) -> TransactionCoordinator:
    # no merging: these tests measure what one-shot ids leave in the state, and merge state
    # (bounded on its own: tests/test_log_merger.py) would blur the snapshot sizes
    c = TransactionCoordinator(st, one_shot_id_retention_ms=retention_ms, merging=False)
    await c.start(_factory, await asyncio.to_thread(recover, st))
    await c.timers.stop()  # the tests run the check by hand
    return c


def _run(tmp_path: Path, retention_ms: int,
         body: Callable[[TransactionCoordinator], Awaitable[Any]]) -> Any:
    st = Storage.for_url((tmp_path / "root").as_uri())

    async def main() -> Any:
        c = await _started(st, retention_ms)
        await c.create_topic(TOPIC, 2)
        try:
            return await body(c)
        finally:
            await c.stop()
    return asyncio.run(main())


async def _batch_write(c: TransactionCoordinator, tid: str, *, one_shot: bool = True,
                       commit: bool = True) -> dict[str, Any]:
    """What the Spark batch writer does: InitProducerId, one member per task, each member
    reserves and confirms, then EndTxn naming the members. Returns the call's arguments."""
    init = await c.init_producer_id(tid, 60_000, one_shot)
    pid, epoch = init["producer_id"], init["epoch"]
    members = []
    for p in range(2):
        m = await c.add_member(tid, pid, epoch, f"p{p}-a0")
        r = await c.reserve(m["producer_id"], 0, [{"topic": TOPIC, "partition": p,
                                                   "base_sequence": 0, "count": 3}])
        await c.confirm(m["producer_id"], 0, r)
        members.append(m["producer_id"])
    end = await c.end_txn(tid, pid, epoch, commit, members)
    assert end["outcome"] == ("commit" if commit else "abort")
    return {"tid": tid, "pid": pid, "epoch": epoch, "members": members}


def _replayed(c: TransactionCoordinator) -> dict[str, Any]:
    """The state a successor recovers from this coordinator's log."""
    state = CoordinatorState()
    rec = recover(c.storage)
    state.load(rec.snapshot, rec.records)
    return state.to_snapshot()


def _comparable(snap: dict[str, Any]) -> str:
    """The snapshot with the completed transactions that no longer hold an LSO back released,
    as the stable publisher releases them (``release_unreplicated``, the one change that is
    not a record: it changes no view)."""
    state = CoordinatorState.from_snapshot(json.loads(json.dumps(snap)))
    state.release_unreplicated(visible_offsets(state.topics, state.partitions,
                                               state.unreplicated, {}).unreplicated)
    return json.dumps(state.to_snapshot(), sort_keys=True)


def _tombstones(st: Storage) -> list[str]:
    """Transactional ids tombstoned in the coordinator's log objects (null-valued txn keys)."""
    out = []
    for obj in st.list(layout.TRANSACTION_STATE_DIR):
        if not obj.name.endswith(layout.LOG_SUFFIX):
            continue
        for batch in decode_batches(st.get(f"{layout.TRANSACTION_STATE_DIR}/{obj.name}")):
            for r in batch.records:
                if r.value is None and r.key is not None and r.key[:2] == b"\0\0":
                    out.append(r.key[4:].decode())
    return out


# ------------------------------------------------------------------ retention period
def test_a_retried_end_within_the_retention_period_answers_as_before(tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> None:
        w = await _batch_write(c, "txnlog-write-a")
        await c.timers.check()
        assert "txnlog-write-a" in c.txns
        again = await c.end_txn(w["tid"], w["pid"], w["epoch"], True, w["members"])
        assert again["outcome"] == "commit"
        with pytest.raises(errors.InvalidTxnStateError, match="already ended with commit"):
            await c.end_txn(w["tid"], w["pid"], w["epoch"], False)
        aborted = await _batch_write(c, "txnlog-write-b", commit=False)
        await c.timers.check()
        assert (await c.end_txn(aborted["tid"], aborted["pid"], aborted["epoch"],
                                False))["outcome"] == "abort"
    _run(tmp_path, HOUR_MS, body)


def test_after_the_retention_period_the_id_is_dropped_by_a_record(tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> None:
        w = await _batch_write(c, "txnlog-write-a")
        await c.timers.check()
        assert "txnlog-write-a" not in c.txns
        assert w["pid"] not in c.state.producers
        assert not any(ps.member for ps in c.state.producers.values())
        with pytest.raises(errors.InvalidProducerIdMappingError, match="unknown"):
            await c.end_txn(w["tid"], w["pid"], w["epoch"], True, w["members"])
        with pytest.raises(errors.InvalidProducerIdMappingError):
            c.describe_txn(w["tid"])
        # a straggler task attempt of the dropped write is still fenced, never let in
        with pytest.raises(errors.ProducerFencedError):
            await c.reserve(w["members"][0], 0, [{"topic": TOPIC, "partition": 0,
                                                  "base_sequence": 3, "count": 1}])
        await c.commits.sync()
        assert _tombstones(c.storage) == ["txnlog-write-a"]
        # replay equals live: the drop is a record, applied the same way on recovery
        assert _comparable(_replayed(c)) == _comparable(c.to_snapshot())
    _run(tmp_path, 0, body)


def test_many_ids_come_due_together_in_one_append(tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> None:
        for i in range(20):
            await _batch_write(c, f"txnlog-write-{i}")
        c.timers.one_shot_retention_ms = 0
        before = c.log.next_offset  # type: ignore[union-attr]
        await c.timers.check()
        assert not [t for t in c.txns if t.startswith("txnlog-write-")]
        assert c.log.next_offset == before + 20  # type: ignore[union-attr]
        assert _comparable(_replayed(c)) == _comparable(c.to_snapshot())
    _run(tmp_path, HOUR_MS, body)


def test_an_open_or_completing_one_shot_id_is_never_dropped(tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> None:
        init = await c.init_producer_id("txnlog-write-open", 60_000, True)
        m = await c.add_member("txnlog-write-open", init["producer_id"], init["epoch"], "p0")
        await c.timers.check()  # Empty (never released) and then Ongoing: both kept
        assert c.txns["txnlog-write-open"].state is TxnState.ONGOING
        await c.reserve(m["producer_id"], 0, [{"topic": TOPIC, "partition": 0,
                                               "base_sequence": 0, "count": 1}])
        await c.timers.check()
        assert c.txns["txnlog-write-open"].one_shot_done_ms() is None
        assert "txnlog-write-open" in c.txns
    _run(tmp_path, 0, body)


def test_a_one_shot_id_that_never_opened_a_transaction_is_released_by_its_abort(
        tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> None:
        init = await c.init_producer_id("txnlog-write-empty", 60_000, True)
        await c.timers.check()
        assert "txnlog-write-empty" in c.txns  # a long stage before the first task: kept
        res = await c.end_txn("txnlog-write-empty", init["producer_id"], init["epoch"], False)
        assert res["outcome"] == "abort"
        assert c.txns["txnlog-write-empty"].released
        assert _comparable(_replayed(c)) == _comparable(c.to_snapshot())
        await c.timers.check()
        assert "txnlog-write-empty" not in c.txns
    _run(tmp_path, 0, body)


# ------------------------------------------------------------------ reusable ids
def test_reusable_ids_keep_kafkas_expiration(tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> None:
        w = await _batch_write(c, "streaming-sink", one_shot=False)
        await c.timers.check()
        assert "streaming-sink" in c.txns and not c.txns["streaming-sink"].one_shot
        again = await c.end_txn(w["tid"], w["pid"], w["epoch"], True, w["members"])
        assert again["outcome"] == "commit"
        c.timers.expiration_ms = 0  # Kafka's transactional.id.expiration.ms still applies
        await c.timers.check()
        assert "streaming-sink" not in c.txns
    _run(tmp_path, 0, body)


def test_one_shot_is_declared_by_the_call_that_creates_the_id(tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> None:
        await c.init_producer_id("reused", 60_000)
        with pytest.raises(errors.InvalidRequestError, match="reusable"):
            await c.init_producer_id("reused", 60_000, True)
        assert not c.txns["reused"].one_shot
        with pytest.raises(errors.InvalidRequestError, match="transactional_id"):
            await c.init_producer_id(None, 60_000, True)
        with pytest.raises(errors.InvalidRequestError, match="true or false"):
            await c.init_producer_id("x", 60_000, "yes")  # type: ignore[arg-type]
        # a retried InitProducerId of a one-shot id keeps it one-shot
        await c.init_producer_id("txnlog-write-r", 60_000, True)
        again = await c.init_producer_id("txnlog-write-r", 60_000, True)
        assert again["epoch"] == 1 and c.txns["txnlog-write-r"].one_shot
    _run(tmp_path, HOUR_MS, body)


def test_the_snapshot_stays_flat_over_many_one_shot_writes(tmp_path: Path) -> None:
    """What the bench measures, small: 60 writes leave the snapshot of a handful, and the
    snapshot bytes of reusable ids are what they were before one-shot ids existed."""
    def ids_size(c: TransactionCoordinator) -> int:
        # the partitions' tails of runs (their markers' places in shared objects) are left
        # out: they are bounded by merging, not by ids (tests/coordinator/maintenance)
        snap = {k: v for k, v in c.to_snapshot().items()
                if k not in ("tails", "shared_garbage")}
        return len(json.dumps(snap))

    async def body(c: TransactionCoordinator) -> tuple[int, int]:
        await _batch_write(c, "txnlog-write-first")
        await c.timers.check()
        small = ids_size(c)
        for i in range(60):
            await _batch_write(c, f"txnlog-write-{i}")
            await c.timers.check()
        return small, ids_size(c)
    small, after = _run(tmp_path, 0, body)
    assert after <= small + 64  # the partitions' offsets grew a few digits, nothing else


def test_a_coordinator_with_the_retention_switched_off_keeps_them(tmp_path: Path) -> None:
    async def body(c: TransactionCoordinator) -> int:
        for i in range(5):
            await _batch_write(c, f"txnlog-write-{i}")
        await c.timers.check()
        return sum(1 for t in c.txns if t.startswith("txnlog-write-"))
    assert _run(tmp_path, HOUR_MS, body) == 5


def test_constructor_refuses_a_negative_retention(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        TransactionCoordinator(Storage.for_url(tmp_path.as_uri()), one_shot_id_retention_ms=-1)


# ------------------------------------------------------------------ older logs
def test_an_old_root_recovers_and_its_ids_stay_reusable(tmp_path: Path) -> None:
    """A root written before one-shot ids existed (tests/data/pre_split_txn_state.json,
    which test_pre_split_root checks byte for byte) has no one-shot id: with a retention of
    0 nothing of it is dropped, and its snapshot gains no new keys."""
    from tests.coordinator.state.test_pre_split_root import PREPARED, _root

    st, fixture = _root(tmp_path)

    async def main() -> tuple[dict[str, Any], list[str]]:
        c = await _started(st, 0)
        for tid in PREPARED:  # let the prepared group roll forward first
            done = c.completer.in_flight(tid)
            assert done is not None
            await done
        await c.timers.check()
        tids = sorted(c.txns)
        snap = c.to_snapshot()
        await c.stop()
        return snap, tids

    snap, tids = asyncio.run(main())
    old = sorted(t["tid"] for t in fixture["recovered_snapshot"]["txns"])
    assert tids == old
    assert not any("one_shot" in t or "released" in t for t in snap["txns"])


def test_a_stale_coordinator_never_answers_unknown_id(tmp_path: Path) -> None:
    """A coordinator that a successor took over from has not seen the ids created since;
    "unknown" from it would make a batch writer report a committed write as not committed.
    It answers NotCoordinator (retriable: the client finds the successor)."""
    st = Storage.for_url((tmp_path / "root").as_uri())

    async def main() -> None:
        old = await _started(st, HOUR_MS)
        await old.create_topic(TOPIC, 2)
        new = await _started(st, HOUR_MS)  # takes the log over (its takeover record)
        await _batch_write(new, "txnlog-write-later")
        with pytest.raises(errors.NotCoordinatorError, match="stale"):
            await old.end_txn("txnlog-write-later", 0, 0, True)
        with pytest.raises(errors.InvalidProducerIdMappingError):
            await new.end_txn("txnlog-write-never", 0, 0, True)  # the live one still says so
        await old.halt()
        await new.stop()
    asyncio.run(main())


def test_an_abort_joining_the_coordinators_timeout_abort_answers_as_its_retries(
        tmp_path: Path) -> None:
    """The coordinator aborts a transaction past its timeout while the client's own abort
    arrives: both end in ABORT, and the client's answer must be the one every retry of it
    gets (the timeout's InvalidProducerEpoch) — it was "ok" the first time and the error on
    the retry, which the chaos harness reported as retry-changed under coordinator-pause."""
    async def body(c: TransactionCoordinator) -> None:
        tid = "one-shot-timeout"
        init = await c.init_producer_id(tid, 60_000, True)
        pid, epoch = init["producer_id"], init["epoch"]
        r = await c.reserve(pid, epoch, [{"topic": TOPIC, "partition": 0,
                                          "base_sequence": 0, "count": 1}])
        await c.confirm(pid, epoch, r)
        txn = c.state.txns[tid]
        txn.last_heartbeat -= 120  # past its 60 s timeout
        await c.timers.check()  # the timeout abort starts (spawned)
        for _ in range(100):  # its Prepare applied, its completion not yet answered
            if txn.state is not TxnState.ONGOING:
                break
            await asyncio.sleep(0)
        assert txn.state is TxnState.PREPARE_ABORT
        answers = []
        for _ in range(2):  # the client's abort, joining it; then its retry
            try:
                answers.append((await c.end_txn(tid, pid, epoch, False))["outcome"])
            except errors.InvalidProducerEpochError as exc:
                answers.append(type(exc).__name__)
        assert answers == ["InvalidProducerEpochError"] * 2
    _run(tmp_path, HOUR_MS, body)
