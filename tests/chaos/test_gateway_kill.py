"""Kafka clients through the gateway while the gateway and the coordinator are killed.

librdkafka's transactional consume-transform-produce loop (``send_offsets_to_transaction``)
and an idempotent producer run against a gateway that is SIGKILLed and restarted on the
same port every few seconds, and a coordinator SIGKILLed and restarted (a new endpoint,
which the gateway follows through ``_coordinator.json``). Afterwards, with txnlog's own
reader: every input record's output exactly once under read_committed (nothing lost,
nothing twice), the group's offsets at the end of the input, and every record the
idempotent producer had acknowledged present exactly once (and no record twice).

Not the chaos harness's checker (``tests/chaos/run.py``): a self-contained run with its own
exactly-once checks, slow (``-m slow``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc, free_port_block
from txnlog import TransactionalProducer
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.layout import TopicPartition

pytestmark = pytest.mark.slow
N_IN = int(os.environ.get("GATEWAY_CHAOS_INPUT", "600"))
N_IDEM = int(os.environ.get("GATEWAY_CHAOS_IDEMPOTENT", "1500"))
DURATION_S = float(os.environ.get("GATEWAY_CHAOS_SECONDS", "240"))


class Ctp:
    """The consume-transform-produce loop, rebuilt after any fatal error."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.committed_txns = 0
        self.aborted_txns = 0
        self.restarts = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def _make(self) -> tuple[CKConsumer, CKProducer]:
        c = CKConsumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-ctp",
                        "isolation.level": "read_committed", "enable.auto.commit": False,
                        "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                        "heartbeat.interval.ms": 1000})
        p = CKProducer({"bootstrap.servers": self.bootstrap, "transactional.id": "chaos-ctp",
                        "linger.ms": 5, "transaction.timeout.ms": 30000})
        p.init_transactions(60)
        c.subscribe(["in"])
        return c, p

    def run(self) -> None:
        c = p = None
        try:
            while not self.stop.is_set():
                try:
                    if c is None or p is None:
                        c, p = self._make()
                    msgs = [m for m in c.consume(50, 1.0) if m.error() is None]
                    if not msgs:
                        continue
                    p.begin_transaction()
                    try:
                        for m in msgs:
                            p.produce("out", value=b"out-" + m.value(), key=m.key())
                        p.send_offsets_to_transaction(c.position(c.assignment()),
                                                      c.consumer_group_metadata(), 60)
                        p.commit_transaction(60)
                        self.committed_txns += 1
                    except KafkaException as exc:
                        err: KafkaError = exc.args[0]
                        if err.txn_requires_abort():
                            p.abort_transaction(60)
                            self.aborted_txns += 1
                            self._rewind(c)
                        else:
                            raise
                except KafkaException:
                    # fatal or retriable outside a transaction: a new instance fences the old
                    self.restarts += 1
                    if c is not None:
                        with contextlib.suppress(Exception):
                            c.close()
                    c = p = None
                    time.sleep(0.5)
        except BaseException as exc:
            self.error = exc
        finally:
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()

    @staticmethod
    def _rewind(c: CKConsumer) -> None:
        for tp in c.committed(c.assignment(), 60):
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            c.seek(tp)


def test_kafka_clients_survive_gateway_and_coordinator_kills(tmp_path: Path) -> None:
    root = f"file://{tmp_path / 'root'}"
    coord = CoordinatorProc(root)
    coord.wait_healthy()
    port = free_port_block()
    listen = ["--listen", f"127.0.0.1:{port}"]
    gw = GatewayProc(root, extra=listen)
    gw.wait_listening()
    bootstrap = f"127.0.0.1:{port}"
    kills = Counter()
    try:
        client = coord.client()
        client.create_topic("in", 2)
        client.create_topic("out", 2)
        client.create_topic("idem", 2)
        with TransactionalProducer(root, "feeder", coordinator=coord.endpoint) as feed:
            feed.init_transactions()
            feed.begin_transaction()
            for i in range(N_IN):
                feed.send("in", f"in{i}".encode(), key=f"k{i}".encode())
            feed.commit_transaction()

        ctp = Ctp(bootstrap)
        t_ctp = threading.Thread(target=ctp.run, daemon=True)
        acked: list[bytes] = []
        failed: list[str] = []

        def idempotent() -> None:
            p = CKProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": 120000})

            def report(err: object, msg: object) -> None:
                if err is None:
                    acked.append(msg.value())  # type: ignore[attr-defined]
                else:
                    failed.append(str(err))

            for i in range(N_IDEM):
                p.produce("idem", f"i{i}".encode(), key=f"k{i % 11}".encode(),
                          on_delivery=report)
                p.poll(0)
                time.sleep(DURATION_S / N_IDEM / 2)
            p.flush(180)

        t_idem = threading.Thread(target=idempotent, daemon=True)
        t_ctp.start()
        t_idem.start()
        deadline = time.monotonic() + DURATION_S
        n = 0
        while time.monotonic() < deadline:
            time.sleep(3.0)
            n += 1
            gw.kill()
            kills["gateway"] += 1
            if n % 3 == 0:
                coord.kill()
                kills["coordinator"] += 1
                coord = CoordinatorProc(root)
                coord.wait_healthy()
            gw = GatewayProc(root, extra=listen)
            gw.wait_listening()
            committed = coord.client().committed_offsets("chaos-ctp")
            if sum(committed.values()) >= N_IN + 2 and not t_idem.is_alive():
                break  # everything consumed (N_IN records + one marker per partition)
        # quiet period: let both finish without faults
        t_idem.join(240)
        end = time.monotonic() + 180
        while time.monotonic() < end:
            committed = coord.client().committed_offsets("chaos-ctp")
            with Consumer(root, "in") as c:
                ends = c.end_offsets()
            if committed == {TopicPartition("in", p): ends[TopicPartition("in", p)]
                             for p in range(2)}:
                break
            time.sleep(1.0)
        ctp.stop.set()
        t_ctp.join(120)
        assert ctp.error is None, repr(ctp.error)
        print(f"kills {dict(kills)}; ctp committed {ctp.committed_txns} aborted "
              f"{ctp.aborted_txns} restarts {ctp.restarts}; idempotent acked {len(acked)} "
              f"failed {len(failed)}")

        with Consumer(root, "out") as c:
            out = Counter(r.value.decode() for r in c)
        missing = [i for i in range(N_IN) if out[f"out-in{i}"] == 0]
        twice = {v: k for v, k in out.items() if k > 1}
        assert not missing and not twice, (missing[:20], list(twice.items())[:20])
        assert sum(out.values()) == N_IN
        with Consumer(root, "idem") as c:
            idem = Counter(r.value for r in c)
        assert not {v: k for v, k in idem.items() if k > 1}  # no record twice
        assert all(idem[v] == 1 for v in acked)  # every acknowledged record, once
        assert kills["gateway"] >= 3 and kills["coordinator"] >= 1
    finally:
        gw.stop()
        coord.stop()
