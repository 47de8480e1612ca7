"""A root written before the coordinator was split by role still recovers, byte for byte.

``data/pre_split_txn_state.json`` holds the ``__transaction_state-0`` objects (log objects
and two snapshots) of a root written by the single-class coordinator (commit e43c6bc):
grouped commits, aborts, transactional offsets, an idempotent producer, a member, and a
group of three commits left in PrepareCommit with shared marker objects. It also holds the
state that code recovered from them (``Engine.load`` -> ``to_snapshot``) and its HW/LSO view.
The typed records and plans must read the same JSON back into the same state, and roll the
prepared group forward.

Recipe: with the old tree on PYTHONPATH, run commit/abort/offset scenarios against an
in-process ``Engine`` (snapshots every 40 records), crash a group of commits at
``after_prepare``, then dump ``Engine.load(recover(root)).to_snapshot()`` and ``hw_lso()``.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

from txnlog.coordinator.state.coordinator_state import CoordinatorState
from txnlog.coordinator.state.partition_state import visible_offsets
from txnlog.coordinator.state.txn_log import TxnLog, recover
from txnlog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from txnlog.log_format import layout
from txnlog.log_format.storage import Storage

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "pre_split_txn_state.json"
PREPARED = ("p0", "p1", "p2")


def _root(tmp_path: Path) -> tuple[Storage, dict[str, Any]]:
    fixture = json.loads(FIXTURE.read_text())
    st = Storage.for_url((tmp_path / "root").as_uri())
    for name, data in fixture["objects"].items():
        assert st.put_if_absent(f"{layout.TRANSACTION_STATE_DIR}/{name}",
                                base64.b64decode(data))
    return st, fixture


def test_the_old_log_recovers_to_the_same_state(tmp_path: Path) -> None:
    st, fixture = _root(tmp_path)
    rec = recover(st)
    assert rec.snapshot is not None and rec.records, "a snapshot and records after it"
    state = CoordinatorState()
    state.load(rec.snapshot, rec.records)
    # the fixture holds the snapshot as that version wrote it (every partition); a snapshot
    # now leaves untouched partitions out, so both are compared in today's form (the view
    # below still covers every partition)
    recorded = CoordinatorState.from_snapshot(fixture["recovered_snapshot"]).to_snapshot()
    assert json.loads(json.dumps(state.to_snapshot())) == json.loads(json.dumps(recorded))
    view = visible_offsets(state.topics, state.partitions, state.unreplicated, {}).offsets
    assert json.loads(json.dumps(view)) == fixture["recovered_view"]
    plans = [state.txns[t].plan for t in PREPARED]
    assert all(p is not None and p.shared for p in plans), "a prepared group sharing objects"


def test_the_prepared_group_rolls_forward(tmp_path: Path) -> None:
    st, _ = _root(tmp_path)

    def factory(c: TransactionCoordinator, rec: Any) -> TxnLog:
        return TxnLog(c.storage, rec.next_offset, snapshot_fn=c.to_snapshot,
                      snapshot_offsets=rec.snapshot_offsets,
                      protected_fn=lambda: list(c.takeover_offsets),
                      on_fatal=lambda exc: None)

    async def scenario() -> dict[str, str]:
        c = TransactionCoordinator(st)
        await c.start(factory, await asyncio.to_thread(recover, st))
        for tid in PREPARED:
            done = c.completer.in_flight(tid)
            assert done is not None
            assert (await done)["outcome"] == "commit"
        await c.stop()
        again = TransactionCoordinator(st)
        again.load(await asyncio.to_thread(recover, st))
        return {tid: again.txns[tid].state.kafka_name for tid in PREPARED}

    assert asyncio.run(scenario()) == {tid: "CompleteCommit" for tid in PREPARED}
    for p in range(3):  # one marker object per partition holds the whole group's markers
        names = [o.name for o in st.list(layout.partition_dir("t", p))]
        assert len(names) == 1 and names[0].endswith(layout.LOG_SUFFIX), names
