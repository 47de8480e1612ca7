"""Workload processes: transactional producers and consumers that record a history.

Run as ``python -m chaos.workload producer|consumer ...`` (with ``tests/`` on PYTHONPATH);
the harness (run.py) starts several of each and injects faults around them. Every loop is
bounded by a count and a deadline. Values are unique integers (``worker * 10**7 + n``) so
the checker can tell every record apart; each transaction spans random partitions of two
topics, so torn transactions across partitions and topics are visible.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from txnlog.coordinator import errors as cerr
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format import layout
from txnlog.log_format.codec.batch_header import parse_header
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.manifest import MIN_GRACE_MS, read_latest_manifest
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.stable import read_latest_stable
from txnlog.log_format.storage import Storage

from .history import HistoryWriter, tp_key

TOPICS = {"chaos-a": 3, "chaos-b": 2}
# The coordinator said no: the transaction definitely did not commit.
DEFINITE = (cerr.ProducerFencedError, cerr.InvalidProducerEpochError, cerr.InvalidTxnStateError,
            cerr.OutOfOrderSequenceError, cerr.DuplicateSequenceError,
            cerr.InvalidProducerIdMappingError)


def partitions() -> list[tuple[str, int]]:
    return [(t, p) for t, n in TOPICS.items() for p in range(n)]


def discover(root: str, timeout: float = 30.0) -> str:
    """The registered coordinator's endpoint once it answers /healthz (never starts one)."""
    storage = Storage.for_url(root)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError, OSError):
            info = json.loads(storage.get(layout.COORDINATOR_FILE))
            endpoint = info["endpoint"]
            if CoordinatorClient(endpoint, timeout=2.0, retry_for=0.0).healthy():
                return endpoint
        time.sleep(0.1)
    raise TimeoutError(f"no healthy coordinator registered under {root} after {timeout}s")


def discover_client(root: str, args: argparse.Namespace) -> CoordinatorClient:
    return CoordinatorClient(discover(root), timeout=args.rpc_timeout, retry_for=args.rpc_retry)


# Errors no injected fault explains. The faults surface as OSError (connection refused or
# reset, timeouts), the coordinator's and the storage's own errors; a TypeError or an
# AttributeError is a bug in txnlog or in the workload. Recorded as an unknown outcome it
# would pass for a fault's, so the harness (run.py) fails the run on any: every ``error``
# the workloads record is ``err``'s text, and a worker dying of one leaves its traceback's
# last line in the worker's log.
BUG_TYPES = ("TypeError", "AttributeError", "NameError", "UnboundLocalError", "ImportError",
             "ModuleNotFoundError", "AssertionError", "NotImplementedError", "SyntaxError",
             "RecursionError")
BUG = re.compile(r"(?:^|\b)(?:{}): ".format("|".join(BUG_TYPES)), re.MULTILINE)


def classify(exc: BaseException) -> str:
    return "fail" if isinstance(exc, DEFINITE) else "unknown"


def err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def is_bug(error: object) -> bool:
    """True if a recorded error (``err``'s text, also inside a wrapped error's message, as
    Spark's PythonException carries a worker's) is one of ``BUG_TYPES``."""
    return isinstance(error, str) and BUG.search(error) is not None


# ================================================================== producer
def key_space() -> int:
    """Keys per partition: 4, or 64 on compacted topics (chaos run --compact), so a key's
    last committed value often stays the last while segments close and are compacted —
    where a cleaner that drops it is caught."""
    return 64 if os.environ.get("TXNLOG_CHAOS_COMPACT") == "1" else 4


class ProducerWorker:
    """One transactional id, one transaction at a time, re-initialized after any error."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = args.root
        self.worker = args.worker
        self.proc = f"w{args.worker}"
        self.tid = f"chaos-{args.run}-w{args.worker}"
        self.hist = HistoryWriter(Path(args.history) / f"{self.proc}.jsonl", self.proc)
        self.rng = random.Random(args.seed * 1000 + args.worker)
        self.counter = 0
        self.producer: TransactionalProducer | None = None
        self.hist_last_end: tuple[str, str] | None = None  # (commit|abort, outcome)

    def next_value(self) -> int:
        self.counter += 1
        return self.worker * 10**7 + self.counter

    def ensure_producer(self) -> TransactionalProducer:
        if self.producer is None:
            endpoint = discover(self.root)
            p = TransactionalProducer(self.root, self.tid, coordinator=endpoint,
                                      transaction_timeout_ms=self.args.txn_timeout_ms)
            p.client = CoordinatorClient(endpoint, timeout=self.args.rpc_timeout,
                                         retry_for=self.args.rpc_retry)
            t0 = time.time()
            try:
                p.init_transactions()
            except BaseException as exc:
                self.hist.write("info", what="init", outcome=classify(exc), error=err(exc),
                                t0=t0)
                raise
            if self.args.kill_after_put_p:
                self.arm_kill_after_put(p)
            self.producer = p
        return self.producer

    def arm_kill_after_put(self, producer: TransactionalProducer) -> None:
        """With probability ``--kill-after-put-p`` per flush, SIGKILL this process once the
        flush's shared object is put and before its confirm is sent (the writer-kill-mid-flush
        class): the object is on storage, named by no confirm, and must never be read."""
        writer = producer._writer
        write = writer.write

        def write_then_maybe_die(reservation: Any) -> Any:
            out = write(reservation)
            if self.rng.random() < self.args.kill_after_put_p:
                self.hist.write("info", what="killed-after-put",
                                objects=sorted({w.object for w in out if w.object}))
                self.hist.close()
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        writer.write = write_then_maybe_die  # type: ignore[method-assign]

    def drop_producer(self) -> None:
        self.producer = None  # the next init fences it and aborts what it left

    def run(self) -> None:
        deadline = time.monotonic() + self.args.duration
        n = 0
        while n < self.args.txns and time.monotonic() < deadline:
            if self.args.one_shot_p and self.rng.random() < self.args.one_shot_p:
                self.one_shot_txn(f"{self.proc}:{n}", n)
                n += 1
                continue
            try:
                producer = self.ensure_producer()
            except Exception:
                time.sleep(0.2)
                continue
            self.one_txn(producer, f"{self.proc}:{n}")
            n += 1
        self.hist.close()

    def one_shot_txn(self, txn: str, n: int) -> None:
        """One transaction under an id of its own declared one-shot (as a Spark batch write
        does), then its EndTxn retried once, 0 to 2 retention periods later.

        The coordinator drops the id a retention period after the transaction ended; a retry
        before that must get the same answer. ``retry`` ops let the checker catch an id
        dropped early (``early-drop``) or a retry answered otherwise (``retry-changed``).
        """
        tid = f"{self.tid}-1s{n}"
        try:
            endpoint = discover(self.root)
            client = CoordinatorClient(endpoint, timeout=self.args.rpc_timeout,
                                       retry_for=self.args.rpc_retry)
            client.init_producer_id(tid, self.args.txn_timeout_ms, one_shot=True)
            p = TransactionalProducer(self.root, tid, coordinator=endpoint,
                                      transaction_timeout_ms=self.args.txn_timeout_ms)
            p.client = client
            p.init_transactions()  # an InitProducerId again: the id stays one-shot
        except Exception as exc:
            self.hist.write("info", what="init-one-shot", outcome=classify(exc), error=err(exc))
            time.sleep(0.2)
            return
        pid, epoch = p.producer_id, p.epoch
        t0 = time.time()
        self.one_txn(p, txn)
        ops = self.hist_last_end
        if ops is None or ops[1] != "ok":
            return  # only an answered end pins when the transaction was decided
        commit = ops[0] == "commit"
        time.sleep(self.rng.uniform(0, 2 * self.args.one_shot_retention_ms / 1000))
        try:
            r = discover_client(self.root, self.args).end_txn(tid, pid, epoch, commit)
            answer = "same" if r.get("outcome") == ("commit" if commit else "abort") \
                else f"other: {r}"
        except cerr.InvalidProducerIdMappingError:
            answer = "unknown-id"
        except DEFINITE as exc:
            answer = f"other: {err(exc)}"
        except Exception as exc:
            answer = f"transient: {err(exc)}"
        self.hist.write("retry", txn=txn, tid=tid, end=ops[0], t0=t0, t1=time.time(),
                        answer=answer, retention_ms=self.args.one_shot_retention_ms)

    def arm_late_write(self, producer: TransactionalProducer, txn: str) -> None:
        """The next flush stops between its reserve and its put-if-absent (SIGSTOP).

        The harness resumes it only once its transaction was aborted, the offsets it
        reserved were fenced, merged below the merged end and deleted: its
        put-if-absent then lands in a freed name, which readers must never use. The
        reserved bases go to ``zombie-w<N>.json`` beside the history for the harness.
        """
        writer = producer._writer
        write = writer.write
        marker = Path(self.args.history) / f"zombie-{self.proc}.json"

        def late_write(reservation: Any) -> Any:
            del writer.write  # one flush only (back to the class's method)
            bases = [[t, p, b] for (t, p), b in reservation.bases.items()]
            marker.write_text(json.dumps({"txn": txn, "bases": bases}))
            self.hist.write("info", what="zombie-pause", txn=txn, late_write=bases)
            os.kill(os.getpid(), signal.SIGSTOP)  # the harness resumes us
            self.hist.write("info", what="zombie-resume", txn=txn)
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()
            try:
                out = write(reservation)
            except cerr.ProducerFencedError:
                self.hist.write("info", what="zombie-late-write", txn=txn, bases=bases,
                                landed=False)
                raise
            self.hist.write("info", what="zombie-late-write", txn=txn, bases=bases,
                            landed=True)
            return out

        writer.write = late_write  # type: ignore[method-assign]

    def one_txn(self, producer: TransactionalProducer, txn: str) -> None:
        rng = self.rng
        parts = rng.sample(partitions(), rng.randint(1, 4))
        abort = rng.random() < self.args.abort_p
        t0 = time.time()
        stage = "send"
        sent: list[tuple[int, Any]] = []
        try:
            producer.begin_transaction()
            half = max(1, len(parts) // 2)
            for i, (topic, p) in enumerate(parts):
                for _ in range(rng.randint(1, 3)):
                    value = self.next_value()
                    key = f"k{rng.randrange(key_space())}"
                    # recorded before it is sent: a SIGKILL must not leave unknown values
                    self.hist.write("send", txn=txn, topic=topic, partition=p, key=key,
                                    value=value, t0=time.time())
                    sent.append((value, producer.send(topic, str(value).encode(),
                                                      key=key.encode(), partition=p)))
                if i + 1 == half and (abort or rng.random() < 0.5):
                    zombie = bool(self.args.zombie_p) and rng.random() < self.args.zombie_p
                    late = zombie and rng.random() < self.args.late_write_p
                    if late:
                        self.arm_late_write(producer, txn)
                    producer.flush()  # data in the log before the outcome is decided
                    if zombie and not late:
                        self.hist.write("info", what="zombie-pause", txn=txn)
                        os.kill(os.getpid(), signal.SIGSTOP)  # the harness resumes us
                        self.hist.write("info", what="zombie-resume", txn=txn)
                    else:
                        # the flushed data sits above the LSO a while before its marker, as
                        # a transaction doing more work does: the time in which
                        # read_committed readers must stop short of it, else a read past
                        # the LSO is never given a chance
                        time.sleep(rng.uniform(0.2, 1.0))
            stage = "abort" if abort else "commit"
            self.hist_last_end = None
            if abort:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
            self.hist.write(stage, txn=txn, outcome="ok", t0=t0)
            self.hist_last_end = (stage, "ok")
            if not abort:  # where each value landed: a record deleted by retention before
                # any read saw it is still placed (checker: deleted, not lost)
                with contextlib.suppress(Exception):
                    at = [[v, tp_key(m.topic, m.partition), m.offset]
                          for v, f in sent if (m := f.result(timeout=0)) is not None]
                    self.hist.write("placed", txn=txn, at=at)
        except Exception as exc:
            self.hist_last_end = None
            outcome = classify(exc)
            if stage == "abort" and outcome == "fail":
                outcome = "unknown"  # a refused abort says nothing about the data
            self.hist.write("commit" if stage == "send" else stage, txn=txn,
                            outcome=outcome, error=err(exc), t0=t0, stage=stage)
            if not isinstance(exc, cerr.ProducerFencedError) and stage != "abort":
                # Kafka's advice after a non-fatal error: abort, then go on
                t1 = time.time()
                try:
                    producer.abort_transaction()
                    self.hist.write("abort", txn=txn, outcome="ok", t0=t1)
                except Exception as exc2:
                    self.hist.write("abort", txn=txn, outcome="unknown", error=err(exc2), t0=t1)
            self.drop_producer()


# ================================================================== consumer
# run.py writes this into the history folder once every writer (producers, Spark jobs, the
# gateway's clients) is done, in long runs (Profile.stop_readers_when_done): consumers end
# after one more round, so a run whose writers finish early does not idle to its duration.
STOP_FILE = "workload.stop"


def poll_op(c: Consumer, max_records: int) -> dict[str, Any]:
    """One poll of an incremental consumer, with what it covered and the snapshot it used."""
    before = {tp: c.position(tp) for tp in c.assignment()}
    begin = log_starts(c)
    t0 = time.time()
    try:
        out = c.poll_arrow(0.0, max_records)
        outcome, error = "ok", None
    except Exception as exc:
        out, outcome, error = {}, "fail", err(exc)
    return {**_read_op(c, before, out, t0, outcome, error), "log_start_begin": begin}


def log_starts(c: Consumer) -> dict[str, int]:
    """Each assigned partition's log start offset now (a listing of its own)."""
    return {tp_key(tp.topic, tp.partition): c._readers[tp].earliest_offset()
            for tp in c.assignment()}


def _read_op(c: Consumer, before: dict[Any, int], out: dict[Any, list[Any]], t0: float,
             outcome: str, error: str | None) -> dict[str, Any]:
    snap = c._snapshot
    reads: dict[str, list[list[int]]] = {}
    for tp, batches in out.items():
        rows = reads.setdefault(tp_key(tp.topic, tp.partition), [])
        for b in batches:
            rows.extend([o, int(v)] for o, v in zip(b.column("offset").to_pylist(),
                                                    b.column("value").to_pylist(),
                                                    strict=True))
    return {"isolation": c.isolation_level, "t0": t0, "outcome": outcome, "error": error,
            "snapshot": list(snap.key) if snap else None,
            "bounds": {tp_key(tp.topic, tp.partition): list(snap.offsets(tp.topic, tp.partition))
                       for tp in c.assignment()} if snap else {},
            "ranges": {tp_key(tp.topic, tp.partition): [before[tp], c.position(tp)]
                       for tp in c.assignment()},
            # the log start offset of the listing the read used (retention)
            "log_start": {tp_key(tp.topic, tp.partition): c._readers[tp]._log_start()
                          for tp in c.assignment()},
            "reads": reads}


def scan_op(root: str, isolation: str, producers: bool = False) -> dict[str, Any]:
    """Every partition from its start up to one snapshot's bound (a fresh consumer)."""
    t0 = time.time()
    c = Consumer(root, list(TOPICS), isolation_level=isolation)  # type: ignore[arg-type]
    before = {tp: c.position(tp) for tp in c.assignment()}
    begin = log_starts(c)
    out: dict[Any, list[Any]] = {}
    for tp, batch in c.iter_batches():
        out.setdefault(tp, []).append(batch)
    op = {**_read_op(c, before, out, t0, "ok", None), "log_start_begin": begin}
    if producers:
        op["producers"] = batch_producers(c, op["ranges"])
    return op


def batch_producers(c: Consumer, ranges: dict[str, list[int]]) -> dict[str, list[list[int]]]:
    """{"t-p": [[base offset, last offset, producer id], ...]} of the data batches stored in
    each range a scan covered, from the stored batch headers: which producer (a Kafka
    client, a Spark task attempt's member) wrote each record, for the checker to tell an
    excluded attempt's aborted copy from one producer writing a value twice."""
    got: dict[str, list[list[int]]] = {}
    for tp in c.assignment():
        key = tp_key(tp.topic, tp.partition)
        start, end = ranges.get(key, (0, 0))
        rows = got.setdefault(key, [])
        reader = c._readers[tp]
        while start < end:
            raw = reader.read_raw(start, 16 << 20, end)
            if not raw.data:
                break
            pos = 0
            while pos < len(raw.data):
                h = parse_header(raw.data, pos)
                if not h.is_control:
                    rows.append([h.base_offset, h.last_offset, h.producer_id])
                pos += h.size
            start = raw.next_offset
    return got


class _CountingStorage:
    """A storage whose reads count the objects found gone (merged away and deleted)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.gone = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def get(self, *args: Any, **kw: Any) -> Any:
        try:
            return self._storage.get(*args, **kw)
        except FileNotFoundError:
            self.gone += 1
            raise

    def get_view(self, *args: Any, **kw: Any) -> Any:
        try:
            return self._storage.get_view(*args, **kw)
        except FileNotFoundError:
            self.gone += 1
            raise


def held_scan_op(root: str, hold_s: float) -> dict[str, Any] | None:
    """A slow tailing reader: it gets every partition's manifest, and its LIST of the small
    objects from each merged end comes ``hold_s`` later (a pause between its requests, less
    than half the grace period ``file.delete.delay.ms``, as the reader's contract allows);
    then it reads each partition from that merged end up to one snapshot's LSO. Objects the
    merger deleted under it make it list again (``gone`` counts them); what was merged in
    the pause must still be there (the grace period), else the listing has holes, or a
    zombie's late write in a freed name. An incremental read of its own (mode ``poll``)."""
    from txnlog.log_format import reader as reader_mod

    base = Storage.for_url(root)
    storage = _CountingStorage(base)
    t0 = time.time()
    snap = read_latest_stable(base)
    if snap is None:
        return None
    got = time.monotonic()
    held = {tp: read_latest_manifest(base, tp[0], tp[1]) for tp in partitions()}  # the GETs
    time.sleep(hold_s)
    replay = dict(held)

    def manifest(st: Storage, topic: str, p: int) -> Any:
        if (topic, p) in replay:
            man = replay.pop((topic, p))
            # the one got before the pause, as long as the reader's contract allows: it
            # reads small objects for half the grace period after it listed, so its LIST
            # may come at most the other half after its GET (a late wake-up: a fresh one)
            grace_s = (man.grace_ms if man is not None else MIN_GRACE_MS) / 1000
            if time.monotonic() - got <= grace_s / 2:
                return man
        return read_latest_manifest(st, topic, p)

    reads: dict[str, list[list[int]]] = {}
    ranges: dict[str, list[int]] = {}
    reader_mod.read_latest_manifest = manifest  # type: ignore[assignment]
    try:
        for (topic, p), man in held.items():
            r = PartitionReader(storage, topic, p, snapshot=snap)  # type: ignore[arg-type]
            start = man.end_offset if man is not None else 0
            end = max(start, r.latest_offset())
            rows = reads.setdefault(tp_key(topic, p), [])
            for chunk in r.read(start, end):
                b = chunk.batch
                rows.extend([o, int(v)] for o, v in zip(b.column("offset").to_pylist(),
                                                        b.column("value").to_pylist(),
                                                        strict=True))
            ranges[tp_key(topic, p)] = [start, end]
    finally:
        reader_mod.read_latest_manifest = read_latest_manifest
    return {"isolation": "read_committed", "t0": t0, "outcome": "ok", "error": None,
            "snapshot": list(snap.key),
            "bounds": {tp_key(t, p): list(snap.offsets(t, p)) for t, p in partitions()},
            "ranges": ranges, "reads": reads, "hold_s": hold_s, "gone": storage.gone}


def run_consumer(args: argparse.Namespace) -> None:
    proc = f"c{args.worker}"
    hist = HistoryWriter(Path(args.history) / f"{proc}.jsonl", proc)
    deadline = time.monotonic() + args.duration
    stop = Path(args.history) / STOP_FILE
    consumers: dict[str, Consumer] = {}
    rng = random.Random(args.worker)
    n = 0
    try:
        while n < args.polls and time.monotonic() < deadline:
            last = stop.exists()  # the writers are done: one more round, begun after that
            n += 1
            for iso in ("read_committed", "read_uncommitted"):
                name = f"{proc}-{iso[5:]}"
                try:
                    if name not in consumers:
                        consumers[name] = Consumer(args.root, list(TOPICS),
                                                   isolation_level=iso)  # type: ignore[arg-type]
                    op = poll_op(consumers[name], args.max_records)
                    hist.write("poll", proc=name, mode="poll", **op)
                except Exception as exc:
                    hist.write("poll", proc=name, mode="poll", outcome="fail", error=err(exc))
            if args.held_every and n % args.held_every == 0:
                try:
                    name = f"{proc}-held{n}"  # one read each: its range starts anywhere
                    op = held_scan_op(args.root, rng.uniform(0.3, 0.9))
                    if op is not None:
                        hist.write("poll", proc=name, mode="poll", **op)
                except Exception as exc:
                    hist.write("poll", proc=f"{proc}-held{n}", mode="poll", outcome="fail",
                               error=err(exc))
            if n % args.scan_every == 0:
                try:
                    hist.write("poll", proc=f"{proc}-scan", mode="scan",
                               **scan_op(args.root, "read_committed"))
                except Exception as exc:
                    hist.write("poll", proc=f"{proc}-scan", mode="scan", outcome="fail",
                               error=err(exc))
            if last:
                break
            time.sleep(args.interval)
    finally:
        hist.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="chaos.workload")
    ap.add_argument("role", choices=["producer", "consumer"])
    ap.add_argument("--root", required=True)
    ap.add_argument("--history", required=True, help="directory for <proc>.jsonl")
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--run", default="run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--txns", type=int, default=100)
    ap.add_argument("--abort-p", type=float, default=0.15)
    ap.add_argument("--zombie-p", type=float, default=0.0)
    ap.add_argument("--late-write-p", type=float, default=0.5,
                    help="share of zombies that stop between reserve and put-if-absent")
    ap.add_argument("--kill-after-put-p", type=float, default=0.0,
                    help="per flush: SIGKILL the producer between its put and its confirm")
    ap.add_argument("--txn-timeout-ms", type=int, default=3000)
    ap.add_argument("--rpc-timeout", type=float, default=10.0)
    ap.add_argument("--rpc-retry", type=float, default=2.0)
    ap.add_argument("--one-shot-p", type=float, default=0.0,
                    help="share of transactions under a one-shot id of their own")
    ap.add_argument("--one-shot-retention-ms", type=int, default=1500,
                    help="the coordinators' --one-shot-id-retention-ms (for the checker)")
    ap.add_argument("--polls", type=int, default=10_000)
    ap.add_argument("--max-records", type=int, default=40)
    ap.add_argument("--scan-every", type=int, default=10)
    ap.add_argument("--held-every", type=int, default=7,
                    help="every N polls, a slow reader holding its listing (0: never)")
    ap.add_argument("--interval", type=float, default=0.05)
    args = ap.parse_args(argv)
    if args.role == "producer":
        ProducerWorker(args).run()
    else:
        run_consumer(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
