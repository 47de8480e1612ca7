"""The checker catches planted bugs: one safety mechanism off at a time (TXNLOG_UNSAFE).

Each case runs a small deterministic scenario against a real coordinator process twice:
with the mechanism on (the history must be valid) and off (the checker must report the
matching anomaly). The scenarios record their history with the harness's own helpers, so
this also tests the recording path. Then the harness itself (``run.py``, short profile,
run only as long as each bug takes to show) must report the planted bugs it can meet, and
a last check fails if any switch has no test planting it.
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator import errors as cerr
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import IdempotentProducer, TransactionalProducer
from txnlog.log_format import layout
from txnlog.log_format.arrow.arrow_codec import encode_arrow
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.manifest import read_latest_manifest
from txnlog.log_format.segments import shared_object
from txnlog.log_format.storage import Storage

from . import workload
from .checker import ANOMALIES, check
from .history import HistoryWriter, read_history

TOPIC = "chaos-a"


class Recorder:
    """Just enough of the workload's bookkeeping for hand-driven scenarios."""

    def __init__(self, path: Path) -> None:
        self.h = HistoryWriter(path / "h.jsonl", "test")
        self.path = path

    def send(self, p: TransactionalProducer, txn: str, value: int, partition: int) -> None:
        self.h.write("send", proc=txn.split(":")[0], txn=txn, topic=TOPIC,
                     partition=partition, key="k", value=value)
        p.send(TOPIC, str(value).encode(), key=b"k", partition=partition)

    def end(self, p: TransactionalProducer, txn: str, commit: bool) -> str:
        f = "commit" if commit else "abort"
        try:
            p.commit_transaction() if commit else p.abort_transaction()
            outcome = "ok"
        except Exception as exc:
            outcome = workload.classify(exc)
            if not commit and outcome == "fail":
                outcome = "unknown"
        self.h.write(f, proc=txn.split(":")[0], txn=txn, outcome=outcome)
        return outcome

    def poll(self, c: Consumer, mode: str = "poll") -> None:
        self.h.write("poll", proc=f"c-{c.isolation_level}", mode=mode,
                     **workload.poll_op(c, 1000))

    def scan(self, root: str, mode: str = "scan", iso: str = "read_committed") -> None:
        self.h.write("poll", proc=f"scan-{iso}", mode=mode, **workload.scan_op(root, iso))

    def final(self, root: str) -> None:
        for iso in ("read_committed", "read_uncommitted"):
            self.scan(root, "final", iso)

    def check(self) -> dict[str, int]:
        self.h.close()
        res = check(read_history(self.path / "h.jsonl"))
        print(res.summary())
        return res.counts

    def expect(self, planted: bool, *anomalies: str) -> None:
        """Check the history: with the bug planted every one of ``anomalies`` must be
        reported (others may come with them), without it none at all."""
        found = self.check()
        if planted:
            assert set(anomalies) <= set(found), found
        else:
            assert found == {}


def coordinator(tmp_path: Path, **kw: Any) -> tuple[str, CoordinatorProc]:
    root = (tmp_path / "root").as_uri()
    proc = CoordinatorProc(root, log_path=tmp_path / f"c{len(list(tmp_path.glob('c*.log')))}.log",
                           **kw)
    proc.wait_healthy()
    for topic, n in workload.TOPICS.items():
        proc.client().create_topic(topic, n, exist_ok=True)
    return root, proc


def producer(root: str, endpoint: str, tid: str) -> TransactionalProducer:
    p = TransactionalProducer(root, tid, coordinator=endpoint, transaction_timeout_ms=60_000)
    p.init_transactions()
    return p


def test_every_planted_bug_has_a_test() -> None:
    """Every switch in ``planted_bugs`` is planted by some test: its name is a string in a
    test function of tests/ (its body or its decorators: a parametrize id, the
    TXNLOG_UNSAFE value it sets), read from the tests themselves. A switch nothing plants
    proves nothing: the mechanism it turns off may be untested. The module's docstring,
    which says where each acts, lists exactly the switches too."""
    import ast

    from txnlog.log_format import planted_bugs

    documented = set(re.findall(r"^- ``(\w+)``:", planted_bugs.__doc__ or "", re.MULTILINE))
    assert documented == set(planted_bugs.NAMES), documented ^ set(planted_bugs.NAMES)
    planted: dict[str, list[str]] = {}
    tests_dir = Path(__file__).resolve().parents[1]
    for path in sorted(tests_dir.rglob("test_*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) \
                    or not fn.name.startswith("test_") \
                    or fn.name == "test_every_planted_bug_has_a_test":
                continue
            for node in [*fn.decorator_list, *fn.body]:
                for c in ast.walk(node):
                    if isinstance(c, ast.Constant) and c.value in planted_bugs.NAMES:
                        planted.setdefault(c.value, []).append(f"{path.name}::{fn.name}")
    missing = sorted(planted_bugs.NAMES - set(planted))
    assert not missing, f"planted bugs no test plants: {missing}"


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "ignore_lso"])
def test_ignore_lso_is_a_read_past_lso(planted: bool, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path)
    try:
        a = producer(root, proc.endpoint, "A")  # type: ignore[arg-type]
        a.begin_transaction()
        rec.send(a, "A:0", 1, 0)
        a.flush()  # written, not committed: HW > LSO
        proc.client().stable(publish=True)  # as any other transaction's completion would
        if planted:
            monkeypatch.setenv("TXNLOG_UNSAFE", "ignore_lso")
        rec.poll(Consumer(root, TOPIC))
        monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
        rec.end(a, "A:0", commit=False)
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "read-past-lso", "aborted-read")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "tail_aborts_ignored"])
def test_tail_aborts_ignored_is_an_aborted_read(planted: bool, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An aborted transaction's data in two partitions, its ABORT markers in one shared
    object: the entries hiding its data are published with the markers' runs (merging off,
    so they stay in the tail). A reader that ignores them reads the aborted records."""
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path, extra=["--no-merge"])
    try:
        a = producer(root, proc.endpoint, "A")  # type: ignore[arg-type]
        a.begin_transaction()
        rec.send(a, "A:0", 1, 0)
        rec.send(a, "A:0", 2, 1)
        a.flush()  # the data is written, then aborted
        assert rec.end(a, "A:0", commit=False) == "ok"
        a.begin_transaction()
        rec.send(a, "A:1", 3, 0)
        assert rec.end(a, "A:1", commit=True) == "ok"
        if planted:
            monkeypatch.setenv("TXNLOG_UNSAFE", "tail_aborts_ignored")
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "aborted-read")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "no_epoch_check"])
def test_no_epoch_check_lets_a_zombie_commit(planted: bool, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "no_epoch_check")  # the coordinator inherits it
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path)
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    try:
        zombie = producer(root, proc.endpoint, "X")  # type: ignore[arg-type]
        zombie.begin_transaction()
        rec.send(zombie, "Z:0", 1, 0)
        rec.send(zombie, "Z:0", 2, 1)
        zombie.flush()
        # a newer instance of the same transactional id fences the zombie, aborting its txn
        fresh = producer(root, proc.endpoint, "X")  # type: ignore[arg-type]
        fresh.begin_transaction()
        rec.send(fresh, "N:0", 3, 0)
        assert rec.end(fresh, "N:0", commit=True) == "ok"
        # the zombie wakes up, sends more and commits with its old epoch
        rec.send(zombie, "Z:0", 4, 1)
        outcome = rec.end(zombie, "Z:0", commit=True)
        assert outcome == ("ok" if planted else "fail")
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "lost-write")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "abort_after_prepare"])
def test_abort_after_prepare_is_an_aborted_read(planted: bool, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "abort_after_prepare")
    rec = Recorder(tmp_path)
    # the coordinator dies once the commit is complete, before it answers
    root, proc = coordinator(tmp_path, faults="after_complete_before_reply")
    procs = [proc]
    try:
        p = producer(root, proc.endpoint, "P")  # type: ignore[arg-type]
        p.client = CoordinatorClient(proc.endpoint, timeout=10, retry_for=0.5)
        p.begin_transaction()
        rec.send(p, "P:0", 1, 0)
        rec.send(p, "P:0", 2, 1)
        assert rec.end(p, "P:0", commit=True) == "unknown"
        assert proc.wait(30) == -9
        _, proc2 = coordinator(tmp_path)
        procs.append(proc2)
        # Kafka's advice after an ambiguous commit: abort. It must be refused.
        p.client = CoordinatorClient(proc2.endpoint, timeout=10, retry_for=5)  # type: ignore
        outcome = rec.end(p, "P:0", commit=False)
        assert outcome == ("ok" if planted else "unknown")
        rec.final(root)
    finally:
        for c in procs:
            c.stop()
    rec.expect(planted, "aborted-read")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "plain_put"])
def test_plain_put_lets_a_zombie_write_over_its_fence(planted: bool, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path)
    storage = Storage.for_url(root)
    try:
        c = proc.client()
        pid, epoch = c.init_producer_id("X", 60_000)
        base = c.reserve(pid, epoch, {(TOPIC, 0): (0, 1)})[(TOPIC, 0)]
        rec.h.write("send", proc="Z", txn="Z:0", topic=TOPIC, partition=0, key="k", value=7)
        # the zombie stalls before its write; a newer instance aborts it and fences `base`
        c.init_producer_id("X", 60_000)
        rec.scan(root, "scan", "read_uncommitted")
        data = encode_arrow(pa.RecordBatch.from_pydict({"value": [b"7"]}), producer_id=pid,
                            producer_epoch=epoch, base_sequence=0,
                            transactional=True).with_base_offset(base)
        if planted:
            monkeypatch.setenv("TXNLOG_UNSAFE", "plain_put")
        landed = storage.put_if_absent(layout.segment_path(TOPIC, 0, base), data)
        monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
        assert landed is planted
        with pytest.raises(cerr.CoordinatorError):
            c.confirm(pid, epoch, [(TOPIC, 0, base)])
            c.end_txn("X", pid, epoch, True)
        rec.h.write("commit", proc="Z", txn="Z:0", outcome="fail")
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "inconsistent-offset")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "one_shot_early_drop"])
def test_one_shot_early_drop_is_caught(planted: bool, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-shot id dropped before its retention period: a retried EndTxn inside the
    period gets "unknown id" (``early-drop``). The retention is 60 s and every retry comes
    within 10 s of the commit; the planted coordinator drops the id at its next timer tick
    (0.2 s), so the retries run until one sees that or 10 s pass."""
    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "one_shot_early_drop")
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path, extra=["--one-shot-id-retention-ms", "60000"])
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    try:
        c = proc.client()
        c.init_producer_id("txnlog-write-1", 60_000, one_shot=True)
        p = producer(root, proc.endpoint, "txnlog-write-1")  # type: ignore[arg-type]
        pid, epoch = p.producer_id, p.epoch
        t0 = time.time()
        p.begin_transaction()
        rec.send(p, "W:0", 1, 0)
        assert rec.end(p, "W:0", commit=True) == "ok"
        answers = []
        while time.time() - t0 < 10 and "unknown-id" not in answers:
            time.sleep(0.3)
            try:
                c.end_txn("txnlog-write-1", pid, epoch, True)
                answer = "same"
            except cerr.InvalidProducerIdMappingError:
                answer = "unknown-id"
            answers.append(answer)
            rec.h.write("retry", proc="W", txn="W:0", tid="txnlog-write-1", end="commit",
                        t0=t0, t1=time.time(), answer=answer, retention_ms=60_000)
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "early-drop")
    if not planted:
        assert set(answers) == {"same"}


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "delta_omits_partition"])
def test_delta_omits_partition_is_a_torn_transaction(planted: bool, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A stable delta head that leaves out one partition a commit moved: a fresh reader
    right after the commit sees the transaction in one partition and not the other."""
    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "delta_omits_partition")  # the coordinator's
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path)
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    try:
        p = producer(root, proc.endpoint, "P")  # type: ignore[arg-type]
        p.begin_transaction()
        rec.send(p, "P:0", 1, 0)
        rec.send(p, "P:0", 2, 1)
        assert rec.end(p, "P:0", commit=True) == "ok"
        rec.scan(root)  # a fresh reader, right after the commit's head
        proc.client().stable(publish=True)  # a head with nothing new shows every partition
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "torn-transaction")


# ---------------------------------------------------------------------------- merging
MERGE_FLAGS = ["--merge-min-objects", "2", "--merge-fanout", "2", "--merge-interval-s", "0.1"]


def merging_coordinator(tmp_path: Path, grace_ms: int) -> tuple[str, CoordinatorProc]:
    """A coordinator merging every 2 small objects below the LSO, every 0.1 s; topics whose
    merged-away objects are deleted ``grace_ms`` after they were merged."""
    root = (tmp_path / "root").as_uri()
    proc = CoordinatorProc(root, log_path=tmp_path / "merging.log", extra=MERGE_FLAGS)
    proc.wait_healthy()
    for topic, n in workload.TOPICS.items():
        proc.client().create_topic(topic, n, {"file.delete.delay.ms": grace_ms}, exist_ok=True)
    return root, proc


def wait_for(cond: Any, what: str, timeout: float = 90.0) -> None:
    """A liveness bound, not a timing claim: the merger gets there or the test says so."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.05)


def merged_end(storage: Storage) -> int:
    man = read_latest_manifest(storage, TOPIC, 0)
    return man.end_offset if man is not None else 0


def small_below_merged_end(storage: Storage) -> list[int]:
    m = merged_end(storage)
    listing = storage.list(layout.partition_dir(TOPIC, 0))
    found = (layout.parse_segment_name(o.name) for o in listing)
    return [s.base_offset for s in found if s is not None and s.base_offset < m]


def commit_some(rec: Recorder, p: TransactionalProducer, first: int, n: int) -> None:
    for i in range(first, first + n):
        p.begin_transaction()
        rec.send(p, f"P:{i}", 100 + i, 0)
        assert rec.end(p, f"P:{i}", commit=True) == "ok"


def zombie_reserves(rec: Recorder, c: CoordinatorClient) -> tuple[int, int, int]:
    """Transaction Z:0 reserves one offset of partition 0 and stalls before its write."""
    pid, epoch = c.init_producer_id("X", 60_000)
    base = c.reserve(pid, epoch, {(TOPIC, 0): (0, 1)})[(TOPIC, 0)]
    rec.h.write("send", proc="Z", txn="Z:0", topic=TOPIC, partition=0, key="k", value=7)
    return pid, epoch, base


def zombie_fenced(rec: Recorder, c: CoordinatorClient, pid: int, epoch: int) -> None:
    """A newer instance aborts Z:0 (a 0-byte fence takes its reserved name)."""
    c.init_producer_id("X", 60_000)
    with pytest.raises(cerr.CoordinatorError):
        c.end_txn("X", pid, epoch, True)
    rec.h.write("commit", proc="Z", txn="Z:0", outcome="fail")


def commit_some_own_objects(rec: Recorder, c: CoordinatorClient, storage: Storage,
                            first: int, n: int) -> None:
    """Like ``commit_some``, but each record written as a root of an earlier version holds
    it: an object of the partition's own at its base offset (reserve, put, EndTxn naming
    it), where a listing finds it by name."""
    pid, epoch = c.init_producer_id("L", 60_000)
    for i in range(first, first + n):
        txn = f"L:{i}"
        base = c.reserve(pid, epoch, {(TOPIC, 0): (0, 1)})[(TOPIC, 0)]
        rec.h.write("send", proc="L", txn=txn, topic=TOPIC, partition=0, key="k",
                    value=100 + i)
        data = encode_arrow(pa.RecordBatch.from_pydict({"key": [b"k"],
                                                        "value": [str(100 + i).encode()]}),
                            producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            transactional=True).with_base_offset(base)
        assert storage.put_if_absent(layout.segment_path(TOPIC, 0, base), data)
        out = c.end_txn("L", pid, epoch, True, written=[(TOPIC, 0, base)])
        pid, epoch = out["producer_id"], out["epoch"]
        rec.h.write("commit", proc="L", txn=txn, outcome="ok")


def zombie_put(storage: Storage, pid: int, epoch: int, base: int) -> bool:
    """The zombie wakes up and writes its reservation, put-if-absent."""
    data = encode_arrow(pa.RecordBatch.from_pydict({"value": [b"7"]}), producer_id=pid,
                        producer_epoch=epoch, base_sequence=0,
                        transactional=True).with_base_offset(base)
    return storage.put_if_absent(layout.segment_path(TOPIC, 0, base), data)


# ---------------------------------------------------------------------- shared objects
@pytest.mark.parametrize("planted", [False, True], ids=["safe", "trust_unconfirmed_runs"])
def test_trust_unconfirmed_runs_reads_a_zombies_shared_object(
        planted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zombie's write lands in a shared object of its own (its name is fresh: nothing
    can stop the put), but its range was fenced and its confirm can change nothing, so no
    published tail names it. A reader taking runs from the shared objects' footers instead
    of the confirmed tails reads it where it read nothing before."""
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path)
    storage = Storage.for_url(root)
    try:
        c = proc.client()
        pid, epoch, base = zombie_reserves(rec, c)
        rec.scan(root, "scan", "read_uncommitted")
        zombie_fenced(rec, c, pid, epoch)
        rec.scan(root, "scan", "read_uncommitted")
        data = encode_arrow(pa.RecordBatch.from_pydict({"value": [b"7"]}), producer_id=pid,
                            producer_epoch=epoch, base_sequence=0,
                            transactional=True).with_base_offset(base)
        obj, runs = shared_object.build(
            [shared_object.RunToWrite(TOPIC, 0, base, base + 1, data)], pid, epoch)
        path = layout.shared_object_path(layout.shared_object_name(pid, epoch, "ab" * 8))
        assert storage.put_if_absent(path, obj)  # the zombie's put always lands now
        with contextlib.suppress(cerr.CoordinatorError):  # nothing to confirm any more
            c.confirm(pid, epoch, [(TOPIC, 0, base, path, runs[0].position, runs[0].size)])
        if planted:
            monkeypatch.setenv("TXNLOG_UNSAFE", "trust_unconfirmed_runs")
        rec.final(root)
        monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    finally:
        proc.stop()
    rec.expect(planted, "inconsistent-offset")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "shared_deleted_early"])
def test_shared_deleted_early_loses_another_partitions_run(
        planted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One idempotent flush writes partitions 0 and 1: one shared object holds both runs.
    Partition 0 then gets enough commits to be merged past that object; partition 1 holds
    that one run only, too few to merge. The object may go only once every partition it
    holds runs of merged past it: a merger deleting it when the first one did loses
    partition 1's record."""
    rec = Recorder(tmp_path)
    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "shared_deleted_early")
    root, proc = merging_coordinator(tmp_path, 2000)
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    storage = Storage.for_url(root)
    lost: BaseException | None = None
    try:
        with IdempotentProducer(root, coordinator=proc.endpoint) as ip:
            for value, partition in ((1, 0), (2, 1)):
                rec.h.write("send", proc="I", txn="I:0", topic=TOPIC, partition=partition,
                            key="k", value=value)
                ip.send(TOPIC, str(value).encode(), key=b"k", partition=partition)
            ip.flush()
        rec.h.write("commit", proc="I", txn="I:0", outcome="ok")
        p = producer(root, proc.endpoint, "P")
        first = {o.name for o in storage.list(layout.SHARED_DIR)}
        commit_some(rec, p, 1, 8)  # partition 0 only: it merges past the first object
        wait_for(lambda: merged_end(storage) > 2, "partition 0 merged past the first object")
        deadline = time.monotonic() + 6  # the grace (2 s) and a cleanup pass, with margin
        while time.monotonic() < deadline and first <= {o.name for o in
                                                        storage.list(layout.SHARED_DIR)}:
            time.sleep(0.1)
        named = first <= {o.name for o in storage.list(layout.SHARED_DIR)}
        try:
            rec.final(root)
        except FileNotFoundError as exc:  # the run's object is gone: what the bug does
            lost = exc
    finally:
        proc.stop()
    if planted:
        assert lost is not None or rec.check(), "a lost shared object went unnoticed"
    else:
        assert named  # partition 1 still names it: kept past the grace period
        assert lost is None and rec.check() == {}


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "trust_merged_away"])
def test_trust_merged_away_reads_a_zombie_in_a_freed_name(
        planted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The freed-name trap: a zombie's reserved offset is fenced, the fence merged below the
    merged end and deleted after the grace period; the zombie's late put-if-absent then
    lands. Readers must never look below the merged end (the manifest's objects only); a
    reader trusting the small objects reads the zombie's record as committed."""
    rec = Recorder(tmp_path)
    root, proc = merging_coordinator(tmp_path, 2000)
    storage = Storage.for_url(root)
    try:
        c = proc.client()
        pid, epoch, base = zombie_reserves(rec, c)
        zombie_fenced(rec, c, pid, epoch)
        commit_some(rec, producer(root, proc.endpoint, "P"), 0, 6)  # type: ignore[arg-type]
        # the fence and the abort marker's .txnindex merged, and deleted 2 s later
        wait_for(lambda: merged_end(storage) > base + 1 and not small_below_merged_end(storage),
                 "everything below the merged end deleted")
    finally:
        proc.stop()  # no cleanup sweeps the late write away before the reads below
    assert zombie_put(storage, pid, epoch, base)  # the name is free again
    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "trust_merged_away")
    rec.scan(root)
    rec.scan(root, iso="read_uncommitted")
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    rec.final(root)
    rec.expect(planted, "aborted-read")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "delete_before_grace"])
def test_delete_before_grace_shows_a_reader_what_its_manifest_did_not_cover(
        planted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader gets the manifest, then lists the small objects from its merged end. The
    merger may merge (and move the merged end past) what it then lists: the grace period
    keeps those small objects, fences included, until no such reader can still be between
    its two requests. Deleting at once lets the listing miss merged data (holes) and find a
    zombie's late write in a freed name. Reading an object deleted under it makes a reader
    list again; a name it never listed cannot. The reader (a consumer at the tail, reading
    small objects only) has its manifest GET replayed from before the merge: the window
    between its two requests, made long. The records are written as a root of an earlier
    version holds them (an object per partition per write, found by listing): what the
    grace period protects; a run in a shared object is found through the head, which a
    reader reads before its manifest."""
    from txnlog.log_format import reader as reader_mod

    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "delete_before_grace")  # the coordinator's
    rec = Recorder(tmp_path)
    root, proc = merging_coordinator(tmp_path, 10_000)
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    storage = Storage.for_url(root)
    try:
        c = proc.client()
        commit_some_own_objects(rec, c, storage, 0, 3)
        wait_for(lambda: merged_end(storage) > 0, "a first merge")
        pid, epoch, base = zombie_reserves(rec, c)
        stale = read_latest_manifest(storage, TOPIC, 0)  # the reader's GET: Z:0 holds the LSO
        assert stale is not None and stale.end_offset <= base
        zombie_fenced(rec, c, pid, epoch)
        commit_some_own_objects(rec, c, storage, 3, 4)
        wait_for(lambda: merged_end(storage) > base + 1, "the fence merged")
        if planted:
            wait_for(lambda: not small_below_merged_end(storage), "deleted at once")
    finally:
        proc.stop()  # no cleanup sweeps the late write away before the reads below
    assert zombie_put(storage, pid, epoch, base) is planted  # the fence still holds the name
    real = reader_mod.read_latest_manifest
    replayed: list[int] = []

    def manifest_from_before(st: Storage, topic: str, partition: int) -> Any:
        if (topic, partition) == (TOPIC, 0) and not replayed:
            replayed.append(1)
            return stale
        return real(st, topic, partition)

    monkeypatch.setattr(reader_mod, "read_latest_manifest", manifest_from_before)
    tail = Consumer(root, TOPIC)  # lists partition 0 (with the manifest from before)
    tail.seek((TOPIC, 0), base)  # where it stopped: the LSO while Z:0 was open
    rec.poll(tail)
    monkeypatch.setattr(reader_mod, "read_latest_manifest", real)
    assert replayed
    rec.final(root)
    rec.expect(planted, "aborted-read")


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "merge_above_lso"])
def test_merge_above_lso_loses_a_late_write(planted: bool, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An open transaction has reserved an offset and not written it yet (its put is slow);
    commits go on after it. Below the LSO every offset is resolved; above it a gap may be
    a write still to come. A merger going past the LSO takes the gap for resolved and moves
    the merged end past it: the write lands below the merged end, the transaction commits,
    and no reader ever sees it."""
    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "merge_above_lso")  # the coordinator's
    rec = Recorder(tmp_path)
    root, proc = merging_coordinator(tmp_path, 2000)
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    storage = Storage.for_url(root)
    try:
        c = proc.client()
        p = producer(root, proc.endpoint, "P")  # type: ignore[arg-type]
        # the gap comes first: a merge of commits below it (merged end = the gap) would
        # make the planted merger refuse the gap instead of going past it, and whether
        # one runs before the reservation depends on the machine's load
        pid, epoch = c.init_producer_id("A", 60_000)
        base = c.reserve(pid, epoch, {(TOPIC, 0): (0, 1)})[(TOPIC, 0)]
        rec.h.write("send", proc="A", txn="A:0", topic=TOPIC, partition=0, key="k", value=1)
        commit_some(rec, p, 0, 6)
        if planted:
            wait_for(lambda: merged_end(storage) > base, "merged past the gap")
        data = encode_arrow(pa.RecordBatch.from_pydict({"value": [b"1"]}), producer_id=pid,
                            producer_epoch=epoch, base_sequence=0,
                            transactional=True).with_base_offset(base)
        assert storage.put_if_absent(layout.segment_path(TOPIC, 0, base), data)
        c.confirm(pid, epoch, [(TOPIC, 0, base)])
        c.end_txn("A", pid, epoch, True)
        rec.h.write("commit", proc="A", txn="A:0", outcome="ok")
        proc.client().stable(publish=True)
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "lost-write")


# seed 7: a producer's second transaction is a late-write zombie (the workers' choices
# follow the seed), so its name is freed under it on a loaded machine too; with seed 5 the
# first one comes at the 17th, which a loaded 2-core machine reaches at the 12 s deadline,
# too late for its name to be freed before the run stops (nothing to catch)
# The harness's self-checks for the other switches it meets (file, seed 5, the short
# profile's producers): the fault class that opens the bug's window, the seconds of
# workload it takes to be caught with a margin (measured on 2 loaded cores: read-past-lso 7,
# torn-transaction 20, early-drop 5 in 6 s), and what the run must report. Switches it does
# not meet in a short run have their deterministic tests above only: plain_put and
# abort_after_prepare (zombie, coordinator-faultpoints: none in 12 s), no_epoch_check
# (zombie: caught with seed 5, not 7), merge_above_lso (the reserve-to-put gap is too short),
# read_below_log_start (--retention: its readers never lag below a log start in 20 s),
# trust_merged_away and delete_before_grace (what they break is what a listing finds by
# name: the partitions' own objects, which the harness's writers no longer write — their
# runs are in shared objects, found through the head a reader holds, and a run whose object
# was deleted under a reader makes it list again; their deterministic tests write objects
# of the partition's own, as roots of earlier versions hold them).
HARNESS_SEEDS = (5, 7, 11)
HARNESS = [
    # the same runs with nothing planted (retention too) report nothing
    pytest.param("", "none", 8.0, True, "", id="safe"),
    pytest.param("ignore_lso", "none", 6.0, False, "read-past-lso", id="ignore_lso"),
    pytest.param("delta_omits_partition", "none", 6.0, False, "torn-transaction",
                 id="delta_omits_partition"),
    pytest.param("one_shot_early_drop", "none", 6.0, False, "early-drop",
                 id="one_shot_early_drop"),
    # no history anomaly: the run ends in an error, the final read's (an object the
    # manifest names, a closed segment or a run, not found) or, when the next retention
    # dropped that object before any read, the run's own check that every object a
    # manifest names is there
    pytest.param("retention_deletes_kept_segment", "none", 12.0, True,
                 r"missing from storage"
                 r"|^FileNotFoundError: .*/chaos-[ab]-\d+/(segments|runs/\d+)/\d{20}\.\w+'",
                 id="retention_deletes_kept_segment"),
    # a shared object deleted while another partition's tail names it: the final read (or
    # a reader's poll) finds the object gone
    # runs taken from the shared objects' footers instead of the published tails: merged
    # and unconfirmed runs read again
    pytest.param("trust_unconfirmed_runs", "none", 8.0, False, "inconsistent-offset",
                 id="trust_unconfirmed_runs"),
    # an abort's .txnindex entries in the tail ignored: its flushed data read as committed
    pytest.param("tail_aborts_ignored", "none", 6.0, False, "aborted-read",
                 id="tail_aborts_ignored"),
    pytest.param("shared_deleted_early", "none", 10.0, False,
                 r"^FileNotFoundError: .*/_wal/\d{20}-\d{5}-[0-9a-f]{16}\.wal'",
                 id="shared_deleted_early"),
]


@pytest.mark.parametrize(("planted", "fault", "seconds", "retention", "reported"), HARNESS)
def test_the_harness_catches_a_planted_bug(planted: str, fault: str, seconds: float,
                                           retention: bool, reported: str,
                                           tmp_path: Path) -> None:
    """The chaos harness itself, run only as long as it takes, reports the planted bug.

    Whether a short run meets a bug depends on timing (a retention pass must drop a segment
    before the final read, a reader must poll inside a window), and on a loaded machine one
    run may end before it does. So a planted bug gets up to ``len(HARNESS_SEEDS)`` runs
    with different seeds and must be reported by one of them, as the bug it is: a harness
    that cannot see it fails every run. The safe run must report nothing on every seed it
    runs (the first)."""
    from dataclasses import replace

    from .run import PROFILES, run_all

    profile = replace(PROFILES["short"], duration=seconds)
    seeds = HARNESS_SEEDS[:1] if not planted else HARNESS_SEEDS
    missed = []
    for seed in seeds:
        (res,) = run_all([fault], ["file"], profile, tmp_path / f"seed-{seed}", seed=seed,
                         unsafe=planted, log=print, retention=retention)
        if not planted:
            assert res.error is None and not res.anomalies and res.committed > 0, res
            return
        if reported not in ANOMALIES:  # the error the run ends with
            if re.search(reported, res.error or ""):
                return
        else:
            assert res.error is None, res.error
            if reported in res.anomalies:
                return
        missed.append(res)
    pytest.fail(f"{planted}: no run of seeds {seeds} reported {reported!r}: {missed}")


def test_the_harness_catches_an_intruder_with_a_super_users_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--acls``, planted: the intruder is given the shared (super user's) token
    (``TXNLOG_CHAOS_INTRUDER_SUPER=1``), so its writes commit; the harness reports them.
    The safe run is ``test_chaos_short.test_chaos_file_acls``."""
    from dataclasses import replace

    from .acls import INTRUDER_SUPER_ENV
    from .run import PROFILES, run_all

    monkeypatch.setenv(INTRUDER_SUPER_ENV, "1")
    (res,) = run_all(["none"], ["file"], replace(PROFILES["short"], duration=5.0), tmp_path,
                     seed=3, log=print, acls=True)
    assert "unauthorized-accepted" in res.anomalies, res
    assert "unauthorized-visible" in res.anomalies, res
    assert res.error is not None and "never refused" in res.error


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "compact_ignore_aborted"])
def test_compact_ignore_aborted_loses_the_latest_committed_value(
        planted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compacted topic: a committed value, then an aborted write of the same
    key, then other keys until segments close and the cleaner runs. The cleaner must not
    let the aborted write supersede the committed value."""
    from .run import COMPACT_CONFIG, MERGE_ARGS, TOPIC_CONFIG

    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "compact_ignore_aborted")  # the coordinator's
    rec = Recorder(tmp_path)
    root = (tmp_path / "root").as_uri()
    proc = CoordinatorProc(root, log_path=tmp_path / "c.log", extra=MERGE_ARGS)
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    try:
        proc.wait_healthy()
        for topic, n in workload.TOPICS.items():
            proc.client().create_topic(topic, n, {**TOPIC_CONFIG, **COMPACT_CONFIG})
        p = producer(root, proc.endpoint, "A")  # type: ignore[arg-type]

        def one(txn: str, value: int, key: str, commit: bool = True) -> None:
            p.begin_transaction()
            rec.h.write("send", proc="A", txn=txn, topic=TOPIC, partition=0, key=key,
                        value=value)
            p.send(TOPIC, str(value).encode(), key=key.encode(), partition=0)
            if not commit:
                p.flush()
            rec.end(p, txn, commit)

        one("A:0", 1, "k")
        one("A:1", 2, "k", commit=False)
        for i in range(2, 40):
            one(f"A:{i}", 100 + i, f"x{i % 5}")
        storage = Storage.for_url(root)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            man = read_latest_manifest(storage, TOPIC, 0)
            if man is not None and any(o.gen and o.base_offset == 0 for o in man.objects):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("never compacted")
        rec.final(root)
    finally:
        proc.stop()
    rec.h.close()
    found = check(read_history(tmp_path / "h.jsonl"), compacted=True).counts
    if planted:
        assert "lost-write" in found, found
    else:
        assert found == {}


def test_the_harness_catches_a_compaction_bug(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The chaos harness with compacted topics (the short profile run for a minute, so
    segments close and are compacted on a loaded machine) reports the planted compaction
    bug."""
    from dataclasses import replace

    from .run import PROFILES, run_all

    monkeypatch.setenv("TXNLOG_CHAOS_COMPACT", "1")
    profile = replace(PROFILES["short"], duration=60.0, txns_per_producer=150)
    (res,) = run_all(["none"], ["file"], profile, tmp_path, seed=5,
                     unsafe="compact_ignore_aborted", log=print)
    assert res.error is None, res.error
    assert res.compacted and res.anomalies, res


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "read_below_log_start"])
def test_read_below_log_start_is_caught(planted: bool, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Records DeleteRecords (or retention) deleted: a reader positioned below the log start
    gets OffsetOutOfRange and resets to it (valid, and the deleted records are not lost
    writes); with the planted bug it reads them anyway: read-below-log-start."""
    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path)
    try:
        a = producer(root, proc.endpoint, "A")  # type: ignore[arg-type]
        for i in range(6):
            a.begin_transaction()
            rec.send(a, f"A:{i}", 10 + i, 0)
            rec.end(a, f"A:{i}", commit=True)
        rec.poll(Consumer(root, TOPIC))  # every record read once: the checker knows where
        low = proc.client().delete_records({(TOPIC, 0): 5})  # inside the records, not 0
        assert low == {(TOPIC, 0): 5}
        if planted:
            monkeypatch.setenv("TXNLOG_UNSAFE", "read_below_log_start")
        rec.h.write("poll", proc="c-below", mode="poll",  # a consumer of its own
                    **workload.poll_op(Consumer(root, assignment={(TOPIC, 0): 0}), 1000))
        monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
        rec.final(root)
    finally:
        proc.stop()
    rec.expect(planted, "read-below-log-start")


@pytest.mark.parametrize("planted", [False, True],
                         ids=["safe", "retention_deletes_kept_segment"])
def test_retention_deletes_kept_segment_loses_a_segment_the_manifest_names(
        planted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """retention.bytes drops the oldest closed segments; after the grace period exactly
    those are deleted, and a read from the new log start gets every record from there to
    the end. With the planted bug the first segment the new manifest still names is
    deleted with them: it is missing from storage and the read fails (an error, not a
    history anomaly: no reader returns wrong records, which is why the checker cannot be
    the judge here and the test looks at storage and the read)."""
    from txnlog.log_format.reader import PartitionReader

    from .run import MERGE_ARGS

    if planted:
        monkeypatch.setenv("TXNLOG_UNSAFE", "retention_deletes_kept_segment")  # the coordinator's
    root = (tmp_path / "root").as_uri()
    proc = CoordinatorProc(root, log_path=tmp_path / "c.log",
                           extra=[*MERGE_ARGS, "--retention-check-interval-ms", "200"])
    monkeypatch.delenv("TXNLOG_UNSAFE", raising=False)
    storage = Storage.for_url(root)
    try:
        proc.wait_healthy()
        proc.client().create_topic(TOPIC, 1, {"segment.bytes": 2048, "retention.bytes": 6144,
                                              "file.delete.delay.ms": 2000})
        a = producer(root, proc.endpoint, "A")  # type: ignore[arg-type]
        for i in range(80):
            a.begin_transaction()
            a.send(TOPIC, str(i).encode().ljust(60, b"."), key=b"k", partition=0)
            a.commit_transaction()

        def dropped_deleted() -> Any:
            man = read_latest_manifest(storage, TOPIC, 0)
            if man is None or man.log_start_offset == 0:
                return None
            first = man.objects[0].base_offset
            older = [o.name for o in storage.list(layout.merged_dir(TOPIC, 0, 0))
                     if int(o.name[:layout.OFFSET_DIGITS]) < first]
            return None if older else man
        deadline = time.monotonic() + 120
        while (man := dropped_deleted()) is None:
            assert time.monotonic() < deadline, "retention dropped nothing, or kept it"
            time.sleep(0.2)
        def missing_now() -> list[str]:
            return [p for o in man.objects for p in o.paths(TOPIC, 0) if not storage.exists(p)]

        missing = missing_now()
        # the kept segment goes in the same deletion pass as the dropped ones, one object
        # after another: under load the older ones can be seen gone before it is
        while planted and not missing and time.monotonic() < deadline:
            time.sleep(0.2)
            missing = missing_now()
        reader = PartitionReader(storage, TOPIC, 0)
        if planted:
            assert missing and set(missing) <= set(man.objects[0].paths(TOPIC, 0)), missing
            with pytest.raises(FileNotFoundError, match=man.objects[0].path(TOPIC, 0)):
                reader.read_table()
        else:
            assert missing == []
            got = reader.read_table()
            # from the log start: one transaction is a record and its marker
            assert 0 <= got.column("offset")[0].as_py() - man.log_start_offset <= 1
            values = [int(v.split(b".")[0]) for v in got.column("value").to_pylist()]
            assert values == list(range(80 - len(values), 80)) and len(values) < 80
    finally:
        proc.stop()


@pytest.mark.parametrize("planted", [False, True], ids=["safe", "gateway_fetch_ignores_lso"])
def test_gateway_fetch_ignores_lso_is_an_aborted_read(planted: bool, tmp_path: Path) -> None:
    """Kafka clients through the gateway: a librdkafka transactional producer's
    open transaction is in the log (HW > LSO); a librdkafka read_committed consumer polls;
    the transaction aborts. The gateway must serve read_committed up to the LSO only; with
    the planted bug it serves up to the HW and the consumer, which trusts the broker's
    bound as Kafka clients do, returns the open transaction's records: aborted-read. The
    history is recorded with kafka_workload's own poll format."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import Producer as CKProducer
    from confluent_kafka import TopicPartition as CKTopicPartition
    from gateway_proc import GatewayProc

    from .kafka_workload import _poll_record

    rec = Recorder(tmp_path)
    root, proc = coordinator(tmp_path)
    gw = GatewayProc(root, env={"TXNLOG_UNSAFE": "gateway_fetch_ignores_lso"} if planted
                     else {})
    try:
        gw.wait_listening(60)
        p = CKProducer({"bootstrap.servers": gw.bootstrap, "transactional.id": "K",
                        "linger.ms": 0})
        p.init_transactions(30)
        p.begin_transaction()
        for value, partition in ((1, 0), (2, 1)):
            rec.h.write("send", proc="K", txn="K:0", topic=TOPIC, partition=partition,
                        key="k", value=value)
            p.produce(TOPIC, str(value).encode(), key=b"k", partition=partition)
        assert p.flush(30) == 0  # written, not committed: HW > LSO
        proc.client().stable(publish=True)  # as any other transaction's completion would
        c = CKConsumer({"bootstrap.servers": gw.bootstrap, "group.id": "g",
                        "isolation.level": "read_committed", "enable.auto.commit": False})
        c.assign([CKTopicPartition(TOPIC, 0, 0), CKTopicPartition(TOPIC, 1, 0)])
        reads: dict[str, list[list[int]]] = {}
        t0 = time.time()
        deadline = time.monotonic() + 8  # the planted read comes at once; the safe one never
        while time.monotonic() < deadline and sum(map(len, reads.values())) < 2:
            for m in c.consume(10, 0.5):
                if m.error() is None:
                    reads.setdefault(f"{m.topic()}-{m.partition()}", []).append(
                        [m.offset(), int(m.value())])
        c.close()
        rec.h.write("poll", proc="kc", mode="poll", **_poll_record(reads, t0))
        p.abort_transaction(30)
        rec.h.write("abort", proc="K", txn="K:0", outcome="ok")
        rec.final(root)
    finally:
        gw.stop()
        proc.stop()
    rec.expect(planted, "aborted-read")


def test_the_harness_catches_a_gateway_bug(tmp_path: Path) -> None:
    """The chaos harness's gateway class (Kafka clients through a gateway killed and
    restarted) reports the planted gateway bug, from the Kafka consumers' reads."""
    from .run import PROFILES, run_all

    # Whether a short run meets it depends on a consumer polling while an aborting
    # transaction's records are in the log (the gateway's flush window sets when they are):
    # up to three seeds, as the other self-checks (seed 5 missed it once, seed 7 met it)
    missed = []
    for seed in HARNESS_SEEDS:
        (res,) = run_all(["gateway-kill"], ["file"], PROFILES["short"],
                         tmp_path / f"seed-{seed}", seed=seed,
                         unsafe="gateway_fetch_ignores_lso", log=print)
        assert res.error is None, res.error
        # seen by the Kafka consumers (c<N>-g<gen> librdkafka, c<N>-i<n> kafka-python)
        if "aborted-read" in res.anomalies and any(
                "-g" in ex["proc"] or "-i" in ex["proc"]
                for ex in res.examples["aborted-read"]):
            return
        missed.append(res)
    pytest.fail(f"no run of seeds {HARNESS_SEEDS} reported aborted-read: {missed}")
