"""Crash matrix, fencing and atomic visibility with real coordinator processes.

The coordinator SIGKILLs itself at a fault point (``TXNLOG_FAULTS``); after a restart every
transaction must be fully committed or fully aborted in every partition, no offset reused,
no marker duplicated, and the client's retry must get the right answer.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator import errors
from txnlog.coordinator.client.coordinator_client import (
    CoordinatorClient,
    CoordinatorUnavailableError,
)
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format import layout
from txnlog.log_format.codec.control import ControlType
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.stable import read_latest_stable
from txnlog.log_format.storage import Storage

from tests.coordinator.server.test_coordinator_protocol import check_partition, write

PARTS = 3


def crashing_coordinator(tmp_path: Path, fault: str, *, extra: list[str] | None = None,
                         **init: Any) -> tuple[str, Storage, CoordinatorProc,
                                               CoordinatorClient, tuple[int, int]]:
    """A coordinator on a fresh root (``tmp_path/root``, its log ``c1.log``) that SIGKILLs
    itself at ``fault``, with topic t created and producer ``tx`` initialised (``init``:
    ``init_producer_id``'s options). Its client retries for 0.5 s only, so the crash reaches
    the test as an error. Returns the root, its storage, the process, the client and
    (producer id, epoch)."""
    root = (tmp_path / "root").as_uri()
    proc = CoordinatorProc(root, faults=fault, log_path=tmp_path / "c1.log", extra=extra)
    proc.wait_healthy()
    c = proc.client(retry_for=0.5)
    c.create_topic("t", PARTS)
    return root, Storage.for_url(root), proc, c, c.init_producer_id("tx", **init)


def run_txn(c: CoordinatorClient, st: Storage, tid: str, pid: int, ep: int, tag: str
            ) -> dict[tuple[str, int], int]:
    """Reserve, write and confirm one record per partition of topic t; returns offsets."""
    res = c.reserve(pid, ep, {("t", p): (0, 1) for p in range(PARTS)})
    for (t, p), base in res.items():
        assert write(st, t, p, base, pid, ep, [f"{tag}-{p}"])
    c.confirm(pid, ep, [(t, p, b) for (t, p), b in res.items()])
    return res


def committed_values(st: Storage) -> list[list[bytes]]:
    snap = read_latest_stable(st)
    return [PartitionReader(st, "t", p, snapshot=snap).read_table().column("value").to_pylist()
            for p in range(PARTS)]


def assert_consistent(st: Storage) -> dict[tuple[int, int], set[ControlType]]:
    """One marker per transaction (pid, epoch) per partition, the same outcome everywhere."""
    outcome: dict[tuple[int, int], set[ControlType]] = {}
    for p in range(PARTS):
        found = check_partition(st, "t", p)
        txns = [(m[1], m[3]) for m in found["markers"]]
        assert len(txns) == len(set(txns)), f"duplicate marker in t-{p}: {found['markers']}"
        for _, pid, kind, epoch in found["markers"]:
            outcome.setdefault((pid, epoch), set()).add(kind)
    for pid, kinds in outcome.items():
        assert len(kinds) == 1, f"producer {pid} committed in some partitions, aborted in others"
    return outcome


# one transaction writes one marker object (every partition's marker): after_marker:1 is
# after all of them
CASES = ["before_prepare", "after_prepare", "after_marker:1",
         "after_complete_before_reply", "mid_snapshot"]


@pytest.mark.parametrize("fault", CASES)
def test_crash_during_commit(fault: str, tmp_path: Path) -> None:
    extra = ["--snapshot-every-records", "8"] if fault == "mid_snapshot" else []
    root, st, proc, c, (pid, ep) = crashing_coordinator(tmp_path, fault, extra=extra)
    first = run_txn(c, st, "tx", pid, ep, "one")
    with pytest.raises((CoordinatorUnavailableError, errors.NotCoordinatorError)):
        c.end_txn("tx", pid, ep, True)
        # mid_snapshot may fire only on a later write: keep the coordinator busy
        for i in range(50):
            c.init_producer_id(f"busy-{i}")
    assert proc.wait(30) == -9, proc.log_tail()
    proc.stop()

    proc2 = CoordinatorProc(root, log_path=tmp_path / "c2.log")
    proc2.wait_healthy()
    try:
        c2 = proc2.client()
        # the client's retry gets the right answer: committed, every partition
        out = c2.end_txn("tx", pid, ep, True)
        assert out["outcome"] == "commit"
        assert committed_values(st) == [[f"one-{p}".encode()] for p in range(PARTS)]
        outcome = assert_consistent(st)
        assert outcome[(pid, ep)] == {ControlType.COMMIT}
        # the next transaction gets fresh offsets after the markers
        pid2, ep2 = out["producer_id"], out["epoch"]
        second = run_txn(c2, st, "tx", pid2, ep2, "two")
        for tp, base in second.items():
            assert base > first[tp]
        c2.end_txn("tx", pid2, ep2, False)
        assert committed_values(st) == [[f"one-{p}".encode()] for p in range(PARTS)]
        assert_consistent(st)
        if fault == "mid_snapshot":
            assert any(o.name.endswith(".snapshot")
                       for o in st.list(layout.TRANSACTION_STATE_DIR))
    finally:
        proc2.stop()


def test_crash_after_reserve_retry_gets_same_offsets(tmp_path: Path) -> None:
    root, st, proc, c, (pid, ep) = crashing_coordinator(tmp_path, "after_reserve")
    with pytest.raises(CoordinatorUnavailableError):
        c.reserve(pid, ep, {("t", p): (0, 2) for p in range(PARTS)})
    proc.wait(30)
    proc.stop()
    with CoordinatorProc(root, log_path=tmp_path / "c2.log") as proc2:
        c2 = proc2.client()
        res = c2.reserve(pid, ep, {("t", p): (0, 2) for p in range(PARTS)})
        assert res == {("t", p): 0 for p in range(PARTS)}
        # a never-confirmed reservation is aborted on EndTxn(abort) and fenced
        c2.end_txn("tx", pid, ep, False)
        for p in range(PARTS):
            assert st.get(layout.segment_path("t", p, 0)) == b""
        assert_consistent(st)


def test_crash_before_confirm_the_retried_confirm_commits_once(tmp_path: Path) -> None:
    """The coordinator dies mid-flush: the writer's object is on storage, its reservation
    durable, its confirm lost. The same confirm sent to the next coordinator makes the
    records part of the transaction, once; a second retry changes nothing."""
    root, st, proc, c, (pid, ep) = crashing_coordinator(tmp_path, "before_confirm")
    res = c.reserve(pid, ep, {("t", p): (0, 1) for p in range(PARTS)})
    for (t, p), base in res.items():
        assert write(st, t, p, base, pid, ep, [f"one-{p}"])
    runs = [(t, p, b) for (t, p), b in res.items()]
    with pytest.raises(CoordinatorUnavailableError):
        c.confirm(pid, ep, runs)
    assert proc.wait(30) == -9  # SIGKILLed itself at the point
    assert "fault point before_confirm reached" in (tmp_path / "c1.log").read_text()
    proc.stop()
    with CoordinatorProc(root, log_path=tmp_path / "c2.log") as proc2:
        c2 = proc2.client()
        c2.confirm(pid, ep, runs)
        c2.confirm(pid, ep, runs)  # a writer's retry after a lost answer
        c2.end_txn("tx", pid, ep, True)
        assert committed_values(st) == [[f"one-{p}".encode()] for p in range(PARTS)]
        assert assert_consistent(st)[(pid, ep)] == {ControlType.COMMIT}


def test_crash_before_prepare_then_timeout_aborts(tmp_path: Path) -> None:
    """A driver that never retries: the transaction times out and is aborted everywhere."""
    root, st, proc, c, (pid, ep) = crashing_coordinator(tmp_path, "before_prepare",
                                                        transaction_timeout_ms=500)
    run_txn(c, st, "tx", pid, ep, "one")
    with pytest.raises(CoordinatorUnavailableError):
        c.end_txn("tx", pid, ep, True)
    proc.wait(30)
    proc.stop()
    with CoordinatorProc(root, log_path=tmp_path / "c2.log") as proc2:
        c2 = proc2.client()
        deadline = time.monotonic() + 20
        while c2.describe_txn("tx")["state"] != "CompleteAbort":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert committed_values(st) == [[] for _ in range(PARTS)]
        assert assert_consistent(st)[(pid, ep)] == {ControlType.ABORT}
        with pytest.raises(errors.InvalidProducerEpochError):
            c2.end_txn("tx", pid, ep, True)


def test_two_coordinators_one_is_fenced(every_root: str, tmp_path: Path) -> None:
    """B's takeover record wins the put-if-absent race at the log's end; A loses its next
    one (on files and on both S3 servers)."""
    root = every_root
    st = Storage.for_url(root)
    a = CoordinatorProc(root, log_path=tmp_path / "a.log")
    a.wait_healthy()
    ca = a.client(retry_for=0.5)
    ca.create_topic("t", PARTS)
    pid, ep = ca.init_producer_id("tx")
    run_txn(ca, st, "tx", pid, ep, "one")
    ca.end_txn("tx", pid, ep, True)
    b = CoordinatorProc(root, log_path=tmp_path / "b.log")
    b.wait_healthy()  # B took the log over (its takeover record)
    # A's next log write loses the put-if-absent race: A is fenced and stops
    with pytest.raises(errors.NotCoordinatorError):
        ca.init_producer_id("other")
    assert a.wait(30) == 3
    assert "fenced" in a.log_text()
    with pytest.raises((errors.NotCoordinatorError, CoordinatorUnavailableError)):
        ca.init_producer_id("other")
    a.stop()
    cb = b.client()
    assert cb.describe_txn("tx")["state"] == "CompleteCommit"
    pid2, ep2 = cb.init_producer_id("tx")
    assert (pid2, ep2) == (pid, ep + 2)  # bumped by the commit, then by this init
    second = run_txn(cb, st, "tx", pid2, ep2, "two")
    cb.end_txn("tx", pid2, ep2, True)
    assert all(base > 0 for base in second.values())
    assert committed_values(st) == [[f"one-{p}".encode(), f"two-{p}".encode()]
                                    for p in range(PARTS)]
    assert_consistent(st)
    assert b.stop() == 0
    # the log is intact: a third coordinator replays all of it
    with CoordinatorProc(root, log_path=tmp_path / "c.log") as c:
        assert c.client().describe_txn("tx")["epoch"] == ep2 + 1


def test_reader_never_sees_partial_transaction(tmp_path: Path) -> None:
    """A concurrent reader checks every stable snapshot it sees while commits are in flight."""
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    n_txn = 25
    with CoordinatorProc(root, log_path=tmp_path / "c.log") as proc:
        proc.client().create_topic("t", PARTS)
        done = threading.Event()
        seen: list[int] = []
        failures: list[str] = []

        def reader() -> None:
            last = None
            while True:
                finished = done.is_set()
                snap = read_latest_stable(st, not_below=last)
                if snap is None or (last is not None and snap.key == last.key):
                    if finished:
                        return
                    time.sleep(0.005)
                    continue
                last = snap
                per = [PartitionReader(st, "t", p, snapshot=snap).read_table()
                       .column("value").to_pylist() for p in range(PARTS)]
                txns = [{v.split(b"-")[0] for v in vals} for vals in per]
                if not all(t == txns[0] for t in txns) or any(len(v) != len(txns[0])
                                                             for v in per):
                    failures.append(f"snapshot {snap.key}: partial transaction {per}")
                seen.append(len(txns[0]))

        th = threading.Thread(target=reader)
        th.start()
        with TransactionalProducer(root, "writer", coordinator=proc.endpoint) as prod:
            prod.init_transactions()
            for i in range(n_txn):
                prod.begin_transaction()
                for p in range(PARTS):
                    prod.send("t", f"{i}-{p}", partition=p)
                if i % 5 == 4:
                    prod.abort_transaction()
                else:
                    prod.commit_transaction()
        done.set()
        th.join(60)
        assert not failures, failures[:3]
        assert len(seen) > 1 and max(seen) == n_txn - n_txn // 5


@pytest.mark.parametrize("fault", ["after_prepare", "after_marker:1"])
def test_crash_during_commit_on_s3(fault: str, s3_impl_root: str, tmp_path: Path) -> None:
    root = s3_impl_root
    st = Storage.for_url(root)
    proc = CoordinatorProc(root, faults=fault, log_path=tmp_path / "c1.log")
    proc.wait_healthy()
    c = proc.client(retry_for=0.5)
    c.create_topic("t", PARTS)
    pid, ep = c.init_producer_id("tx")
    run_txn(c, st, "tx", pid, ep, "one")
    with pytest.raises(CoordinatorUnavailableError):
        c.end_txn("tx", pid, ep, True)
    assert proc.wait(30) == -9
    proc.stop()
    with CoordinatorProc(root, log_path=tmp_path / "c2.log") as proc2:
        assert proc2.client().end_txn("tx", pid, ep, True)["outcome"] == "commit"
        assert committed_values(st) == [[f"one-{p}".encode()] for p in range(PARTS)]
        assert assert_consistent(st)[(pid, ep)] == {ControlType.COMMIT}


def test_graceful_sigterm_exits_zero_and_unregisters(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    proc = CoordinatorProc(root, log_path=tmp_path / "c.log")
    proc.wait_healthy()
    proc.client().create_topic("t", 1)
    assert proc.stop() == 0
    assert not Storage.for_url(root).exists(layout.COORDINATOR_FILE)


def _snapshots(st: Storage) -> list[int]:
    return sorted(int(o.name[:20]) for o in st.list(layout.TRANSACTION_STATE_DIR)
                  if o.name.endswith(".snapshot"))


def _recovery_line(proc: CoordinatorProc) -> str:
    return next(line for line in proc.log_text().splitlines() if "recovery read" in line)


def test_snapshot_by_objects_and_after_a_long_replay(tmp_path: Path) -> None:
    """Snapshots come every --snapshot-every-objects log objects, and a coordinator that
    had to replay many objects snapshots right after its takeover, so a restart loop never
    replays the same objects again; state survives every restart (SIGKILL)."""
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    never = ["--snapshot-every-records", "1000000", "--snapshot-every-s", "100000"]
    # 1: no snapshot at all while it runs (thresholds out of reach)
    proc = CoordinatorProc(root, log_path=tmp_path / "c1.log",
                           extra=[*never, "--snapshot-every-objects", "1000000"])
    proc.wait_healthy()
    c = proc.client()
    c.create_topic("t", PARTS)
    pid, ep = c.init_producer_id("tx")
    for i in range(6):  # each transaction is several sequential log objects
        run_txn(c, st, "tx", pid, ep, f"a{i}")
        out = c.end_txn("tx", pid, ep, True)
        pid, ep = out["producer_id"], out["epoch"]
    assert _snapshots(st) == []
    proc.kill()
    # 2: replays them all, then snapshots at once (takeover) and every 4 objects after that
    proc2 = CoordinatorProc(root, log_path=tmp_path / "c2.log",
                            extra=[*never, "--snapshot-every-objects", "4"])
    proc2.wait_healthy()
    assert " 0 log objects" not in _recovery_line(proc2)
    deadline = time.monotonic() + 30
    while not _snapshots(st) and time.monotonic() < deadline:
        time.sleep(0.05)
    first = _snapshots(st)
    assert first, proc2.log_tail()
    c2 = proc2.client()
    for i in range(4):
        run_txn(c2, st, "tx", pid, ep, f"b{i}")
        out = c2.end_txn("tx", pid, ep, True)
        pid, ep = out["producer_id"], out["epoch"]
    deadline = time.monotonic() + 30
    while _snapshots(st)[-1:] == first[-1:] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _snapshots(st)[-1] > first[-1], proc2.log_tail()
    proc2.kill()
    # 3: recovers from the newest snapshot plus the few objects after it, state intact
    proc3 = CoordinatorProc(root, log_path=tmp_path / "c3.log")
    proc3.wait_healthy()
    try:
        line = _recovery_line(proc3)
        assert "snapshot none" not in line
        c3 = proc3.client()
        desc = c3.describe_txn("tx")
        assert (desc["producer_id"], desc["epoch"]) == (pid, ep)
        assert committed_values(st) == [[f"{x}{i}-{p}".encode() for x, n in (("a", 6), ("b", 4))
                                         for i in range(n)] for p in range(PARTS)]
        assert_consistent(st)
        run_txn(c3, st, "tx", pid, ep, "c")
        assert c3.end_txn("tx", pid, ep, True)["outcome"] == "commit"
    finally:
        proc3.stop()
