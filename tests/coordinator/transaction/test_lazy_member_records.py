"""A Spark batch write's membership and reservations are lazy log records, real coordinators.

A batch write's one-shot id, its tasks' memberships and their reservations are answered at
once and ride in the append of the driver's EndTxn (its Prepare), so a write's tasks add no
log objects of their own. These tests show what that costs when the coordinator is lost
before they were durable: the write fails and is retried, it is never committed without its
records, and no producer id is handed out twice.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator import errors
from txnlog.coordinator.client.segment_writer import WrittenRange, put_shared_object
from txnlog.log_format.codec.records import encode_batch
from txnlog.log_format.layout import TRANSACTION_STATE_DIR
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.segments import shared_object
from txnlog.log_format.stable import read_latest_stable
from txnlog.log_format.storage import Storage

# lazy records wait for an eager append, however slow the machine
LINGER = ["--log-linger-ms", "600000"]


def _log_objects(st: Storage) -> int:
    return sum(o.name.endswith(".log") for o in st.list(TRANSACTION_STATE_DIR))


def write(st: Storage, topic: str, p: int, base: int, pid: int, epoch: int,
          values: list[str]) -> WrittenRange:
    """One transactional batch written as a Spark task writes it: a shared object of its
    own under a fresh name; returns the run, as the task's commit message carries it."""
    data = encode_batch([(None, v.encode(), [], None) for v in values], base_offset=base,
                        producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        transactional=True)
    obj, (entry,) = shared_object.build(
        [shared_object.RunToWrite(topic, p, base, base + len(values), data)], pid, epoch)
    path = put_shared_object(st.put_if_absent, obj, pid, epoch)
    assert path is not None
    return WrittenRange(topic, p, base, path, entry.position, entry.size)


def _values(st: Storage, topic: str, p: int, isolation: str = "read_committed") -> list:
    reader = PartitionReader(st, topic, p, snapshot=read_latest_stable(st),
                             isolation_level=isolation)
    return reader.read_table().column("value").to_pylist()


def test_a_writes_members_and_reservations_ride_in_its_end_txn(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    with CoordinatorProc(root, extra=LINGER, log_path=tmp_path / "c.log") as coord:
        c = coord.client()
        c.create_topic("t", 2)
        c.init_producer_id(None)  # the first id takes a pid block: a durable record at once
        tid = f"write-{uuid.uuid4().hex[:8]}"
        before = _log_objects(st)
        pid, ep = c.init_producer_id(tid, one_shot=True)
        members = [c.add_member(tid, pid, ep, f"p{p}-a0") for p in range(2)]
        written = []
        for p, (mpid, mep) in enumerate(members):
            base = c.reserve(mpid, mep, {("t", p): (0, 1)})[("t", p)]
            written.append(write(st, "t", p, base, mpid, mep, [f"v{p}"]))
        assert _log_objects(st) == before, "a task's calls wrote log objects of their own"
        out = c.end_txn(tid, pid, ep, commit=True, members=[m for m, _ in members],
                        written=written)
        assert out["outcome"] == "commit"
        # one append for the id, members, reservations, confirms and Prepare; one Complete
        assert _log_objects(st) - before <= 2
        assert [_values(st, "t", p) for p in range(2)] == [[b"v0"], [b"v1"]]
        # a reusable id's members outside a Spark write (no one-shot id, no micro-batch)
        # still wait for their records
        before = _log_objects(st)
        stream = f"stream-{uuid.uuid4().hex[:8]}"
        spid, sep = c.init_producer_id(stream)
        c.add_member(stream, spid, sep, "b0-p0")
        assert _log_objects(st) == before + 2


def test_a_reservation_lost_with_its_coordinator_is_never_committed(tmp_path: Path) -> None:
    """The member's record was durable (a synced answer wrote it), its reservation was not
    when the coordinator died: the next coordinator refuses a commit naming that run, rather
    than committing the transaction without its records; the abort that follows leaves
    nothing, not even for read_uncommitted."""
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    tid = f"job-{uuid.uuid4().hex[:8]}"
    with CoordinatorProc(root, extra=LINGER, log_path=tmp_path / "a.log") as a:
        c = a.client()
        c.create_topic("t", 1)
        # the coordinator's first id takes a pid block: durable at once, one-shot as a
        # batch write's
        pid, ep = c.init_producer_id(tid, one_shot=True)
        mpid, mep = c.add_member(tid, pid, ep, "p0-a0")
        assert c.describe_txn(tid)["state"] == "Ongoing"  # a synced answer: member durable
        base = c.reserve(mpid, mep, {("t", 0): (0, 1)})[("t", 0)]
        run = write(st, "t", 0, base, mpid, mep, ["lost"])
        a.kill()
    with CoordinatorProc(root, extra=LINGER, log_path=tmp_path / "b.log") as b:
        c = b.client()
        with pytest.raises(errors.InvalidTxnStateError, match="never reserved"):
            c.end_txn(tid, pid, ep, commit=True, members=[mpid], written=[run])
        assert c.end_txn(tid, pid, ep, commit=False)["outcome"] == "abort"
        assert _values(st, "t", 0, "read_uncommitted") == []
        # the write is redone under a new one-shot id, at the new coordinator's offsets
        tid = f"job-{uuid.uuid4().hex[:8]}"
        pid2, ep2 = c.init_producer_id(tid, one_shot=True)
        m2, e2 = c.add_member(tid, pid2, ep2, "p0-a0")
        base2 = c.reserve(m2, e2, {("t", 0): (0, 1)})[("t", 0)]
        run2 = write(st, "t", 0, base2, m2, e2, ["again"])
        assert c.end_txn(tid, pid2, ep2, commit=True, members=[m2],
                         written=[run2])["outcome"] == "commit"
        assert _values(st, "t", 0) == [b"again"]


def test_a_one_shot_id_lost_with_its_coordinator_fails_the_write_and_is_never_reused(
        tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    st = Storage.for_url(root)
    tid = f"write-{uuid.uuid4().hex[:8]}"
    with CoordinatorProc(root, extra=LINGER, log_path=tmp_path / "a.log") as a:
        c = a.client()
        c.create_topic("t", 1)
        c.init_producer_id(None)  # the first id takes a pid block: a durable record at once
        pid, ep = c.init_producer_id(tid, one_shot=True)
        mpid, mep = c.add_member(tid, pid, ep, "p0-a0")
        base = c.reserve(mpid, mep, {("t", 0): (0, 1)})[("t", 0)]
        run = write(st, "t", 0, base, mpid, mep, ["lost"])
        a.kill()
    with CoordinatorProc(root, extra=LINGER, log_path=tmp_path / "b.log") as b:
        c = b.client()
        with pytest.raises(errors.InvalidProducerIdMappingError):
            c.end_txn(tid, pid, ep, commit=True, members=[mpid], written=[run])
        handed = {c.init_producer_id(f"other-{i}")[0] for i in range(3)}
        other_pid, other_ep = c.init_producer_id("other-0")
        handed.add(c.add_member("other-0", other_pid, other_ep, "k")[0])
        assert not handed & {pid, mpid}, "a producer id of the lost coordinator was reused"
        assert _values(st, "t", 0, "read_uncommitted") == []
