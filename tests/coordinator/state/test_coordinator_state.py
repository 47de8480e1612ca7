"""The coordinator's pure state: replay equals live, snapshots round-trip, pids are records.

No event loop and no storage: a scenario drives ``CoordinatorState`` through the same
record builders the coordinator uses (``alloc_pids``, ``Txn.transition_record``,
``plan_completion``), applying each step's records as ``Commits.commit`` does. Replaying
those records — encoded to ``__transaction_state`` bytes and decoded again — into a fresh
state must give the same snapshot, at every step.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from txnlog.coordinator.state.completion_plan import share_markers
from txnlog.coordinator.state.coordinator_state import PID_BLOCK, CoordinatorState
from txnlog.coordinator.state.partition_state import PartitionOffset
from txnlog.coordinator.state.states import TxnState
from txnlog.coordinator.state.txn_log_records import LogRecord, from_kafka_record, to_kafka_record
from txnlog.coordinator.state.txn_metadata import MAX_EPOCH, Txn
from txnlog.coordinator.transaction.completion import plan_completion
from txnlog.log_format.codec.records import decode_batches, encode_batch


def _json(x: Any) -> Any:
    """What the log would store: typed rows become JSON lists."""
    return json.loads(json.dumps(x))


def _through_the_log(records: list[LogRecord]) -> list[LogRecord]:
    """Encode records as one __transaction_state object and decode them back."""
    data = encode_batch([to_kafka_record(r, 0) for r in records], base_offset=0, now_ms=0)
    return [from_kafka_record(r) for b in decode_batches(data) for r in b.records]


class Scenario:
    """A live state and the log it wrote, step by step."""

    def __init__(self) -> None:
        self.state = CoordinatorState()
        self.log: list[LogRecord] = []

    def commit(self, records: list[LogRecord]) -> None:
        """As ``Commits.commit``: apply, then queue (here: remember) the same records."""
        self.state.apply_all(records)
        self.log += records

    def replayed(self) -> CoordinatorState:
        fresh = CoordinatorState()
        fresh.apply_all(_through_the_log(self.log))
        return fresh

    def check_replay(self) -> None:
        assert _json(self.replayed().to_snapshot()) == _json(self.state.to_snapshot())

    # --- the coordinator's steps, minus the I/O
    def takeover(self) -> None:
        self.commit([LogRecord("takeover", {"id": "", "epoch": self.state.coordinator_epoch + 1,
                                            "log_offset": len(self.log), "ms": 0, "pid": 1})])

    def topic(self, name: str, n: int) -> None:
        self.commit([LogRecord("topic", {"id": name, "name": name, "partitions": n,
                                         "config": {}})])

    def init(self, tid: str) -> Txn:
        txn = self.state.txns.get(tid)
        if txn is None:
            (pid,), records = self.state.alloc_pids(1)
            fresh = Txn(tid, pid, 0, 60_000)
            records.append(fresh.transition_record(TxnState.EMPTY, pid=pid, epoch=0))
        else:
            pid, epoch, records = self.state.bumped(txn)
            records.append(txn.transition_record(TxnState.EMPTY, pid=pid, epoch=epoch))
        self.commit(records)
        return self.state.txns[tid]

    def idempotent(self) -> int:
        (pid,), records = self.state.alloc_pids(1)
        self.commit([*records, LogRecord("producer", {"id": str(pid), "pid": pid,
                                                      "epoch": 0})])
        return pid

    def member(self, txn: Txn, key: str) -> int:
        records = []
        if txn.state is not TxnState.ONGOING:
            records.append(txn.transition_record(TxnState.ONGOING))
        (mpid,), blocks = self.state.alloc_pids(1)
        self.commit([*records, *blocks, LogRecord("member", {"id": txn.tid, "tid": txn.tid,
                                                             "key": key, "pid": mpid})])
        return mpid

    def reserve(self, pid: int, epoch: int, parts: list[tuple[str, int, int]]
                ) -> list[PartitionOffset]:
        """Reserve ``count`` records at the expected sequence in each (topic, p)."""
        ps = self.state.producers[pid]
        txn = self.state.txns.get(ps.tid) if ps.tid is not None else None
        records = []
        if txn is not None and not ps.member and txn.state is not TxnState.ONGOING:
            records.append(txn.transition_record(TxnState.ONGOING))
        assigned = []
        for t, p, count in parts:
            key = f"{t}-{p}"
            assigned.append([t, p, ps.expected_sequence(key, epoch), count,
                             self.state.partition(key).leo])
        self.commit([*records, LogRecord("reserve", {"id": str(pid), "pid": pid,
                                                     "epoch": epoch, "tid": ps.tid,
                                                     "parts": assigned})])
        return [PartitionOffset(t, p, b) for t, p, _s, _c, b in assigned]

    def confirm(self, pid: int, where: list[PartitionOffset], kind: str = "confirm") -> None:
        self.commit([LogRecord(kind, {"id": str(pid), "pid": pid, "parts": where})])

    def prepare(self, txn: Txn, commit: bool, *, members: set[int] | None = None,
                reason: str = "client", ts: int = 1) -> list[LogRecord]:
        committed = (txn.member_pids() if members is None else members) | {txn.pid}
        plan, records = plan_completion(self.state, txn, commit,
                                        committed if commit else set(), reason, None,
                                        [], ts)
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        records.append(txn.transition_record(state, plan=plan))
        return records

    def end(self, txn: Txn, commit: bool, **kw: Any) -> None:
        self.commit(self.prepare(txn, commit, **kw))
        state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        self.commit([txn.transition_record(state)])


def _busy(s: Scenario) -> None:
    """Every kind of record, checking replay after each step."""
    s.takeover()
    s.topic("t", 3)
    s.check_replay()
    a = s.init("a")
    s.reserve(a.pid, a.epoch, [("t", 0, 2), ("t", 1, 1)])
    m = s.member(a, "task-0")
    mine = s.reserve(m, 0, [("t", 2, 3)])
    s.confirm(m, mine)
    s.check_replay()
    s.commit([LogRecord("offsets", {"id": "a", "tid": "a", "group": "g",
                                    "offsets": [["t", 0, 7]]})])
    s.end(a, True)  # (live, a's unconfirmed reservations would be verified in storage)
    s.check_replay()
    idem = s.idempotent()
    w = s.reserve(idem, 0, [("t", 0, 1)])
    s.confirm(idem, w)
    w2 = s.reserve(idem, 0, [("t", 1, 1)])
    s.confirm(0, w2, kind="fence")
    s.check_replay()
    b = s.init("b")
    s.commit([LogRecord("batch", {"id": "b", "tid": "b", "batch_id": 4})])
    s.reserve(b.pid, b.epoch, [("t", 0, 1)])
    s.end(b, False, reason="timeout")
    s.check_replay()
    a = s.init("a")  # a bump of a completed id
    s.commit([LogRecord("txn", {"tid": "b", "tombstone": True})])
    s.check_replay()


def test_replay_equals_live_after_every_kind_of_record() -> None:
    s = Scenario()
    _busy(s)
    snap = s.state.to_snapshot()
    assert snap["group_offsets"] == {"g": {"t-0": 7}}
    assert "b" not in s.state.txns and s.state.txns["a"].last["outcome"] == "commit"
    assert s.state.unreplicated, "completed transactions are remembered until released"


def test_replay_equals_live_for_a_group_prepared_in_one_step() -> None:
    """Prepares planned one after the other on the state each left, then the group sealed
    (as Completer._seal does): each plan names its own marker object (every partition's
    marker), which share_markers leaves alone; replay sees what live did."""
    s = Scenario()
    s.takeover()
    s.topic("t", 2)
    txns = [s.init(f"g{i}") for i in range(3)]
    for txn in txns:
        s.confirm(txn.pid, s.reserve(txn.pid, txn.epoch, [("t", 0, 1), ("t", 1, 1)]))
    group: list[LogRecord] = []
    prepares = []
    for txn in txns:
        recs = s.prepare(txn, True)
        s.state.apply_all(recs)
        group += recs
        prepares.append(recs[-1])
    plans = [t.plan for t in txns]
    share_markers(plans)  # type: ignore[arg-type]
    for rec, plan in zip(prepares, plans, strict=True):
        rec.data["ext"]["plan"] = plan.to_json()  # type: ignore[union-attr]
    s.log += group
    assert all(p is not None and p.marker_object is not None and not p.shared
               and len(p.marker_runs) == 2 for p in plans)
    assert len({p.marker_object for p in plans}) == 3  # type: ignore[union-attr]
    s.check_replay()
    s.commit([t.transition_record(TxnState.COMPLETE_COMMIT) for t in txns])
    s.check_replay()


def test_pid_allocation_is_a_record_and_takes_effect_when_applied() -> None:
    s = Scenario()
    s.takeover()
    pids, records = s.state.alloc_pids(2)
    assert pids == [0, 1] and [r.kind for r in records] == ["pid_block"]
    assert s.state.next_pid == 0 and s.state.pid_limit == 0, "allocating changes nothing"
    for _ in range(PID_BLOCK + 1):
        s.idempotent()
    assert s.state.next_pid == PID_BLOCK + 1 and s.state.pid_limit == 2 * PID_BLOCK
    s.check_replay()
    s.takeover()  # a new coordinator skips the rest of the block
    assert s.state.next_pid == 2 * PID_BLOCK
    assert s.idempotent() == 2 * PID_BLOCK  # the next block's first id
    s.check_replay()


def test_an_exhausted_epoch_moves_to_a_new_pid_in_replay_too() -> None:
    """The bump at Prepare may need a new producer id: it is taken when the Prepare is
    applied, live and on replay (a replayed coordinator must not hand it out again)."""
    s = Scenario()
    s.takeover()
    s.topic("t", 1)
    txn = s.init("x")
    s.commit([txn.transition_record(TxnState.EMPTY, epoch=MAX_EPOCH - 1)])
    assert txn.epoch_exhausted()
    s.confirm(txn.pid, s.reserve(txn.pid, txn.epoch, [("t", 0, 1)]))
    old = txn.pid
    s.commit(s.prepare(txn, True))
    assert txn.plan is not None and txn.plan.next_pid is not None
    assert s.state.next_pid == txn.plan.next_pid + 1
    s.check_replay()
    s.commit([txn.transition_record(TxnState.COMPLETE_COMMIT)])
    assert (txn.pid, txn.epoch) != (old, MAX_EPOCH - 1) and txn.epoch == 0
    s.check_replay()
    assert s.idempotent() not in (old, txn.pid)


def test_snapshot_restore_round_trip() -> None:
    s = Scenario()
    _busy(s)
    snap = _json(s.state.to_snapshot())
    restored = CoordinatorState.from_snapshot(snap)
    assert _json(restored.to_snapshot()) == snap
    # and it goes on identically: the records after it give the same state
    n = len(s.log)
    c = s.init("c")
    s.confirm(c.pid, s.reserve(c.pid, c.epoch, [("t", 2, 2)]))
    s.end(c, True)
    restored.apply_all(_through_the_log(s.log[n:]))
    assert _json(restored.to_snapshot()) == _json(s.state.to_snapshot())


def test_snapshot_holds_only_written_partitions_and_restores_every_one() -> None:
    """A snapshot is serialized on the event loop, so it must not cost the root's breadth
   : partitions nothing was reserved in are left out, and restoring makes them
    again from the topics, so the restored state equals the live one partition for
    partition (and publishes the same HW/LSO for every one of them)."""
    from txnlog.coordinator.state.partition_state import visible_offsets
    s = Scenario()
    _busy(s)
    s.commit([LogRecord("topic", {"name": "wide", "partitions": 5_000, "config": {}})])
    snap = _json(s.state.to_snapshot())
    written = {k for k, v in s.state.partitions.items() if v.leo}
    assert written and set(snap["partitions"]) == written
    restored = CoordinatorState.from_snapshot(snap)
    assert restored.partitions == s.state.partitions
    assert len(restored.partitions) >= 5_000

    def view(st: CoordinatorState) -> dict[str, Any]:
        return visible_offsets(st.topics, st.partitions, st.unreplicated, {}).offsets

    assert view(restored) == view(s.state)


def test_restore_in_place_keeps_the_object() -> None:
    s = Scenario()
    _busy(s)
    other = CoordinatorState()
    ref = other
    other.load(_json(s.state.to_snapshot()), [])
    assert other is ref and _json(other.to_snapshot()) == _json(s.state.to_snapshot())


def test_unknown_snapshot_version_is_refused() -> None:
    from txnlog.coordinator.errors import KafkaStorageError
    with pytest.raises(KafkaStorageError):
        CoordinatorState.from_snapshot({"version": 2})


def test_the_pure_modules_import_no_asyncio_and_no_storage() -> None:
    """What makes replay equal live is that state changes run synchronously and touch no
    storage; keep it so (names under TYPE_CHECKING are for annotations only)."""
    import ast
    from pathlib import Path

    coordinator = Path(__file__).resolve().parents[3] / "coordinator" / "state"
    banned = ("asyncio", "txnlog.log_format.storage", "concurrent")
    for name in ("coordinator_state", "txn_metadata", "partition_state", "completion_plan",
                 "states", "txn_log_records", "merge_state", "clean_state", "retention_state"):
        tree = ast.parse((coordinator / f"{name}.py").read_text())
        guarded = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [("." * node.level) + (node.module or "")]
            else:
                continue
            for mod in mods:
                assert not mod.startswith(banned), f"coordinator/{name}.py imports {mod}"
                assert mod not in (".txn_log", ".runtime", ".completion"), \
                    f"coordinator/{name}.py imports {mod}"
