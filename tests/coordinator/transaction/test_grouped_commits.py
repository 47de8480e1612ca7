"""Commits planned together share log appends; a crash at any step rolls all forward.

In-process, so the group is exact: EndTxn calls that arrive while the log is busy are
planned together at the next log write (completion.Completer._seal_commits). Their markers take
consecutive offsets in each partition; each transaction's markers of every partition are one
shared object (one object per transaction, not per partition). A
"crash" raises at a fault point and then halts that coordinator (``halt``: what is durable
stays, nothing else runs); a new one recovers from storage like a restarted process.
The SIGKILL crash matrix with real processes is in test_coordinator_crash.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from txnlog.coordinator import faults
from txnlog.coordinator.errors import InvalidTxnStateError
from txnlog.coordinator.state.txn_log import TxnLog, recover
from txnlog.coordinator.transaction import completion
from txnlog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from txnlog.log_format import layout
from txnlog.log_format.codec.control import ControlType, control_info
from txnlog.log_format.codec.records import decode_batches
from txnlog.log_format.segments import shared_object
from txnlog.log_format.storage import Storage

from tests.coordinator.server.test_coordinator_protocol import check_partition, read_values, write

PARTS = 3
TXNS = 6


class Crash(BaseException):
    """Stands in for SIGKILL at a fault point."""


def _log_factory(engine: TransactionCoordinator, recovered: Any) -> TxnLog:
    return TxnLog(engine.storage, recovered.next_offset, snapshot_fn=engine.to_snapshot,
                  snapshot_offsets=recovered.snapshot_offsets,
                  protected_fn=lambda: list(engine.takeover_offsets),
                  on_fatal=lambda exc: None)


async def _start(storage: Storage) -> TransactionCoordinator:
    engine = TransactionCoordinator(storage)
    await engine.start(_log_factory, await asyncio.to_thread(recover, storage))
    return engine


async def _die(engine: TransactionCoordinator) -> None:
    """Stop every task of a crashed coordinator without any graceful step."""
    await engine.halt()


def _arm(monkeypatch: pytest.MonkeyPatch, point: str, at: int) -> None:
    hits = [0]

    def fake(name: str) -> None:
        if name == point:
            hits[0] += 1
            if hits[0] == at:
                raise Crash(point)
    monkeypatch.setattr(faults, "point", fake)  # the module the engine calls too


def _disarm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "point", lambda name: None)


async def _recovered(st: Storage) -> TransactionCoordinator:
    """What the next restart recovers, before it rolls anything forward."""
    engine = TransactionCoordinator(st)
    engine.load(await asyncio.to_thread(recover, st))
    return engine


async def _open_txns(engine: TransactionCoordinator, st: Storage
                     ) -> list[tuple[str, int, int, list[Any]]]:
    await engine.create_topic("t", PARTS)
    out = []
    for i in range(TXNS):
        tid = f"tx-{i}"
        r = await engine.init_producer_id(tid)
        pid, ep = r["producer_id"], r["epoch"]
        res = await engine.reserve(pid, ep, [{"topic": "t", "partition": p,
                                              "base_sequence": 0, "count": 1}
                                             for p in range(PARTS)])
        written = []
        for item in res:
            assert write(st, "t", item["partition"], item["base_offset"], pid, ep,
                         [f"{tid}-{item['partition']}"])
            written.append({"topic": "t", "partition": item["partition"],
                            "base_offset": item["base_offset"]})
        out.append((tid, pid, ep, written))
    return out


def _end_all(engine: TransactionCoordinator, txns: list[tuple[str, int, int, list[Any]]]):
    return asyncio.gather(*(engine.end_txn(tid, pid, ep, True, written=w)
                            for tid, pid, ep, w in txns), return_exceptions=True)


def _marker_objects(st: Storage) -> list[list[tuple[int, int]]]:
    """Each marker object (a shared object of control batches only): its runs as
    (partition, number of markers), in the object's order. Partitions hold none of their
    own."""
    out = []
    for p in range(PARTS):
        for obj in st.list(layout.partition_dir("t", p)):
            if obj.name.endswith(layout.LOG_SUFFIX):
                blob = st.get(f"{layout.partition_dir('t', p)}/{obj.name}")
                assert not any(control_info(b) is not None for b in decode_batches(blob)), \
                    "a marker object of the partition's own"
    for obj in st.list(layout.SHARED_DIR):
        data = st.get(f"{layout.SHARED_DIR}/{obj.name}")
        runs = []
        for e in shared_object.read_footer(data).entries:
            batches = decode_batches(data[e.position:e.position + e.size])
            controls = [b for b in batches if control_info(b) is not None]
            assert len(controls) in (0, len(batches)), "markers mixed with data"
            if controls:
                runs.append((e.partition, len(controls)))
        if runs:
            out.append(runs)
    return out


# every transaction: one object holding one marker in each partition
ONE_PER_TXN = [[(p, 1) for p in range(PARTS)]] * TXNS


def _assert_all_committed(st: Storage, txns: list[tuple[str, int, int, list[Any]]]) -> None:
    for p in range(PARTS):
        found = check_partition(st, "t", p)
        kinds = {(pid, ep): kind for _o, pid, kind, ep in found["markers"]}
        assert len(kinds) == len(found["markers"]), f"duplicate marker in t-{p}"
        for _tid, pid, ep, _w in txns:
            assert kinds[(pid, ep)] == ControlType.COMMIT
        assert sorted(read_values(st, "t", p)) == sorted(
            f"{tid}-{p}".encode() for tid, *_ in txns)


def test_commits_arriving_together_write_one_marker_object_each(tmp_path: Path) -> None:
    st = Storage.for_url((tmp_path / "root").as_uri())

    async def scenario() -> list[Any]:
        engine = await _start(st)
        txns = await _open_txns(engine, st)
        results = await _end_all(engine, txns)
        assert all(r["outcome"] == "commit" for r in results), results
        await engine.stop()
        return txns

    txns = asyncio.run(scenario())
    _assert_all_committed(st, txns)
    # one object per transaction holds its marker of every partition
    assert _marker_objects(st) == ONE_PER_TXN


@pytest.mark.parametrize("point,at", [("after_prepare", 1), ("after_marker", 1),
                                      ("after_marker", 2),
                                      ("after_complete_before_reply", 1)])
def test_crash_in_a_group_rolls_every_member_forward(point: str, at: int, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    st = Storage.for_url((tmp_path / "root").as_uri())

    async def scenario() -> list[Any]:
        engine = await _start(st)
        txns = await _open_txns(engine, st)
        _arm(monkeypatch, point, at)
        results = await _end_all(engine, txns)
        assert all(isinstance(r, Crash) for r in results), results
        await _die(engine)
        _disarm(monkeypatch)
        engine2 = await _start(st)  # rolls the prepared group forward, one by one
        retried = await _end_all(engine2, txns)  # the clients' retries
        assert all(r["outcome"] == "commit" for r in retried), retried
        await engine2.stop()
        return txns

    txns = asyncio.run(scenario())
    _assert_all_committed(st, txns)
    assert _marker_objects(st) == ONE_PER_TXN


def test_member_completed_alone_then_restart_again(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart completes a group's members one by one; if it dies after some, the next
    restart rewrites the marker objects of the members still prepared, byte for byte (the
    plan names each one and fixes its bytes)."""
    st = Storage.for_url((tmp_path / "root").as_uri())

    async def scenario() -> list[Any]:
        engine = await _start(st)
        txns = await _open_txns(engine, st)
        _arm(monkeypatch, "after_marker", TXNS)  # every marker object written, no Complete
        assert all(isinstance(r, Crash) for r in await _end_all(engine, txns))
        await _die(engine)
        _disarm(monkeypatch)
        # The second coordinator completes only the first member, then dies.
        recovered = await asyncio.to_thread(recover, st)
        engine2 = TransactionCoordinator(st)
        real_roll_forward = engine2.completer.roll_forward
        first = txns[0][0]
        engine2.completer.roll_forward = lambda txn: (  # type: ignore[method-assign]
            real_roll_forward(txn) if txn.tid == first else None)
        await engine2.start(_log_factory, recovered)
        done = engine2.completer.in_flight(first)
        assert done is not None
        await done
        await _die(engine2)
        seen = await _recovered(st)
        assert seen.txns[first].state.kafka_name == "CompleteCommit"
        assert all(seen.txns[t].state.kafka_name == "PrepareCommit" for t, *_ in txns[1:])
        engine3 = await _start(st)
        # the rest complete alone against objects holding the first member's marker too
        retried = await _end_all(engine3, txns[1:])
        assert all(r["outcome"] == "commit" for r in retried), retried
        with pytest.raises(InvalidTxnStateError):  # its epoch moved on: abort is refused
            await engine3.end_txn(first, txns[0][1], txns[0][2], False)
        await engine3.stop()
        return txns

    txns = asyncio.run(scenario())
    _assert_all_committed(st, txns)
    assert _marker_objects(st) == ONE_PER_TXN


def test_a_failure_while_sealing_answers_every_caller(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in planning a group must fail its callers, not leave them waiting forever."""
    st = Storage.for_url((tmp_path / "root").as_uri())

    def broken(plans: list[Any]) -> None:
        raise RuntimeError("planted")

    async def scenario() -> None:
        engine = await _start(st)
        txns = await _open_txns(engine, st)
        monkeypatch.setattr(completion, "share_markers", broken)
        results = await asyncio.wait_for(_end_all(engine, txns), 30)
        assert all(isinstance(r, RuntimeError) for r in results), results
        assert all(engine.txns[tid].ending is None for tid, *_ in txns)
        await engine.stop()

    asyncio.run(scenario())


def test_published_bounds_never_go_back_after_a_crash(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The stable snapshot goes out in parallel with the Complete records it reflects. A
    coordinator that dies after the snapshot, before Complete is durable, has published HWs
    its log does not show; its successor must not publish lower ones while it rolls the
    group forward (found by the chaos harness: HW 989 -> 986 after a coordinator kill)."""
    from txnlog.log_format import stable

    st = Storage.for_url((tmp_path / "root").as_uri())

    async def scenario() -> None:
        engine = await _start(st)
        txns = await _open_txns(engine, st)
        hang = asyncio.Event()  # never set: log writes after the markers never finish
        real_put = engine.log._put
        blocked = [False]

        async def put(path: str, data: bytes) -> bool:
            if blocked[0]:
                await hang.wait()
            return await real_put(path, data)

        engine.log._put = put  # type: ignore[method-assign]
        hits = [0]

        def point(name: str) -> None:
            if name == "after_marker":
                hits[0] += 1
                blocked[0] = hits[0] >= PARTS
        monkeypatch.setattr(faults, "point", point)
        ending = asyncio.ensure_future(_end_all(engine, txns))
        for _ in range(500):  # a snapshot with the group's markers resolved is out
            snap = engine.stable_written
            if blocked[0] and snap is not None and all(
                    snap.partitions[f"t-{p}"][0] == engine.state.partitions[f"t-{p}"].leo
                    for p in range(PARTS)):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("no stable snapshot with the markers resolved")
        before = stable.read_latest_stable(st)
        assert before is not None
        ending.cancel()
        await _die(engine)
        seen = await _recovered(st)  # precondition: the Complete records are not durable
        assert all(seen.txns[t].state.kafka_name == "PrepareCommit" for t, *_ in txns)
        _disarm(monkeypatch)
        engine2 = await _start(st)
        retried = await _end_all(engine2, txns)
        assert all(r["outcome"] == "commit" for r in retried), retried
        await engine2.stop()
        after = [stable.read_stable(st, key)
                 for key in stable.list_stable(st) if key > before.key]
        assert after, "the successor published nothing"
        for snap in after:
            for tp, (hw, lso) in before.partitions.items():
                assert snap.partitions[tp][0] >= hw and snap.partitions[tp][1] >= lso, \
                    (snap.key, tp, snap.partitions[tp], (hw, lso))

    asyncio.run(scenario())
