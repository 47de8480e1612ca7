"""A gateway SIGKILLed between a flush window's shared-object put and its confirm.

The gateway dies at its fault point ``gateway_after_put`` (``TXNLOG_FAULTS``): the window's
object is on storage and its offsets reserved, nothing confirmed, no Produce answered. An
idempotent librdkafka producer retries the same batches (same sequences) against a new
gateway on the same port; the coordinator hands the retried batches their reserved offsets
again, the new gateway writes them into an object of its own and confirms that one. Every
record is then read exactly once, in order, and the dead gateway's object is never read.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from confluent_kafka import Producer as CKProducer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc, free_port_block
from txnlog.log_format.consumer import Consumer

PARTS = 4


def test_a_gateway_killed_between_put_and_confirm_loses_and_doubles_nothing(
        tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    with CoordinatorProc(root, log_path=tmp_path / "coord.log") as coord:
        coord.client().create_topic("t", PARTS)
        port = free_port_block()
        listen = ["--listen", f"127.0.0.1:{port}"]
        first = GatewayProc(root, extra=listen, env={"TXNLOG_FAULTS": "gateway_after_put:2"})
        second = None
        try:
            first.wait_listening(60)
            acked: list[tuple[int, int, str]] = []

            def report(err: object, msg: object) -> None:
                if err is None:
                    acked.append((msg.partition(), msg.offset(),  # type: ignore[attr-defined]
                                  msg.value().decode()))  # type: ignore[attr-defined]

            p = CKProducer({"bootstrap.servers": first.bootstrap, "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": 120_000,
                            "reconnect.backoff.max.ms": 500})
            for i in range(20):  # the first window: put and confirmed
                p.produce("t", f"v{i}".encode(), partition=i % PARTS, on_delivery=report)
            assert p.flush(60) == 0
            assert len(acked) == 20
            for i in range(20, 60):  # the second window's put is the gateway's last act
                p.produce("t", f"v{i}".encode(), partition=i % PARTS, on_delivery=report)
            p.poll(0)
            assert first.proc.wait(60) == -9, first.log_tail()
            assert "fault point gateway_after_put reached" in first.log_tail()
            assert len(acked) == 20  # nothing of the dead window was answered
            second = GatewayProc(root, extra=listen)
            second.wait_listening(60)
            assert p.flush(120) == 0
        finally:
            first.stop()
            if second is not None:
                second.stop()
    assert len(acked) == 60
    values = []
    with Consumer(root, "t", isolation_level="read_uncommitted") as c:
        for r in c:
            values.append((r.partition, r.offset, r.value.decode()))
    twice = [v for v, n in Counter(v for _, _, v in values).items() if n > 1]
    assert not twice, f"read twice: {twice}"
    assert sorted(v for _, _, v in values) == sorted(f"v{i}" for i in range(60))
    assert sorted(values) == sorted(acked)  # each at the offset its producer was told
    for part in range(PARTS):
        mine = [int(v[1:]) for p_, _, v in sorted(values) if p_ == part]
        assert mine == sorted(mine), f"partition {part} out of order: {mine}"
