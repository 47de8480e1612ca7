"""The gateway as a Kafka broker, where clients can tell: the same client scenarios run
against a gateway with topic auto-creation on (Kafka's default) and one with it off.

Real processes: one coordinator over a file root and three gateways on it — ``on`` (the
defaults), ``off`` (``--no-auto-create-topics``) and ``three`` (``--num-partitions 3``,
also the second gateway of a race) — and, for the coordinator's own setting, a second
root whose coordinator runs with ``--auto-create-topics-enable false``. Clients:
confluent-kafka (librdkafka), kafka-python, aiokafka, and raw kio requests where a client
hides the field under test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kafka.errors
import pytest
from confluent_kafka import Producer as CKProducer
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from kafka import KafkaProducer
from kafka_client_guard import close_quietly
from kafka_raw_client import request_once
from txnlog.log_format import topics
from txnlog.log_format.storage import Storage

UNKNOWN_TOPIC_OR_PARTITION = 3


@dataclass
class Root:
    url: str
    coord: CoordinatorProc
    on: GatewayProc
    off: GatewayProc
    three: GatewayProc

    def gateway(self, mode: str) -> GatewayProc:
        return {"on": self.on, "off": self.off}[mode]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Root]:
    url = "file://" + str(tmp_path_factory.mktemp("gw-broker"))
    coord = CoordinatorProc(url)
    gws: list[GatewayProc] = []
    try:
        coord.wait_healthy()
        for extra in ([], ["--no-auto-create-topics"], ["--num-partitions", "3"]):
            gws.append(GatewayProc(url, extra=extra))
        for g in gws:
            g.wait_listening()
        yield Root(url, coord, *gws)
    finally:
        for g in gws:
            g.stop()
        coord.stop()
    for g in gws:
        log = g.log_text()
        assert "Traceback" not in log, log[-4000:]


def _topic(root: Root, name: str) -> topics.TopicMeta | None:
    try:
        return topics.read_topic(Storage.for_url(root.url), name)
    except topics.UnknownTopicError:
        return None


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def _metadata(gateway: GatewayProc, names: list[str], allow: bool, version: int = 12
              ) -> Any:
    from kio.schema.metadata.v3 import request as m3
    from kio.schema.metadata.v12 import request as m12

    if version == 3:
        req3 = m3.MetadataRequest(topics=tuple(m3.MetadataRequestTopic(name=n)
                                               for n in names))
        return request_once(gateway.port or 0, 3, 3, req3)
    req = m12.MetadataRequest(
        topics=tuple(m12.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=n)
                     for n in names),
        allow_auto_topic_creation=allow, include_topic_authorized_operations=False)
    return request_once(gateway.port or 0, 3, 12, req)


# ------------------------------------------------------------- auto-creation
@pytest.mark.parametrize("mode", ["on", "off"])
def test_librdkafka_producer_to_a_new_topic(root: Root, mode: str) -> None:
    """librdkafka's producer asks Metadata with allow_auto_topic_creation: on, the topic
    is made with num.partitions (1) and the record delivered; off, the record fails with
    Kafka's unknown-topic error and no topic appears."""
    name = _name("ck-auto")
    p = CKProducer({"bootstrap.servers": root.gateway(mode).bootstrap,
                    "message.timeout.ms": 2000})
    results: list[Any] = []
    p.produce(name, b"v", on_delivery=lambda err, msg: results.append((err, msg)))
    p.flush(30)
    [(err, msg)] = results
    meta = _topic(root, name)
    if mode == "on":
        assert err is None, err
        assert meta is not None and meta.partitions == 1 and meta.config == {}
        assert msg.offset() == 0
    else:
        assert err is not None and meta is None
        # librdkafka waits topic.metadata.propagation.max.ms for a topic Kafka calls
        # unknown, so the record times out (or fails as unknown) as against a broker
        assert err.name() in ("_MSG_TIMED_OUT", "_UNKNOWN_TOPIC",
                              "UNKNOWN_TOPIC_OR_PART"), err


@pytest.mark.parametrize("mode", ["on", "off"])
def test_kafka_python_producer_to_a_new_topic(root: Root, mode: str) -> None:
    name = _name("kp-auto")
    kp = KafkaProducer(bootstrap_servers=root.gateway(mode).bootstrap, max_block_ms=2000)
    try:
        if mode == "on":
            assert kp.send(name, b"v").get(30).offset == 0
        else:  # kafka-python waits max_block_ms for the topic's metadata, as with Kafka
            with pytest.raises(kafka.errors.KafkaTimeoutError):
                kp.send(name, b"v").get(30)
    finally:
        kp.close()
    assert (_topic(root, name) is not None) == (mode == "on")


@pytest.mark.parametrize("mode", ["on", "off"])
def test_aiokafka_producer_to_a_new_topic(root: Root, mode: str) -> None:
    from aiokafka import AIOKafkaProducer

    name = _name("aio-auto")

    async def go() -> int:
        p = AIOKafkaProducer(bootstrap_servers=root.gateway(mode).bootstrap,
                             request_timeout_ms=2000)
        await p.start()
        try:
            md = await asyncio.wait_for(p.send_and_wait(name, b"v"), 30)
            return int(md.offset)
        finally:
            await p.stop()

    if mode == "on":
        assert asyncio.run(go()) == 0
    else:
        from aiokafka.errors import KafkaTimeoutError, UnknownTopicOrPartitionError

        # no metadata for it: aiokafka gives up as against Kafka
        with pytest.raises((KafkaTimeoutError, UnknownTopicOrPartitionError)):
            asyncio.run(go())
    assert (_topic(root, name) is not None) == (mode == "on")


@pytest.mark.parametrize("mode", ["on", "off"])
def test_metadata_creates_only_when_allowed(root: Root, mode: str) -> None:
    """Metadata v4+ creates a topic only with allow_auto_topic_creation; v0-v3 always
    allowed it. Invalid and internal names are never created."""
    g = root.gateway(mode)
    refused, allowed, old = _name("md-no"), _name("md-yes"), _name("md-v3")
    r = _metadata(g, [refused], allow=False)
    assert [t.error_code for t in r.topics] == [UNKNOWN_TOPIC_OR_PARTITION]
    assert _topic(root, refused) is None
    r = _metadata(g, [allowed, "bad name!", "__internal_x"], allow=True)
    codes = {t.name: int(t.error_code) for t in r.topics}
    assert codes["bad name!"] == 17  # INVALID_TOPIC_EXCEPTION
    assert codes["__internal_x"] == UNKNOWN_TOPIC_OR_PARTITION
    assert _topic(root, "__internal_x") is None
    r3 = _metadata(g, [old], allow=True, version=3)
    if mode == "on":
        assert codes[allowed] == 0
        [t] = [t for t in r.topics if t.name == allowed]
        assert [p.partition_index for p in t.partitions] == [0]
        assert _topic(root, allowed) is not None
        assert [int(t.error_code) for t in r3.topics] == [0]
        assert _topic(root, old) is not None
    else:
        assert codes[allowed] == UNKNOWN_TOPIC_OR_PARTITION
        assert _topic(root, allowed) is None
        assert [int(t.error_code) for t in r3.topics] == [UNKNOWN_TOPIC_OR_PARTITION]
        assert _topic(root, old) is None


def test_produce_to_an_unknown_topic_creates_it(root: Root) -> None:
    """A Produce naming an unknown topic creates it where auto-creation is on; on the
    ``off`` gateway it is UNKNOWN_TOPIC_OR_PARTITION."""
    from kio.schema.produce.v9 import request as pr
    from txnlog.log_format.codec.records import encode_batch

    batch = encode_batch([(None, b"x", [], 1)], base_offset=0)
    for mode, want in (("off", UNKNOWN_TOPIC_OR_PARTITION), ("on", 0)):
        name = _name(f"pr-{mode}")
        req = pr.ProduceRequest(transactional_id=None, acks=-1,
                                timeout=__import__("datetime").timedelta(seconds=30),
                                topic_data=(pr.TopicProduceData(name=name, partition_data=(
                                    pr.PartitionProduceData(index=0, records=batch),)),))
        r = request_once(root.gateway(mode).port or 0, 0, 9, req)
        [t] = r.responses
        assert [int(p.error_code) for p in t.partition_responses] == [want]
        assert (_topic(root, name) is not None) == (mode == "on")


def test_num_partitions_and_one_topic_of_a_race(root: Root) -> None:
    """Two gateways auto-creating one name at once make one topic (one id); the
    gateway's --num-partitions sets its partition count."""
    name = _name("race")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda g: _metadata(g, [name], allow=True),
                                [root.three, root.on] * 4))
    metas = [_topic(root, name)]
    assert metas[0] is not None
    counts = {len(a.topics[0].partitions) for a in answers if a.topics[0].error_code == 0}
    assert counts == {metas[0].partitions}
    assert metas[0].partitions in (1, 3)
    other = _name("three")
    r = _metadata(root.three, [other], allow=True)
    assert len(r.topics[0].partitions) == 3
    meta = _topic(root, other)
    assert meta is not None and meta.partitions == 3


def test_the_coordinators_setting_holds_for_every_gateway(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A coordinator started with --auto-create-topics-enable false: a gateway that
    allows auto-creation still creates nothing (one setting for the root)."""
    url = "file://" + str(tmp_path_factory.mktemp("gw-broker-off"))
    coord = CoordinatorProc(url, extra=["--auto-create-topics-enable", "false"])
    gateway = None
    try:
        coord.wait_healthy()
        gateway = GatewayProc(url)
        gateway.wait_listening()
        name = _name("coord-off")
        r = _metadata(gateway, [name], allow=True)
        assert [int(t.error_code) for t in r.topics] == [UNKNOWN_TOPIC_OR_PARTITION]
        with contextlib.suppress(topics.UnknownTopicError):
            topics.read_topic(Storage.for_url(url), name)
            raise AssertionError("the topic was created")
    finally:
        if gateway is not None:
            gateway.stop()
        coord.stop()


# ------------------------------------------------------------------------ offsets
def _made(root: Root, name: str, partitions: int = 2) -> str:
    root.coord.client().create_topic(name, partitions)
    return name


def test_offset_commit_keeps_metadata_and_leader_epoch(root: Root) -> None:
    """OffsetCommit's metadata and committed_leader_epoch come back from OffsetFetch
    (librdkafka's committed(), kafka-python's committed(), the admin clients'
    ListConsumerGroupOffsets), also after AlterConsumerGroupOffsets, and after a
    commit without them they are "" and -1 again."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import AdminClient as CKAdmin
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    topic = _made(root, _name("om"))
    g = root.on.bootstrap
    group = _name("g-ck")
    c = CKConsumer({"bootstrap.servers": g, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[CTP(topic, 0, 5, metadata="ck-meta", leader_epoch=7),
                          CTP(topic, 1, 9)], asynchronous=False)
        got = {tp.partition: tp for tp in c.committed([CTP(topic, 0), CTP(topic, 1)], 30)}
    finally:
        c.close()
    assert (got[0].offset, got[0].metadata, got[0].leader_epoch) == (5, "ck-meta", 7)
    assert (got[1].offset, got[1].metadata, got[1].leader_epoch) == (9, None, None)

    kgroup = _name("g-kp")
    kc = KafkaConsumer(bootstrap_servers=g, group_id=kgroup, enable_auto_commit=False)
    try:
        kc.commit({KTP(topic, 0): OffsetAndMetadata(3, "kp-meta", 2)})
        om = kc.committed(KTP(topic, 0), metadata=True)
        assert (om.offset, om.metadata, om.leader_epoch) == (3, "kp-meta", 2)
        kc.commit({KTP(topic, 0): OffsetAndMetadata(4, "", -1)})  # cleared again
        om = kc.committed(KTP(topic, 0), metadata=True)
        assert (om.offset, om.metadata, om.leader_epoch) == (4, "", -1)
    finally:
        kc.close()

    ka = KafkaAdminClient(bootstrap_servers=g)
    try:
        listed = ka.list_group_offsets(group)[group]
        # confluent-kafka sends the metadata with its C string's NUL, as to any broker
        assert listed[KTP(topic, 0)].metadata in ("ck-meta", "ck-meta\x00")
        assert listed[KTP(topic, 0)].leader_epoch == 7
    finally:
        ka.close()
    admin = CKAdmin({"bootstrap.servers": g})
    f = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [CTP(topic, 1, 11, metadata="altered", leader_epoch=1)])])
    [fut] = f.values()
    fut.result(30)
    f = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    [fut] = f.values()
    rows = {tp.partition: tp for tp in fut.result(30).topic_partitions}
    assert (rows[1].offset, rows[1].metadata, rows[1].leader_epoch) == (11, "altered", 1)
    assert (rows[0].offset, rows[0].metadata) == (5, "ck-meta")


def test_offsets_of_unknown_topics_or_partitions_are_refused(root: Root) -> None:
    """Committing an offset of a topic or partition that does not exist is
    UNKNOWN_TOPIC_OR_PARTITION for that partition; the request's other partitions
    commit. Metadata over offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE."""
    from kio.schema.offset_commit.v8 import request as oc

    topic = _made(root, _name("ou"), 1)
    group = _name("g-unknown")
    req = oc.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(
            oc.OffsetCommitRequestTopic(name=topic, partitions=(
                oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                committed_leader_epoch=-1,
                                                committed_metadata="m"),
                oc.OffsetCommitRequestPartition(partition_index=3, committed_offset=1,
                                                committed_leader_epoch=-1,
                                                committed_metadata=None))),
            oc.OffsetCommitRequestTopic(name=_name("absent"), partitions=(
                oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                committed_leader_epoch=-1,
                                                committed_metadata=None),)),
            oc.OffsetCommitRequestTopic(name=topic + "x", partitions=()),
        ))
    r = request_once(root.on.port or 0, 8, 8, req)
    codes = [[int(p.error_code) for p in t.partitions] for t in r.topics]
    assert codes == [[0, UNKNOWN_TOPIC_OR_PARTITION], [UNKNOWN_TOPIC_OR_PARTITION], []]
    too_big = oc.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(oc.OffsetCommitRequestTopic(name=topic, partitions=(
            oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=2,
                                            committed_leader_epoch=-1,
                                            committed_metadata="x" * 4097),)),))
    r = request_once(root.on.port or 0, 8, 8, too_big)
    assert int(r.topics[0].partitions[0].error_code) == 12  # OFFSET_METADATA_TOO_LARGE

    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as CTP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=root.on.bootstrap, group_id=group,
                       enable_auto_commit=False)
    try:
        assert kc.committed(KTP(topic, 0), metadata=True).metadata == "m"
    finally:
        kc.close()
    c = CKConsumer({"bootstrap.servers": root.on.bootstrap, "group.id": group})
    try:
        try:  # librdkafka answers the partition's error
            errs = [tp.error for tp in c.commit(offsets=[CTP(topic, 5, 1)],
                                                asynchronous=False)]
        except KafkaException as exc:
            errs = [exc.args[0]]
        assert errs[0] is not None
        assert errs[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, errs
    finally:
        c.close()
    assert _topic(root, topic + "x") is None


def test_txn_offset_commit_keeps_metadata(root: Root) -> None:
    """sendOffsetsToTransaction's metadata is committed with the transaction."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition as CTP

    topic = _made(root, _name("tom"), 1)
    group = _name("g-txn")
    c = CKConsumer({"bootstrap.servers": root.on.bootstrap, "group.id": group})
    p = CKProducer({"bootstrap.servers": root.on.bootstrap,
                    "transactional.id": _name("tid")})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"x")
        p.send_offsets_to_transaction([CTP(topic, 0, 1, metadata="in-txn", leader_epoch=4)],
                                      c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        [got] = c.committed([CTP(topic, 0)], 30)
    finally:
        c.close()
    assert (got.offset, got.metadata, got.leader_epoch) == (1, "in-txn", 4)


def test_offset_metadata_survives_a_coordinator_restart(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The metadata is the coordinator's state (its log and snapshots), not memory."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    url = "file://" + str(tmp_path_factory.mktemp("gw-broker-restart"))
    coord = CoordinatorProc(url)
    try:
        coord.wait_healthy()
        coord.client().create_topic("t", 1)
        gateway = GatewayProc(url)
        try:
            gateway.wait_listening()
            kc = KafkaConsumer(bootstrap_servers=gateway.bootstrap, group_id="g",
                               enable_auto_commit=False)
            try:
                kc.commit({KTP("t", 0): OffsetAndMetadata(6, "kept", 5)})
            finally:
                kc.close()
        finally:
            gateway.stop()
    finally:
        coord.stop()
    coord = CoordinatorProc(url)
    try:
        coord.wait_healthy()
        r = coord.client().call("committed_offsets", {"group_id": "g"})
        assert r["offsets"] == {"t-0": 6}
        assert r["metadata"] == {"t-0": ["kept", 5]}
    finally:
        coord.stop()


# ------------------------------------------------------------- topic ids, epochs
def _epochs(gateway: GatewayProc, name: str) -> tuple[uuid.UUID, list[int]]:
    [t] = _metadata(gateway, [name], allow=False).topics
    assert int(t.error_code) == 0, t
    return t.topic_id, [p.leader_epoch for p in sorted(t.partitions,
                                                        key=lambda p: p.partition_index)]


def _list_offsets_code(gateway: GatewayProc, name: str, epoch: int) -> int:
    from kio.schema.list_offsets.v7 import request as lo

    req = lo.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        lo.ListOffsetsTopic(name=name, partitions=(lo.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=epoch, timestamp=-1),)),))
    r = request_once(gateway.port or 0, 2, 7, req)
    return int(r.topics[0].partitions[0].error_code)


def _fetch_code(gateway: GatewayProc, name: str, epoch: int) -> int:
    import datetime

    from kio.schema.fetch.v12 import request as fr

    req = fr.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, topics=(fr.FetchTopic(
            topic=name, partitions=(fr.FetchPartition(
                partition=0, current_leader_epoch=epoch, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    r = request_once(gateway.port or 0, 1, 12, req)
    return int(r.responses[0].partitions[0].error_code)


def test_topic_ids_and_leader_epochs(root: Root) -> None:
    """Metadata answers the topic's id (CreateTopics too) and a leader epoch that a topic
    deleted and created again raises; Fetch and ListOffsets with an older epoch are
    FENCED_LEADER_EPOCH, with a newer one UNKNOWN_LEADER_EPOCH. Partitions a topic
    gains start at its epoch; the old ones keep theirs."""
    import time

    from confluent_kafka.admin import AdminClient as CKAdmin
    from confluent_kafka.admin import NewPartitions, NewTopic

    g = root.off
    admin = CKAdmin({"bootstrap.servers": g.bootstrap})
    name = _name("ids")
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(30)
    first = _topic(root, name)
    assert first is not None and first.topic_id
    tid1, epochs1 = _epochs(g, name)
    assert str(tid1) == first.topic_id and len(set(epochs1)) == 1
    [desc] = admin.describe_topics(
        __import__("confluent_kafka").TopicCollection([name])).values()
    ck_id = desc.result(30).topic_id
    got = ((ck_id.get_most_significant_bits() & (2**64 - 1)) << 64) \
        | (ck_id.get_least_significant_bits() & (2**64 - 1))
    assert str(uuid.UUID(int=got)) == first.topic_id
    e1 = epochs1[0]
    assert _list_offsets_code(g, name, e1) == 0 and _fetch_code(g, name, e1) == 0
    assert _list_offsets_code(g, name, -1) == 0 and _fetch_code(g, name, -1) == 0

    admin.create_partitions([NewPartitions(name, 4)])[name].result(30)
    tid, grown = _epochs(g, name)
    assert tid == tid1 and grown == [e1] * 4

    admin.delete_topics([name])[name].result(30)
    while int(time.time()) * 1000 <= first.created_ms + 1000:  # a later second
        time.sleep(0.05)
    for _ in range(100):  # the coordinator deletes a topic's objects in the background
        try:
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
            break
        except Exception as exc:
            assert "marked for deletion" in str(exc), exc
            time.sleep(0.1)
    tid2, epochs2 = _epochs(g, name)
    second = _topic(root, name)
    assert second is not None and str(tid2) == second.topic_id != first.topic_id
    e2 = epochs2[0]
    assert e2 > e1
    assert _list_offsets_code(g, name, e1) == 74 and _fetch_code(g, name, e1) == 74
    assert _list_offsets_code(g, name, e2 + 1) == 75 and _fetch_code(g, name, e2 + 1) == 75
    assert _list_offsets_code(g, name, e2) == 0 and _fetch_code(g, name, e2) == 0


def test_a_producer_of_a_recreated_smaller_topic_stops_retrying(root: Root) -> None:
    """librdkafka writing to partition 2 of a topic that is deleted and created again
    with one partition fails that record once it sees the new topic, instead of
    retrying until message.timeout.ms."""
    from confluent_kafka.admin import AdminClient as CKAdmin
    from confluent_kafka.admin import NewTopic

    g = root.off
    admin = CKAdmin({"bootstrap.servers": g.bootstrap})
    name = _name("shrunk")
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(30)
    p = CKProducer({"bootstrap.servers": g.bootstrap, "message.timeout.ms": 300_000,
                    "topic.metadata.refresh.interval.ms": 1000})
    results: list[Any] = []
    p.produce(name, b"a", partition=2, on_delivery=lambda err, msg: results.append(err))
    assert p.flush(30) == 0 and results == [None]
    admin.delete_topics([name])[name].result(30)
    for _ in range(100):
        try:
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
            break
        except Exception as exc:
            assert "marked for deletion" in str(exc), exc
            __import__("time").sleep(0.1)
    p.produce(name, b"b", partition=2, on_delivery=lambda err, msg: results.append(err))
    assert p.flush(60) == 0, "the record is still being retried"
    assert results[1] is not None


# ------------------------------------------------------------------- fetch limits
def _fetch(gateway: GatewayProc, name: str, partitions: list[int], max_bytes: int,
           part_max: int) -> Any:
    import datetime

    from kio.schema.fetch.v12 import request as fr

    req = fr.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1, topics=(fr.FetchTopic(
            topic=name, partitions=tuple(fr.FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=part_max) for p in partitions)),),
        forgotten_topics_data=(), rack_id="")
    return request_once(gateway.port or 0, 1, 12, req)


def _batch_sizes(records: bytes | None) -> list[int]:
    out, pos, data = [], 0, bytes(records or b"")
    while pos < len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        out.append(size)
        pos += size
    assert pos == len(data), "a partial batch was served"
    return out


def test_fetch_max_bytes_holds_across_partitions(root: Root) -> None:
    """The response's records stay within max_bytes whatever the partitions' own limits;
    only the response's first batch may be larger (KIP-74), and a later partition whose
    first batch does not fit gets nothing rather than more than the limit."""
    from kafka import KafkaProducer

    name = _made(root, _name("fmax"), 3)
    kp = KafkaProducer(bootstrap_servers=root.on.bootstrap, linger_ms=0, batch_size=1)
    try:
        for i in range(8):
            for p in range(3):
                kp.send(name, b"v" * 2000 + bytes([i]), partition=p).get(30)
        big = kp.send(name, b"B" * 30_000, partition=0).get(30)
    finally:
        kp.close()
    r = _fetch(root.on, name, [0, 1, 2], max_bytes=9000, part_max=1 << 20)
    sizes = [_batch_sizes(p.records) for p in r.responses[0].partitions]
    assert sum(map(sum, sizes)) <= 9000 and sizes[0], sizes
    assert all(s < 3000 for part in sizes for s in part)
    # each partition's own limit holds too, past its first batch
    r = _fetch(root.on, name, [1, 2], max_bytes=1 << 20, part_max=5000)
    sizes = [_batch_sizes(p.records) for p in r.responses[0].partitions]
    assert all(0 < sum(s) <= 5000 for s in sizes), sizes
    # the response's first batch is whole however large; nothing follows it past the limit
    r = _fetch_from(root.on, name, [(0, big.offset), (1, 0)], max_bytes=1000)
    sizes = [_batch_sizes(p.records) for p in r.responses[0].partitions]
    assert len(sizes[0]) == 1 and sizes[0][0] > 30_000 and sizes[1] == [], sizes


def _fetch_from(gateway: GatewayProc, name: str, where: list[tuple[int, int]],
                max_bytes: int) -> Any:
    import datetime

    from kio.schema.fetch.v12 import request as fr

    req = fr.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1, topics=(fr.FetchTopic(
            topic=name, partitions=tuple(fr.FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=off,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20) for p, off in where)),),
        forgotten_topics_data=(), rack_id="")
    return request_once(gateway.port or 0, 1, 12, req)


def test_read_your_writes(root: Root) -> None:
    """After a Produce is acknowledged, a ListOffsets(latest) and a Fetch through the same
    gateway see the record, while a long-polling consumer keeps the gateway's stable
    state cache busy."""
    import threading

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    name = _made(root, _name("ryw"), 1)
    stop = threading.Event()

    def poll() -> None:
        c = KafkaConsumer(bootstrap_servers=root.on.bootstrap, fetch_max_wait_ms=30)
        c.assign([KTP(name, 0)])
        try:
            while not stop.is_set():
                c.poll(timeout_ms=20)
        finally:
            c.close()

    poller = threading.Thread(target=poll)
    poller.start()
    kp = KafkaProducer(bootstrap_servers=root.on.bootstrap, linger_ms=0)
    from kio.schema.list_offsets.v7 import request as lo

    stale = []
    try:
        for i in range(40):
            md = kp.send(name, f"r{i}".encode(), partition=0).get(30)
            req = lo.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
                lo.ListOffsetsTopic(name=name, partitions=(lo.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
            latest = request_once(root.on.port or 0, 2, 7, req).topics[0].partitions[0].offset
            fetched = _fetch_from(root.on, name, [(0, md.offset)], 1 << 20)
            hw = fetched.responses[0].partitions[0].high_watermark
            if latest != md.offset + 1 or hw != md.offset + 1:
                stale.append((i, md.offset, latest, hw))
    finally:
        kp.close()
        stop.set()
        poller.join()
    assert stale == []


# ------------------------------------------------------------------ records, fencing
def test_keyless_records_of_a_compacted_topic_are_refused(root: Root) -> None:
    """A batch with a record without a key, to a cleanup.policy=compact topic, is
    INVALID_RECORD with Kafka's per-record record_errors; keyed records are taken."""
    from confluent_kafka import KafkaError
    from kio.schema.produce.v9 import request as pr
    from txnlog.log_format.codec.records import encode_batch

    name = _name("compact")
    root.coord.client().create_topic(name, 1, {"cleanup.policy": "compact"})
    p = CKProducer({"bootstrap.servers": root.on.bootstrap, "linger.ms": 0})
    errs: list[Any] = []
    p.produce(name, value=b"no key", on_delivery=lambda err, msg: errs.append(err))
    p.flush(30)
    p.produce(name, key=b"k", value=b"keyed", on_delivery=lambda err, msg: errs.append(err))
    p.flush(30)
    assert errs[0] is not None and errs[0].code() == KafkaError.INVALID_RECORD, errs
    assert errs[1] is None

    batch = encode_batch([(b"a", b"1", [], 1), (None, b"2", [], 1), (b"c", b"3", [], 1),
                          (None, b"4", [], 1)], base_offset=0, compression="gzip")
    req = pr.ProduceRequest(transactional_id=None, acks=-1,
                            timeout=__import__("datetime").timedelta(seconds=30),
                            topic_data=(pr.TopicProduceData(name=name, partition_data=(
                                pr.PartitionProduceData(index=0, records=batch),)),))
    r = request_once(root.on.port or 0, 0, 9, req)
    [part] = r.responses[0].partition_responses
    assert int(part.error_code) == 87  # INVALID_RECORD
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    assert "without key" in part.record_errors[0].batch_index_error_message
    assert "2 record errors" in (part.error_message or "")
    from txnlog.log_format.consumer import Consumer
    with Consumer(root.url, name) as c:
        assert [rec.value for rec in c] == [b"keyed"]  # nothing of the refused batch


def test_a_fenced_transactional_producer_gets_invalid_producer_epoch(root: Root) -> None:
    """A zombie's Produce after a newer instance took its transactional id is
    INVALID_PRODUCER_EPOCH, the code Kafka's broker sends a Produce (never
    PRODUCER_FENCED), and librdkafka's zombie then learns it is fenced."""
    from confluent_kafka import KafkaException

    name = _made(root, _name("fence"), 1)
    tid = _name("zombie")
    conf = {"bootstrap.servers": root.on.bootstrap, "transactional.id": tid,
            "linger.ms": 0}
    old = CKProducer(conf)
    new = CKProducer(conf)
    try:
        old.init_transactions(30)
        old.begin_transaction()
        old.produce(name, b"before")
        old.flush(30)
        new.init_transactions(30)  # fences the old instance
        seen: list[str] = []
        old.produce(name, b"zombie", on_delivery=lambda err, msg: seen.append(str(err)))
        try:
            old.flush(30)
        except (KafkaException, SystemError) as exc:  # librdkafka raises its fatal error
            seen.append(str(exc.__cause__ or exc.__context__ or exc))
        # librdkafka names the broker's code: INVALID_PRODUCER_EPOCH is "an operation with
        # an old epoch" (PRODUCER_FENCED would be "a newer producer with the same id")
        assert any("old epoch" in x for x in seen), seen
        assert not any("newer producer with the same transactionalId" in x for x in seen), seen
        with pytest.raises(KafkaException):  # the zombie cannot commit
            old.commit_transaction(30)
        new.begin_transaction()
        new.produce(name, b"after")
        new.commit_transaction(30)
    finally:  # a fenced producer's C handle holds this frame: it would live on
        for p in (old, new):
            close_quietly(p)


# ------------------------------------------------------------------------- groups
def _raw_join(gateway: GatewayProc, group: str, member_id: str, instance: str | None) -> Any:
    import datetime

    from kio.schema.join_group.v7 import request as jg

    req = jg.JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id,
        group_instance_id=instance, protocol_type="consumer", protocols=(
            jg.JoinGroupRequestProtocol(name="range", metadata=b"\0\0\0\0\0\0\0\0"),))
    return request_once(gateway.port or 0, 11, 7, req)


def test_static_membership(root: Root) -> None:
    """KIP-345 with librdkafka's group.instance.id: DescribeGroups shows the instance
    ids; a member restarted with its instance id takes its old partitions back without
    a rebalance of the others; a stale member id of an instance is FENCED_INSTANCE_ID;
    LeaveGroup can name a member by its instance id alone."""
    import time

    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka.admin import AdminClient as CKAdmin

    topic = _made(root, _name("static"), 2)
    group = _name("g-static")
    events: dict[str, list[str]] = {"a": [], "b": []}

    def consumer(instance: str) -> Any:
        c = CKConsumer({"bootstrap.servers": root.on.bootstrap, "group.id": group,
                        "group.instance.id": instance, "session.timeout.ms": 30_000,
                        "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
                        "partition.assignment.strategy": "range"})
        c.subscribe([topic],
                    on_assign=lambda _c, ps: events[instance].append(
                        "assign " + ",".join(str(p.partition) for p in ps)),
                    on_revoke=lambda _c, ps: events[instance].append(
                        "revoke " + ",".join(str(p.partition) for p in ps)))
        return c

    def settle(cs: list[Any], until: Any) -> None:
        deadline = time.monotonic() + 60
        while not until() and time.monotonic() < deadline:
            for c in cs:
                c.poll(0.1)
        assert until(), events

    a, b = consumer("a"), consumer("b")
    try:
        settle([a, b], lambda: len(a.assignment()) + len(b.assignment()) == 2
               and a.assignment() and b.assignment())
        a_parts = sorted(p.partition for p in a.assignment())
        admin = CKAdmin({"bootstrap.servers": root.on.bootstrap})
        [fut] = admin.describe_consumer_groups([group]).values()
        desc = fut.result(30)
        assert sorted(m.group_instance_id for m in desc.members) == ["a", "b"]
        b_events = list(events["b"])
        a.close()  # a static member leaves no LeaveGroup: its partitions wait for it
        events["a"].clear()
        a = consumer("a")
        settle([a, b], lambda: bool(a.assignment()))
        for _ in range(20):  # b keeps polling: no rebalance reaches it
            b.poll(0.1)
            a.poll(0.1)
        assert sorted(p.partition for p in a.assignment()) == a_parts
        assert events["b"] == b_events, events
        [fut] = admin.describe_consumer_groups([group]).values()
        members = {m.group_instance_id: m.member_id for m in fut.result(30).members}
        assert set(members) == {"a", "b"}

        # an old member id of instance b: fenced; b's current one is not
        stale = _raw_join(root.on, group, "b-not-current", "b")
        assert int(stale.error_code) == 82  # FENCED_INSTANCE_ID

        from kio.schema.leave_group.v4 import request as lg
        req = lg.LeaveGroupRequest(group_id=group, members=(
            lg.MemberIdentity(member_id="", group_instance_id="a"),
            lg.MemberIdentity(member_id="wrong", group_instance_id="b"),
            lg.MemberIdentity(member_id="", group_instance_id="nobody")))
        r = request_once(root.on.port or 0, 13, 4, req)
        assert [(m.group_instance_id, int(m.error_code)) for m in r.members] == \
            [("a", 0), ("b", 82), ("nobody", 25)]
        [fut] = admin.describe_consumer_groups([group]).values()
        assert [m.group_instance_id for m in fut.result(30).members] == ["b"]
    finally:
        a.close()
        b.close()


def test_list_groups_keeps_an_empty_consumer_groups_protocol_type(root: Root) -> None:
    """A consumer group whose members all left is Empty with protocol type "consumer"
    (Kafka keeps it), so admin clients do not take it for a simple consumer group; a
    group only ever used for standalone commits has "" as in Kafka."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition as CTP
    from kio.schema.list_groups.v4 import request as lgr

    topic = _made(root, _name("lg"), 1)
    group, simple = _name("g-consumer"), _name("g-simple")
    c = CKConsumer({"bootstrap.servers": root.on.bootstrap, "group.id": group,
                    "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        import time
        deadline = time.monotonic() + 60
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        c.commit(offsets=[CTP(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    s = CKConsumer({"bootstrap.servers": root.on.bootstrap, "group.id": simple})
    try:
        s.commit(offsets=[CTP(topic, 0, 0)], asynchronous=False)
    finally:
        s.close()
    r = request_once(root.on.port or 0, 16, 4, lgr.ListGroupsRequest(states_filter=()))
    rows = {g.group_id: (g.group_state, g.protocol_type) for g in r.groups}
    assert rows[group] == ("Empty", "consumer"), rows
    assert rows[simple] == ("Empty", ""), rows


# -------------------------------------------------------------------------- admin
def test_delete_records_with_timeout_zero_applies(root: Root) -> None:
    """DeleteRecords with timeout_ms=0 moves the log start and answers it, as a broker
    whose partitions have no followers to wait for."""
    from kio.schema.delete_records.v2 import request as dr

    name = _made(root, _name("dr0"), 1)
    kp = KafkaProducer(bootstrap_servers=root.on.bootstrap)
    try:
        for i in range(5):
            kp.send(name, f"v{i}".encode(), partition=0).get(30)
    finally:
        kp.close()
    req = dr.DeleteRecordsRequest(
        topics=(dr.DeleteRecordsTopic(name=name, partitions=(
            dr.DeleteRecordsPartition(partition_index=0, offset=3),)),),
        timeout=__import__("datetime").timedelta(0))
    r = request_once(root.on.port or 0, 21, 2, req)
    [part] = r.topics[0].partitions
    assert (int(part.error_code), part.low_watermark) == (0, 3)
    from txnlog import AdminClient
    from txnlog.log_format.layout import TopicPartition
    low = AdminClient(root.url).list_offsets({TopicPartition(name, 0): "earliest"})
    assert low[TopicPartition(name, 0)]["offset"] == 3


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # AlterConfigs, as kafka-configs
def test_described_configs_are_accepted_back(root: Root) -> None:
    """What DescribeConfigs answers (defaults included, e.g. compression.gzip.level=-1)
    is accepted by AlterConfigs as it is, as kafka-configs round-trips it."""
    from confluent_kafka.admin import AdminClient as CKAdmin
    from confluent_kafka.admin import ConfigResource, ResourceType

    name = _made(root, _name("cfg"), 1)
    admin = CKAdmin({"bootstrap.servers": root.on.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, name)
    [fut] = admin.describe_configs([res]).values()
    described = {k: e.value for k, e in fut.result(30).items()}
    assert described["compression.gzip.level"] == "-1"
    back = ConfigResource(ResourceType.TOPIC, name, set_config=described)
    [fut] = admin.alter_configs([back]).values()
    fut.result(30)
    [fut] = admin.describe_configs([res]).values()
    assert {k: e.value for k, e in fut.result(30).items()} == described


def test_describe_cluster_and_authorized_operations(root: Root) -> None:
    """DescribeCluster answers the gateway as the cluster's broker and controller; the
    authorized operations of the cluster, topics and groups are what a broker without an
    authorizer reports (everything the resource type supports) when asked."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation
    from confluent_kafka.admin import AdminClient as CKAdmin

    admin = CKAdmin({"bootstrap.servers": root.on.bootstrap})
    desc = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert desc.cluster_id == "txnlog" and desc.controller.id == 0
    # one broker per port (--virtual-brokers, 8 by default), the first the controller
    nodes = sorted((n.id, n.port) for n in desc.nodes)
    assert [i for i, _ in nodes] == [1000 * k for k in range(8)]
    assert nodes[0][1] == root.on.port and len({p for _, p in nodes}) == 8
    assert set(desc.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE}
    name = _made(root, _name("ops"), 1)
    [fut] = admin.describe_topics(TopicCollection([name]),
                                  include_authorized_operations=True).values()
    assert AclOperation.WRITE in set(fut.result(30).authorized_operations)

    from kafka import KafkaAdminClient
    ka = KafkaAdminClient(bootstrap_servers=root.on.bootstrap)
    try:
        cluster = ka.describe_cluster()
        assert cluster["cluster_id"] == "txnlog" and cluster["controller_id"] == 0
    finally:
        ka.close()


def test_a_batch_above_max_message_bytes_is_message_too_large(root: Root) -> None:
    """A batch larger than the topic's max.message.bytes is MESSAGE_TOO_LARGE, as from a
    broker (librdkafka reports it for the record); a smaller one is taken."""
    from confluent_kafka import KafkaError

    name = _name("small-max")
    root.coord.client().create_topic(name, 1, {"max.message.bytes": "2000"})
    p = CKProducer({"bootstrap.servers": root.on.bootstrap, "linger.ms": 0,
                    "compression.type": "none"})
    errs: list[Any] = []
    p.produce(name, b"x" * 5000, on_delivery=lambda err, msg: errs.append(err))
    p.flush(30)
    p.produce(name, b"y" * 100, on_delivery=lambda err, msg: errs.append(err))
    p.flush(30)
    assert errs[0] is not None and errs[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errs
    assert errs[1] is None


def test_log_append_time_topics_stamp_the_append_time(root: Root) -> None:
    """A message.timestamp.type=LogAppendTime topic's batches carry the time of their
    append, as a broker sets it: the producer is told it, consumers read it (librdkafka
    reports the LogAppendTime type); a CreateTime topic keeps the producer's time."""
    import time

    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
    from confluent_kafka import Consumer as CKConsumer

    lat, ct = _name("lat"), _name("ct")
    root.coord.client().create_topic(lat, 1, {"message.timestamp.type": "LogAppendTime"})
    root.coord.client().create_topic(ct, 1)
    before = int(time.time() * 1000)
    p = CKProducer({"bootstrap.servers": root.on.bootstrap, "linger.ms": 0})
    acked: list[Any] = []
    for name in (lat, ct):
        p.produce(name, b"v", key=b"k", timestamp=1000,
                  on_delivery=lambda err, msg: acked.append((err, msg.timestamp())))
        p.flush(30)
    (err1, (type1, ts1)), (err2, (type2, ts2)) = acked
    assert err1 is None and type1 == TIMESTAMP_LOG_APPEND_TIME and ts1 >= before, acked
    assert err2 is None and (type2, ts2) == (TIMESTAMP_CREATE_TIME, 1000), acked
    for name, want in ((lat, (TIMESTAMP_LOG_APPEND_TIME, ts1)),
                       (ct, (TIMESTAMP_CREATE_TIME, 1000))):
        c = CKConsumer({"bootstrap.servers": root.on.bootstrap, "group.id": _name("g"),
                        "auto.offset.reset": "earliest"})
        try:
            c.subscribe([name])
            msg = None
            deadline = time.monotonic() + 30
            while msg is None and time.monotonic() < deadline:
                msg = c.poll(0.2)
            assert msg is not None and msg.error() is None, msg
            assert msg.timestamp() == want
        finally:
            c.close()
