"""The checker catches planted bugs: one safety mechanism off at a time (TXNLOG_UNSAFE).

Each case runs a small deterministic scenario against a real coordinator process twice:
with the mechanism on (the history must be valid) and off (the checker must report the
matching anomaly). The scenarios record their history with the harness's own helpers, so
this also tests the recording path.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from coordinator_proc import CoordinatorProc
from txnlog.coordinator import errors as cerr
from txnlog.coordinator.client import CoordinatorClient
from txnlog.coordinator.producer import TransactionalProducer
from txnlog.log_format import layout
from txnlog.log_format.arrow_codec import encode_arrow
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.storage import Storage

from . import workload
from .checker import check
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
    found = rec.check()
    if planted:
        assert {"read-past-lso", "aborted-read"} <= set(found), found
    else:
        assert found == {}


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
    found = rec.check()
    if planted:
        assert "lost-write" in found, found
    else:
        assert found == {}


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
    found = rec.check()
    if planted:
        assert "aborted-read" in found, found
    else:
        assert found == {}


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
    found = rec.check()
    if planted:
        assert "inconsistent-offset" in found, found
    else:
        assert found == {}


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
    found = rec.check()
    if planted:
        assert "early-drop" in found, found
    else:
        assert found == {}
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
    found = rec.check()
    if planted:
        assert "torn-transaction" in found, found
    else:
        assert found == {}
