"""A Kafka client's transactions through ``txnlog gateway``.

librdkafka's transactional producer runs a consume-transform-produce loop with
``send_offsets_to_transaction`` against real coordinator and gateway processes: its output
is read exactly once with read_committed (aborted transactions invisible, visible with
read_uncommitted), the group's offsets commit with the transactions, and a second instance
of the same transactional id fences the first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc, coordinator_and_gateway
from txnlog import TransactionalProducer
from txnlog.coordinator.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from txnlog.coordinator.state.coordinator_state import CoordinatorState
from txnlog.coordinator.state.txn_log import recover
from txnlog.log_format.consumer import Consumer
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.storage import Storage

N = 120


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, CoordinatorProc,
                                                                   GatewayProc]]:
    root = "file://" + str(tmp_path_factory.mktemp("gw-txn"))
    with coordinator_and_gateway(root) as (coord, gateway):
        client = coord.client()
        client.create_topic("ctp-in", 2)
        client.create_topic("ctp-out", 2)
        with TransactionalProducer(root, "feeder", coordinator=coord.endpoint) as p:
            p.init_transactions()
            p.begin_transaction()
            for i in range(N):
                p.send("ctp-in", f"in{i}".encode(), key=f"k{i}".encode())
            p.commit_transaction()
        gateway.wait_listening()
        yield root, coord, gateway


def _kafka_client(client: Any, tid: str, timeout_ms: int
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """InitProducerId as a gateway asks it for a Kafka client: the answer, and the
    (transactional id, producer id, epoch) body its later requests carry."""
    r = client.call("kafka_init_producer_id", {"transactional_id": tid,
                                               "transaction_timeout_ms": timeout_ms,
                                               "producer_id": -1, "epoch": -1})
    return r, {"transactional_id": tid, "producer_id": r["producer_id"], "epoch": r["epoch"]}


def _kafka_reserve(client: Any, body: dict[str, Any], partition: int, seq: int,
                   count: int) -> int:
    """A gateway's Reserve of a Kafka client's batch in ``ctp-out``: its base offset."""
    out = client.call("kafka_reserve", {**body, "partitions": [
        {"topic": "ctp-out", "partition": partition, "base_sequence": seq, "count": count}]})
    return int(out["partitions"][0]["base_offset"])


def _values(root: str, topic: str, isolation: str) -> list[str]:
    with Consumer(root, topic, isolation_level=isolation) as c:  # type: ignore[arg-type]
        return [r.value.decode() for r in c]


def test_consume_transform_produce_exactly_once(gw: tuple[str, CoordinatorProc,
                                                          GatewayProc]) -> None:
    root, coord, gateway = gw
    consumer = CKConsumer({"bootstrap.servers": gateway.bootstrap, "group.id": "ctp",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})
    producer = CKProducer({"bootstrap.servers": gateway.bootstrap,
                           "transactional.id": "ctp-1", "linger.ms": 5})
    producer.init_transactions(60)
    consumer.subscribe(["ctp-in"])
    done = 0
    aborted_once = False
    aborted_values: set[str] = set()
    deadline = time.monotonic() + 180
    while done < N and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(25, 1.0) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce("ctp-out", value=b"out-" + m.value(), key=m.key())
        if not aborted_once and done > N // 3:
            # one transaction aborted after its records were sent: never visible committed
            producer.flush(60)
            aborted_values |= {"out-" + m.value().decode() for m in msgs}
            producer.abort_transaction(60)
            aborted_once = True
            committed = consumer.committed(consumer.assignment(), 30)
            for tp in committed:  # rewind to what the group committed (none: the start)
                if tp.offset < 0:
                    tp.offset = OFFSET_BEGINNING
                consumer.seek(tp)
            continue
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        done += len(msgs)
    consumer.close()
    assert aborted_once and done == N
    out = _values(root, "ctp-out", "read_committed")
    assert sorted(out) == sorted(f"out-in{i}" for i in range(N))  # each exactly once
    every = set(_values(root, "ctp-out", "read_uncommitted"))
    assert aborted_values and aborted_values <= every
    committed = coord.client().committed_offsets("ctp")
    with Consumer(root, "ctp-in") as c:
        ends = c.end_offsets()
    assert committed == {TopicPartition("ctp-in", p): ends[TopicPartition("ctp-in", p)]
                         for p in range(2)}

    # a second instance fences the first
    second = CKProducer({"bootstrap.servers": gateway.bootstrap, "transactional.id": "ctp-1"})
    second.init_transactions(60)
    with pytest.raises(KafkaException):
        producer.begin_transaction()
        producer.produce("ctp-out", b"zombie")
        producer.commit_transaction(30)
    second.begin_transaction()
    second.produce("ctp-out", b"after-fence")
    second.commit_transaction(60)
    out = _values(root, "ctp-out", "read_committed")
    assert "zombie" not in out and out.count("after-fence") == 1


def test_a_retried_end_txn_gets_the_first_answer(gw: tuple[str, CoordinatorProc,
                                                           GatewayProc]) -> None:
    """An EndTxn whose answer was lost (the gateway killed while it waited, as the chaos
    harness's gateway classes do) is sent again by librdkafka with the same producer id and
    epoch. As from Kafka, a retried commit of the committed transaction succeeds (was
    INVALID_TXN_STATE, which librdkafka takes for fatal); an abort then is the abort of a
    new transaction that wrote nothing (its produce timed out: the chaos harness's
    gateway-coordinator-kill class) and succeeds; the client's next transaction goes on as
    usual."""
    root, coord, gateway = gw
    p = CKProducer({"bootstrap.servers": gateway.bootstrap, "transactional.id": "retry-end",
                    "linger.ms": 0})
    p.init_transactions(30)
    client = coord.client()
    d = client.describe_txn("retry-end")
    pid, epoch = d["producer_id"], d["epoch"]  # what InitProducerId handed the client
    p.begin_transaction()
    p.produce("ctp-out", b"retried-end-0", partition=0)
    p.commit_transaction(30)
    body = {"transactional_id": "retry-end", "producer_id": pid, "epoch": epoch}
    assert client.call("kafka_end_txn", {**body, "commit": True})["outcome"] == "commit"
    assert client.call("kafka_end_txn", {**body, "commit": True})["outcome"] == "commit"
    assert client.call("kafka_end_txn", {**body, "commit": False})["outcome"] == "abort"
    p.begin_transaction()
    p.produce("ctp-out", b"retried-end-1", partition=0)
    p.commit_transaction(30)
    values = _values(root, "ctp-out", "read_committed")
    assert values.count("retried-end-0") == 1 and values.count("retried-end-1") == 1


def test_a_transaction_the_coordinator_timed_out_is_not_continued(
        gw: tuple[str, CoordinatorProc, GatewayProc]) -> None:
    """The coordinator aborts a Kafka client's transaction after transaction.timeout.ms and
    bumps the epoch, which the client does not see. Its next batch must not land in a new
    transaction at the bumped epoch (its commit would then show only the transaction's
    tail, and a retried batch twice): as from Kafka, it gets InvalidProducerEpoch until it
    aborts; the abort succeeds, and the next transaction goes on."""
    root, coord, _gateway = gw
    client = coord.client()
    tid = "timed-out"
    r, body = _kafka_client(client, tid, 1000)

    def reserve(seq: int) -> int:
        return _kafka_reserve(client, body, 1, seq, 1)

    client.call("kafka_txn_check", body)  # AddPartitionsToTxn opens the transaction
    first = reserve(0)
    deadline = time.monotonic() + 60
    while client.describe_txn(tid)["state"] != "CompleteAbort":
        assert time.monotonic() < deadline, client.describe_txn(tid)
        time.sleep(0.2)
    with pytest.raises(InvalidProducerEpochError, match=r"transaction\.timeout\.ms"):
        reserve(1)
    with pytest.raises(InvalidProducerEpochError):
        client.call("kafka_end_txn", {**body, "commit": True})
    with pytest.raises(InvalidProducerEpochError):
        client.call("kafka_txn_check", body)
    assert client.call("kafka_end_txn", {**body, "commit": False})["outcome"] == "abort"
    # acknowledged: the client's next transaction (its sequences go on) opens and ends as
    # usual (aborted here: only offsets were reserved, nothing written, so no commit)
    client.call("kafka_txn_check", body)
    end = client.describe_topic("ctp-out")["offsets"][1]
    assert end["partition"] == 1 and end["hw"] > first, end
    # the next batch goes at the partition's end: after the timed-out batch and its abort
    # marker, no offset reused
    assert reserve(2) == end["hw"]
    assert client.describe_txn(tid)["state"] == "Ongoing"
    assert client.call("kafka_end_txn", {**body, "commit": False})["outcome"] == "abort"
    # the acknowledgement is in the log: the state a restarted coordinator loads agrees
    recovered = recover(Storage.for_url(root))
    state = CoordinatorState()
    state.load(recovered.snapshot, recovered.records)
    assert state.kafka_clients[tid][:2] == [r["producer_id"], r["epoch"]]
    assert state.kafka_clients[tid][2] == state.txns[tid].epoch - 1  # acked, then one more
    assert state.txns[tid].last["reason"] == "client"


def test_a_late_produce_of_an_ended_transaction_joins_no_other(
        gw: tuple[str, CoordinatorProc, GatewayProc]) -> None:
    """A gateway can still be retrying a Produce's Reserve (its coordinator restarting) after
    the client gave up on it, aborted the transaction and moved on. Mapped to the current
    epoch, that late batch joined the client's next transaction: a chaos run
    (gateway-coordinator-kill on S3) stored an aborted batch twice, the late copy between
    the client's EndTxn(abort) and its epoch bump; for a client that does not bump, the next
    commit would show it. As KIP-890's produce verification, the late Reserve is refused
    (before the next AddPartitionsToTxn: InvalidTxnState; after it: OutOfOrderSequence), as
    is a late TxnOffsetCommit, and the client's next transaction goes on."""
    _root, coord, _gateway = gw
    client = coord.client()
    tid = "late-produce"
    r, body = _kafka_client(client, tid, 60000)

    def reserve(seq: int) -> int:
        return _kafka_reserve(client, body, 0, seq, 2)

    def offsets(offset: int) -> None:
        client.call("kafka_add_offsets", {**body, "group_id": "late-group", "offsets": [
            {"topic": "ctp-in", "partition": 0, "offset": offset}]})

    # a Produce without AddPartitionsToTxn joins nothing
    with pytest.raises(InvalidTxnStateError, match="AddPartitionsToTxn"):
        reserve(0)
    client.call("kafka_txn_check", body)
    first = reserve(0)
    assert reserve(0) == first  # a retry in the same transaction: the same offsets
    offsets(5)
    assert client.call("kafka_end_txn", {**body, "commit": False})["outcome"] == "abort"
    # late copies of the ended transaction's requests, before the next AddPartitionsToTxn
    with pytest.raises(InvalidTxnStateError):
        reserve(0)
    with pytest.raises(InvalidTxnStateError):
        offsets(5)
    assert client.describe_txn(tid)["state"] == "CompleteAbort"  # nothing opened by them
    # ... and after it: the client's sequences only go forward, so seq 0 is a late copy
    client.call("kafka_txn_check", body)
    with pytest.raises(OutOfOrderSequenceError, match="earlier transaction"):
        reserve(0)
    nxt = reserve(2)  # the client's own next batch (its sequences go on)
    assert nxt > first
    assert client.call("kafka_end_txn", {**body, "commit": False})["outcome"] == "abort"
    # an epoch bump (KIP-360, as librdkafka does after a timed-out batch) starts sequences
    # at 0 again, and its transaction commits as usual
    r2 = client.call("kafka_init_producer_id", {**body, "transaction_timeout_ms": 60000})
    assert (r2["producer_id"], r2["epoch"]) != (r["producer_id"], r["epoch"])
    body.update(producer_id=r2["producer_id"], epoch=r2["epoch"])
    with pytest.raises(InvalidTxnStateError):
        reserve(0)
    client.call("kafka_txn_check", body)
    assert reserve(0) > nxt
    assert client.call("kafka_end_txn", {**body, "commit": False})["outcome"] == "abort"
