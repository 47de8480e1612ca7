"""Kafka clients as chaos workload processes, through a `txnlog gateway`.

Run as ``python -m chaos.kafka_workload producer|consumer|kp-consumer --bootstrap HOST:PORT
...`` (with ``tests/`` on PYTHONPATH); the harness (run.py, fault classes ``gateway-kill``
and ``gateway-coordinator-kill``) starts them beside its own consumers while it SIGKILLs
and restarts the gateway (same port) and the coordinator (a new endpoint the gateway
follows through ``_coordinator.json``). The history is written in workload.py's format, so
the harness's checker judges Kafka clients exactly as it judges txnlog's own:

- ``producer``: librdkafka (confluent-kafka) transactional producer, ``transactional.id``
  ``chaos-<run>-w<N>`` (what the harness's final wait looks up), one transaction at a
  time over random partitions of both chaos topics, integer values ``N * 10**7 + n``; some
  transactions aborted on purpose. Every send is recorded before ``produce``; a commit
  librdkafka returned from is ``ok``; an abort it returned from is ``ok`` (the coordinator
  never answers an abort of a decided commit with success); anything else is ``unknown``
  (the final read decides: all or nothing). After an error that is not abortable the
  producer is dropped and a new instance initialized (fencing the old one, as Kafka's docs
  advise). Delivery reports give each committed record's offset (``placed``).
- ``consumer``: librdkafka consumer in a consumer group, ``isolation.level=read_committed``,
  auto-committing its offsets. Each ``consume()`` is a ``poll`` op with the records it
  returned; a rebalance (a restarted coordinator forgets the group, a killed gateway drops
  the connection) starts a new ``proc`` name, since the consumer legitimately rewinds to
  the committed offsets then. Checked: no aborted record, no value at two offsets or two
  values at one offset (also against txnlog's own readers), offsets increasing per
  partition within one assignment, no value no producer sent.
- ``kp-consumer``: kafka-python (an independent implementation of the protocol), every
  partition assigned by hand from the start, read_committed; the same checks.

Neither consumer gives snapshot bounds or covered ranges (a Kafka client does not know one
stable snapshot for all partitions), so torn-transaction and LSO-bound checks come from the
harness's own consumers and the final read, which run beside them on the same records.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from .acls import SASL_PASSWORD_ENV, SASL_USER_ENV
from .history import HistoryWriter, tp_key
from .workload import TOPICS, err, key_space, partitions


def sasl_conf() -> dict[str, str]:
    """librdkafka's SASL settings where the harness gave this process a SCRAM user
    (``--acls``, chaos/acls.py), from the environment; empty otherwise."""
    user = os.environ.get(SASL_USER_ENV)
    if not user:
        return {}
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": os.environ.get(SASL_PASSWORD_ENV, "")}


def kp_sasl() -> dict[str, str]:
    """The same for kafka-python."""
    user = os.environ.get(SASL_USER_ENV)
    if not user:
        return {}
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": user,
            "sasl_plain_password": os.environ.get(SASL_PASSWORD_ENV, "")}


def kafka_error(exc: BaseException) -> Any:
    """The librdkafka error an exception carries: a KafkaException's, or the KafkaError
    itself (``flush`` raises a fatal error bare); None for anything else."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _serve(call: Any, *args: Any) -> Any:
    """``Producer.flush``/``poll``, whose fatal errors come as a bare ``KafkaError`` (not
    an exception class, so no ``except`` clause but a bare one matches it): re-raised as
    the ``KafkaException`` every other call raises."""
    from confluent_kafka import KafkaException

    try:
        return call(*args)
    except Exception:
        raise
    except:  # noqa: E722
        raise KafkaException(sys.exc_info()[1]) from None


# ================================================================== producer
class KafkaProducerWorker:
    """One transactional id through the gateway, one transaction at a time."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.worker = args.worker
        self.proc = f"w{args.worker}"
        self.tid = f"chaos-{args.run}-w{args.worker}"
        self.hist = HistoryWriter(Path(args.history) / f"{self.proc}.jsonl", self.proc)
        self.rng = random.Random(args.seed * 1000 + 700 + args.worker)
        self.counter = 0
        self.producer: Any = None
        self.delivered: dict[int, tuple[str, int]] = {}  # value -> (tp, offset)
        self.failed: dict[int, str] = {}  # value -> delivery error

    def next_value(self) -> int:
        self.counter += 1
        return self.worker * 10**7 + self.counter

    def ensure_producer(self) -> Any:
        from confluent_kafka import Producer

        if self.producer is None:
            p = Producer({"bootstrap.servers": self.args.bootstrap,
                          "transactional.id": self.tid, "linger.ms": 5,
                          "transaction.timeout.ms": self.args.txn_timeout_ms,
                          "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000,
                          "retry.backoff.ms": 100, **sasl_conf()})
            t0 = time.time()
            try:
                p.init_transactions(self.args.api_timeout)
            except Exception as exc:
                self.hist.write("info", what="init", outcome="unknown", error=err(exc), t0=t0)
                raise
            self.producer = p
        return self.producer

    def drop_producer(self) -> None:
        """A new instance's init_transactions fences this one and aborts what it left."""
        if self.producer is not None:
            with contextlib.suppress(Exception):
                self.producer.purge()
            self.producer = None

    def on_delivery(self, error: Any, msg: Any) -> None:
        value = int(msg.value())
        if error is None:
            self.delivered[value] = (tp_key(msg.topic(), msg.partition()), msg.offset())
        else:
            self.failed[value] = str(error)

    def run(self) -> None:
        deadline = time.monotonic() + self.args.duration
        n = 0
        try:
            while n < self.args.txns and time.monotonic() < deadline:
                try:
                    producer = self.ensure_producer()
                except Exception:
                    self.drop_producer()
                    time.sleep(0.3)
                    continue
                self.one_txn(producer, f"{self.proc}:{n}")
                n += 1
        finally:
            self.hist.write("info", what="producer-done", txns=n)
            self.hist.close()

    def _end(self, producer: Any, commit: bool) -> None:
        """commit_transaction / abort_transaction, retried while librdkafka says the error
        is retriable (it then keeps the same EndTxn: safe to ask again)."""
        for attempt in range(self.args.end_attempts):
            try:
                if commit:
                    producer.commit_transaction(self.args.api_timeout)
                else:
                    producer.abort_transaction(self.args.api_timeout)
                return
            except Exception as exc:
                e = kafka_error(exc)
                if e is None or not e.retriable() or e.txn_requires_abort() or e.fatal() or \
                        attempt + 1 == self.args.end_attempts:
                    raise
                time.sleep(0.2)

    def one_txn(self, producer: Any, txn: str) -> None:
        rng = self.rng
        parts = rng.sample(partitions(), rng.randint(1, 4))
        abort = rng.random() < self.args.abort_p
        t0 = time.time()
        stage = "send"
        values: list[int] = []
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
                    values.append(value)
                    producer.produce(topic, str(value).encode(), key=key.encode(),
                                     partition=p, on_delivery=self.on_delivery)
                    _serve(producer.poll, 0)
                if i + 1 == half and (abort or rng.random() < 0.5):
                    _serve(producer.flush, self.args.api_timeout)  # data in the log before the end
                    if abort:
                        # aborted data sits in the log a while before its marker, as a
                        # transaction that fails late does: the time in which read_committed
                        # readers must skip it, else a read of it is never given a chance
                        hold_until = time.monotonic() + rng.uniform(0.2, 1.0)
                        while time.monotonic() < hold_until:
                            _serve(producer.poll, 0.05)
            stage = "abort" if abort else "commit"
            self._end(producer, commit=not abort)
            self.hist.write(stage, txn=txn, outcome="ok", t0=t0)
            if not abort:
                at = [[v, *self.delivered[v]] for v in values if v in self.delivered]
                self.hist.write("placed", txn=txn, at=at)
        except Exception as exc:  # librdkafka's errors, BufferError
            e = kafka_error(exc)
            abortable = e is not None and e.txn_requires_abort() and not e.fatal()
            # Nothing librdkafka raises here proves the transaction did not commit (a
            # commit may have been decided before its answer was lost): unknown, unless an
            # abort is answered afterwards, which the coordinator only gives to an
            # undecided or aborted transaction.
            self.hist.write("commit" if stage == "send" else stage, txn=txn,
                            outcome="unknown", error=err(exc), t0=t0, stage=stage,
                            abortable=abortable)
            if abortable or stage == "send":
                t1 = time.time()
                try:
                    self._end(producer, commit=False)
                    self.hist.write("abort", txn=txn, outcome="ok", t0=t1)
                    return
                except Exception as exc2:
                    self.hist.write("abort", txn=txn, outcome="unknown", error=err(exc2),
                                    t0=t1)
            self.drop_producer()
        finally:
            for v in values:
                self.delivered.pop(v, None)
                self.failed.pop(v, None)


# ================================================================== consumers
def _poll_record(reads: dict[str, list[list[int]]], t0: float, outcome: str = "ok",
                 error: str | None = None) -> dict[str, Any]:
    """A poll op in workload.py's format, without snapshot bounds or covered ranges."""
    return {"isolation": "read_committed", "t0": t0, "outcome": outcome, "error": error,
            "snapshot": None, "bounds": {}, "ranges": None, "reads": reads}


def _int_value(raw: bytes | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def run_ck_consumer(args: argparse.Namespace) -> None:
    """librdkafka group consumer, read_committed; a new proc name per assignment."""
    from confluent_kafka import Consumer

    base = f"c{args.worker}"
    hist = HistoryWriter(Path(args.history) / f"{base}.jsonl", base)
    gen = [0]

    def rebalanced(_c: Any, _parts: Any) -> None:
        gen[0] += 1
        hist.write("info", what="rebalance", generation=gen[0])

    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"chaos-{args.run}-kc",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "auto.commit.interval.ms": 500,
                  "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                  "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000,
                  **sasl_conf()})
    c.subscribe(list(TOPICS), on_assign=rebalanced, on_revoke=rebalanced,
                on_lost=rebalanced)
    deadline = time.monotonic() + args.duration
    try:
        while time.monotonic() < deadline:
            t0 = time.time()
            before = gen[0]
            try:
                msgs = c.consume(200, 0.5)
            except Exception as exc:
                hist.write("poll", proc=f"{base}-g{gen[0]}", mode="poll",
                           **_poll_record({}, t0, "fail", err(exc)))
                continue
            reads: dict[str, list[list[int]]] = {}
            for m in msgs:
                if m.error() is not None:
                    continue
                v = _int_value(m.value())
                if v is None:
                    continue
                reads.setdefault(tp_key(m.topic(), m.partition()), []).append([m.offset(), v])
            if reads:
                # a consume() that crossed a rebalance is a proc of its own
                proc = f"{base}-g{gen[0]}" if gen[0] == before else f"{base}-g{gen[0]}x"
                hist.write("poll", proc=proc, mode="poll", **_poll_record(reads, t0))
    finally:
        with contextlib.suppress(Exception):
            c.close()
        hist.close()


def run_kp_consumer(args: argparse.Namespace) -> None:
    """kafka-python, every partition assigned by hand from offset 0, read_committed; made
    again (a new proc name) after any error."""
    from kafka import KafkaConsumer, TopicPartition

    base = f"c{args.worker}"
    hist = HistoryWriter(Path(args.history) / f"{base}.jsonl", base)
    deadline = time.monotonic() + args.duration
    instance = 0
    positions: dict[tuple[str, int], int] = {}  # where the next instance goes on
    try:
        while time.monotonic() < deadline:
            instance += 1
            proc = f"{base}-i{instance}"
            consumer = None
            try:
                consumer = KafkaConsumer(bootstrap_servers=args.bootstrap,
                                         isolation_level="read_committed",
                                         enable_auto_commit=False, group_id=None,
                                         request_timeout_ms=15000,
                                         reconnect_backoff_max_ms=1000, **kp_sasl())
                tps = [TopicPartition(t, p) for t, p in partitions()]
                consumer.assign(tps)
                for tp in tps:
                    consumer.seek(tp, positions.get((tp.topic, tp.partition), 0))
                while time.monotonic() < deadline:
                    t0 = time.time()
                    got = consumer.poll(timeout_ms=500, max_records=200)
                    reads: dict[str, list[list[int]]] = {}
                    for tp, recs in got.items():
                        for r in recs:
                            v = _int_value(r.value)
                            if v is not None:
                                reads.setdefault(tp_key(tp.topic, tp.partition), []).append(
                                    [r.offset, v])
                            positions[(tp.topic, tp.partition)] = r.offset + 1
                    if reads:
                        hist.write("poll", proc=proc, mode="poll", **_poll_record(reads, t0))
            except Exception as exc:
                hist.write("poll", proc=proc, mode="poll",
                           **_poll_record({}, time.time(), "fail", err(exc)))
                time.sleep(0.5)
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        consumer.close()
    finally:
        hist.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="chaos.kafka_workload")
    ap.add_argument("role", choices=["producer", "consumer", "kp-consumer"])
    ap.add_argument("--bootstrap", required=True, help="the gateway, HOST:PORT")
    ap.add_argument("--history", required=True, help="directory for <proc>.jsonl")
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--run", default="run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--txns", type=int, default=100)
    ap.add_argument("--abort-p", type=float, default=0.15)
    ap.add_argument("--txn-timeout-ms", type=int, default=10000)
    ap.add_argument("--api-timeout", type=float, default=30.0,
                    help="seconds for init/commit/abort/flush")
    ap.add_argument("--end-attempts", type=int, default=3,
                    help="commit/abort attempts while librdkafka calls the error retriable")
    args = ap.parse_args(argv)
    if args.role == "producer":
        KafkaProducerWorker(args).run()
    elif args.role == "consumer":
        run_ck_consumer(args)
    else:
        run_kp_consumer(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
