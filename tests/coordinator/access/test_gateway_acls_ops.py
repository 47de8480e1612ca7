"""More of the ACL matrix through a real ``txnlog gateway --sasl``: configs, groups,
idempotent producers, auto-creation, authorized-operations fields, and aiokafka.

Each cell: a principal ALLOWed the operation, one DENYed it (over an ALLOW ALL) and one
with no ACL on the resource; the refused ones get Kafka's code and change nothing (the
root is read afterwards: topic configs, committed offsets, end offsets, topic list). Each
test has its own users, so their ACLs do not mix.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc, coordinator_and_gateway
from kafka_raw_client import RawKafkaConnection
from txnlog.coordinator.access.scram import ScramCredential
from txnlog.coordinator.access.store import AccessStore
from txnlog.log_format import topics
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.storage import Storage

USERS = ("admin", "cfg-ok", "cfg-deny", "cfg-none", "grp-ok", "grp-deny", "grp-none",
         "grp-cluster", "idem-cluster", "idem-topic", "idem-none", "ac-create", "ac-nocreate",
         "ac-cluster", "ops-a", "ops-b", "aio-ok", "aio-deny", "aio-none")
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
T29, G30, C31 = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                 KafkaError.CLUSTER_AUTHORIZATION_FAILED)


def _pw(user: str) -> str:
    return f"{user}-secret-pw"


class Env:
    def __init__(self, root: str, coord: CoordinatorProc, gw: GatewayProc) -> None:
        self.root, self.coord, self.gw = root, coord, gw
        self.storage = Storage.for_url(root)
        self.admin = self.admin_as("admin")

    def conf(self, user: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
        return {"bootstrap.servers": self.gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": _pw(user)}

    def admin_as(self, user: str) -> AdminClient:
        return AdminClient(self.conf(user))

    def acl(self, user: str, rt: ResourceType, name: str, op: AclOperation,
            perm: AclPermissionType = ALLOW, pattern: ResourcePatternType = LIT) -> None:
        b = AclBinding(rt, name, pattern, f"User:{user}", "*", op, perm)
        for f in self.admin.create_acls([b]).values():
            f.result(30)

    def cell(self, rt: ResourceType, name: str, op: AclOperation, ok: str, deny: str) -> None:
        """``ok`` ALLOWed ``op``; ``deny`` ALLOWed ALL but DENYed ``op``."""
        self.acl(ok, rt, name, op)
        self.acl(deny, rt, name, AclOperation.ALL)
        self.acl(deny, rt, name, op, DENY)

    def topic(self, name: str, partitions: int = 1) -> str:
        self.coord.client().create_topic(name, partitions)
        return name

    def end_offset(self, topic: str) -> int:
        return self.coord.end_offset(topic)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = "file://" + str(tmp_path_factory.mktemp("gw-acl-ops"))
    AccessStore(Storage.for_url(root)).alter_credentials(
        {(u, m): ScramCredential.from_password(m, _pw(u), 4096)
         for u in USERS for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}, set())
    with coordinator_and_gateway(root, extra=["--sasl", "--super-users", "User:admin"]
                                 ) as (coord, gw):
        gw.wait_listening()
        yield Env(root, coord, gw)
        log = gw.log_text()
        assert "Traceback" not in log, log[-4000:]
        assert not any(_pw(u) in log for u in USERS)


def _raw(env: Env, user: str) -> RawKafkaConnection:
    """A raw connection authenticated with SASL PLAIN as ``user``."""
    return RawKafkaConnection(env.gw.port or 0, user, _pw(user))


def _code(fut: Any) -> int | None:
    try:
        fut.result(30)
        return None
    except KafkaException as exc:
        return exc.args[0].code()


# ---- topic configs: DESCRIBE_CONFIGS, ALTER_CONFIGS ---------------------------------------
def test_topic_configs_matrix(env: Env) -> None:
    """IncrementalAlterConfigs (confluent-kafka) and AlterConfigs (kafka-python) need
    ALTER_CONFIGS on the topic; an ALLOW of it implies DESCRIBE_CONFIGS."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType
    t = env.topic("cfg-t")
    env.cell(ResourceType.TOPIC, t, AclOperation.ALTER_CONFIGS, "cfg-ok", "cfg-deny")
    env.acl("cfg-none", ResourceType.TOPIC, "other-topic", AclOperation.ALL)

    def incremental(user: str, value: str) -> int | None:
        res = ConfigResource(ResourceType.TOPIC, t, incremental_configs=[
            ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
        a = env.admin_as(user)
        return _code(a.incremental_alter_configs([res])[res])

    def legacy(user: str, value: str) -> str:
        ka = KafkaAdminClient(bootstrap_servers=env.gw.bootstrap,
                              security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                              sasl_plain_username=user, sasl_plain_password=_pw(user))
        try:
            resp = ka.alter_configs([KConfigResource(ConfigResourceType.TOPIC, t,
                                                     configs={"segment.ms": value})],
                                    incremental=False, raise_on_unknown=False)
            return str(resp["topic"][t])
        finally:
            ka.close()

    def config() -> dict[str, str]:
        return dict(topics.read_topic(env.storage, t).config)

    assert incremental("cfg-ok", "111000") is None
    assert legacy("cfg-ok", "222000") == "OK"
    assert config() == {"segment.ms": "222000", "retention.ms": "111000"}
    desc = ConfigResource(ResourceType.TOPIC, t)
    a = env.admin_as("cfg-ok")
    assert a.describe_configs([desc])[desc].result(30)["segment.ms"].value == "222000"
    for user in ("cfg-deny", "cfg-none"):
        assert incremental(user, "333000") == T29, user
        assert "TopicAuthorizationFailed" in legacy(user, "444000"), user
        assert config() == {"segment.ms": "222000", "retention.ms": "111000"}, user
    # cfg-deny's ALL still gives DESCRIBE_CONFIGS; cfg-none has nothing on this topic
    a = env.admin_as("cfg-deny")
    assert _code(a.describe_configs([desc])[desc]) is None
    a = env.admin_as("cfg-none")
    assert _code(a.describe_configs([desc])[desc]) == T29
    # broker configs need the cluster's DESCRIBE_CONFIGS
    broker = ConfigResource(ResourceType.BROKER, "0")
    assert _code(a.describe_configs([broker])[broker]) == C31


# ---- groups: DESCRIBE (DescribeGroups, ListGroups), DELETE (DeleteGroups) -----------------
def test_group_describe_list_and_delete(env: Env) -> None:
    t = env.topic("grp-t")
    client = env.coord.client()
    for g in ("gd-1", "gd-2", "gd-3"):
        _commit_as_admin(env, g, t)
    env.cell(ResourceType.GROUP, "gd-1", AclOperation.DESCRIBE, "grp-ok", "grp-deny")
    env.cell(ResourceType.GROUP, "gd-2", AclOperation.DELETE, "grp-ok", "grp-deny")
    env.acl("grp-none", ResourceType.GROUP, "unrelated", AclOperation.ALL)
    env.acl("grp-cluster", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)

    def describe(user: str, group: str) -> int | None:
        a = env.admin_as(user)
        return _code(a.describe_consumer_groups([group])[group])

    assert describe("grp-ok", "gd-1") is None
    assert describe("grp-ok", "gd-2") is None  # DELETE implies DESCRIBE
    assert describe("grp-deny", "gd-1") == G30
    assert describe("grp-none", "gd-1") == G30

    def listed(user: str) -> set[str]:
        a = env.admin_as(user)
        return {g.group_id for g in a.list_consumer_groups().result(30).valid}

    assert {"gd-1", "gd-2", "gd-3"} <= listed("admin")
    assert {"gd-1", "gd-2", "gd-3"} <= listed("grp-cluster")  # DESCRIBE on the cluster: all
    assert listed("grp-ok") & {"gd-1", "gd-2", "gd-3"} == {"gd-1", "gd-2"}
    assert listed("grp-deny") & {"gd-1", "gd-2", "gd-3"} == {"gd-2"}  # ALL, DENY DESCRIBE gd-1
    assert listed("grp-none") & {"gd-1", "gd-2", "gd-3"} == set()

    def delete(user: str, group: str) -> int | None:
        a = env.admin_as(user)
        return _code(a.delete_consumer_groups([group])[group])

    for user in ("grp-deny", "grp-none"):
        assert delete(user, "gd-2") == G30, user
        assert client.committed_offsets("gd-2") == {TopicPartition(t, 0): 5}
    assert delete("grp-ok", "gd-1") == G30  # DESCRIBE only
    assert client.committed_offsets("gd-1") == {TopicPartition(t, 0): 5}
    assert delete("grp-ok", "gd-2") is None
    assert client.committed_offsets("gd-2") == {}
    assert client.committed_offsets("gd-3") == {TopicPartition(t, 0): 5}


def _commit_as_admin(env: Env, group: str, topic: str) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    kc = KafkaConsumer(bootstrap_servers=env.gw.bootstrap, group_id=group,
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                       sasl_plain_username="admin", sasl_plain_password=_pw("admin"),
                       enable_auto_commit=False)
    try:
        kc.commit({KTP(topic, 0): OffsetAndMetadata(5, "", -1)})
    finally:
        kc.close()


# ---- IDEMPOTENT_WRITE: InitProducerId without a transactional id --------------------------
def test_idempotent_producer_needs_idempotent_write_or_write_on_a_topic(env: Env) -> None:
    """Kafka since 2.8 (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any topic."""
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.static.primitive import i16, i64
    t = env.topic("idem-t")
    env.acl("idem-cluster", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)
    env.acl("idem-cluster", ResourceType.TOPIC, t, AclOperation.WRITE)
    env.acl("idem-topic", ResourceType.TOPIC, "idem-", AclOperation.WRITE, pattern=PRE)
    env.acl("idem-none", ResourceType.TOPIC, t, AclOperation.READ)
    env.acl("idem-none", ResourceType.TOPIC, t, AclOperation.WRITE, DENY)
    env.acl("idem-none", ResourceType.TOPIC, "idem-", AclOperation.WRITE, pattern=PRE)
    env.acl("idem-none", ResourceType.TOPIC, "idem-", AclOperation.WRITE, DENY, pattern=PRE)
    body = InitProducerIdRequest(transactional_id=None,
                                 transaction_timeout=datetime.timedelta(seconds=60),
                                 producer_id=i64(-1), producer_epoch=i16(-1))
    for user, want in (("idem-cluster", 0), ("idem-topic", 0), ("idem-none", C31)):
        with _raw(env, user) as raw:
            r = raw.send(22, 4, body)
        assert r.error_code == want, (user, r.error_code)
        assert (r.producer_id >= 0) == (want == 0), user
    # kafka-python's idempotent producer (librdkafka leaves a pending Python exception
    # behind its fatal error, which breaks the calls after it)
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KPError
    for user, ok in (("idem-cluster", True), ("idem-topic", True), ("idem-none", False)):
        before = env.end_offset(t)
        kp = KafkaProducer(bootstrap_servers=env.gw.bootstrap, enable_idempotence=True,
                           security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                           sasl_plain_username=user, sasl_plain_password=_pw(user),
                           max_block_ms=15000, request_timeout_ms=15000)
        try:
            kp.send(t, b"idem").get(30)
            error = None
        except KPError as exc:  # "Unexpected error in InitProducerIdResponse: [Error 31]"
            error = str(exc)
        finally:
            kp.close(5)
        assert (error is None) == ok, (user, error)
        assert ok or "ClusterAuthorizationFailed" in str(error), error
        assert env.end_offset(t) == before + (1 if ok else 0), user


# ---- auto-creation needs CREATE ------------------------------------------------------------
def _produce_raw(env: Env, user: str, topic: str) -> int:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kio.schema.produce.v9 import request as pr
    from kio.static.primitive import i16, i32
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    b.append(0, int(time.time() * 1000), None, b"raw", [])
    body = pr.ProduceRequest(transactional_id=None, acks=i16(-1),
                             timeout=datetime.timedelta(seconds=30),
                             topic_data=(pr.TopicProduceData(name=topic, partition_data=(
                                 pr.PartitionProduceData(index=i32(0),
                                                         records=bytes(b.build())),)),))
    with _raw(env, user) as raw:
        return int(raw.send(0, 9, body).responses[0].partition_responses[0].error_code)


def _metadata_raw(env: Env, user: str, topic: str, version: int = 12) -> Any:
    from kio.index import load_request_schema
    cls = load_request_schema(3, version)
    mod = __import__(cls.__module__, fromlist=["MetadataRequestTopic"])
    fields = {"topics": (mod.MetadataRequestTopic(name=topic),) if version < 10 else (
        mod.MetadataRequestTopic(topic_id=None, name=topic),)}
    if version >= 4:
        fields["allow_auto_topic_creation"] = True
    if version >= 8:
        fields["include_topic_authorized_operations"] = True
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = True
    with _raw(env, user) as raw:
        return raw.send(3, version, cls(**fields))


def test_auto_creation_needs_create(env: Env) -> None:
    """Metadata (every version) and Produce auto-create an unknown topic only for a
    principal with CREATE on the cluster or the topic; without it, the topic is
    TOPIC_AUTHORIZATION_FAILED and is not created. An existing topic needs no CREATE."""
    for u in ("ac-create", "ac-nocreate", "ac-cluster"):
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
            env.acl(u, ResourceType.TOPIC, "ac-", op, pattern=PRE)
    env.acl("ac-create", ResourceType.TOPIC, "ac-", AclOperation.CREATE, pattern=PRE)
    env.acl("ac-cluster", ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)

    def exists(name: str) -> bool:
        return name in topics.list_topics(env.storage)

    # refused, by every path: Metadata v1 (no flag: always auto-creates), v4, v12, Produce,
    # and a producer (librdkafka), with nothing created
    name = "ac-refused"
    for version in (1, 4, 12):
        md = _metadata_raw(env, "ac-nocreate", name, version)
        assert [int(t.error_code) for t in md.topics] == [T29], version
        if version >= 8:  # refused: no authorized operations, as Kafka
            assert int(md.topics[0].topic_authorized_operations) == -2147483648
    assert _produce_raw(env, "ac-nocreate", name) == T29
    p = CKProducer({**env.conf("ac-nocreate"), "message.timeout.ms": 8000})
    errs: list[Any] = []
    p.produce(name, b"x", on_delivery=lambda err, msg: errs.append(err))
    p.flush(30)
    assert len(errs) == 1 and errs[0] is not None and errs[0].code() == T29, errs
    assert not exists(name)
    # CREATE on the topic (prefixed): Metadata creates it; Produce too
    md = _metadata_raw(env, "ac-create", "ac-by-metadata", 12)
    assert [int(t.error_code) for t in md.topics] in ([0], [KafkaError.LEADER_NOT_AVAILABLE])
    assert exists("ac-by-metadata")
    assert _produce_raw(env, "ac-create", "ac-by-produce") == 0
    assert exists("ac-by-produce") and env.end_offset("ac-by-produce") == 1
    # CREATE on the cluster
    assert _produce_raw(env, "ac-cluster", "ac-by-cluster") == 0
    assert exists("ac-by-cluster")
    # the topic now exists: writing it needs WRITE only
    assert _produce_raw(env, "ac-nocreate", "ac-by-produce") == 0
    assert env.end_offset("ac-by-produce") == 2


# ---- authorized operations: the principal's own ---------------------------------------------
def _bits(ops: Any) -> set[AclOperation]:
    return set(ops or ())


def test_authorized_operations_are_the_principals(env: Env) -> None:
    t = env.topic("ops-t")
    env.acl("ops-a", ResourceType.TOPIC, t, AclOperation.READ)
    env.acl("ops-a", ResourceType.TOPIC, t, AclOperation.ALTER_CONFIGS)
    env.acl("ops-b", ResourceType.TOPIC, t, AclOperation.ALL)
    env.acl("ops-b", ResourceType.TOPIC, t, AclOperation.DELETE, DENY)
    env.acl("ops-b", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    env.acl("ops-b", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)
    env.acl("ops-a", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)
    env.acl("ops-a", ResourceType.GROUP, "ops-g", AclOperation.READ)
    env.acl("ops-b", ResourceType.GROUP, "ops-g", AclOperation.DESCRIBE)
    _commit_as_admin(env, "ops-g", t)

    def topic_ops(user: str, include: bool = True) -> Any:
        a = env.admin_as(user)
        [fut] = a.describe_topics(TopicCollection([t]),
                                  include_authorized_operations=include).values()
        return fut.result(30).authorized_operations

    assert _bits(topic_ops("ops-a")) == {AclOperation.READ, AclOperation.DESCRIBE,
                                         AclOperation.ALTER_CONFIGS,
                                         AclOperation.DESCRIBE_CONFIGS}
    assert _bits(topic_ops("ops-b")) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    assert len(_bits(topic_ops("admin"))) == 8  # a super user: every topic operation
    assert topic_ops("ops-a", include=False) is None  # not asked: Kafka's -2^31

    def cluster_ops(user: str) -> Any:
        a = env.admin_as(user)
        return a.describe_cluster(include_authorized_operations=True).result(30) \
            .authorized_operations

    assert _bits(cluster_ops("ops-b")) == {AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE}
    assert _bits(cluster_ops("ops-a")) == set()  # no DESCRIBE on the cluster: 0
    assert len(_bits(cluster_ops("admin"))) == 7

    def group_ops(user: str) -> Any:
        a = env.admin_as(user)
        return a.describe_consumer_groups(["ops-g"], include_authorized_operations=True)[
            "ops-g"].result(30).authorized_operations

    assert _bits(group_ops("ops-a")) == {AclOperation.READ, AclOperation.DESCRIBE}
    assert _bits(group_ops("ops-b")) == {AclOperation.DESCRIBE}
    # Metadata v8-v10 also carries the cluster's: raw, as the exact bit fields
    md = _metadata_raw(env, "ops-b", t, 10)
    assert int(md.cluster_authorized_operations) == (1 << 8) | (1 << 12)
    assert int(md.topics[0].topic_authorized_operations) == sum(
        1 << op for op in (3, 4, 5, 8, 7, 10, 11))
    md = _metadata_raw(env, "ops-a", t, 10)
    assert int(md.cluster_authorized_operations) == 0
    md = _metadata_raw(env, "aio-none", t, 10)  # no DESCRIBE on the topic: refused, not asked
    assert int(md.topics[0].error_code) == T29
    assert int(md.topics[0].topic_authorized_operations) == -2147483648


# ---- aiokafka ---------------------------------------------------------------------------------
def test_aiokafka_produce_and_consume(env: Env) -> None:
    """aiokafka with SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512: an allowed principal
    writes and reads; one DENYed WRITE and READ (with DESCRIBE) and one without ACLs are
    refused with TopicAuthorizationFailedError, and the topic is unchanged."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from aiokafka.errors import TopicAuthorizationFailedError
    t = env.topic("aio-t")
    for op in (AclOperation.WRITE, AclOperation.READ):
        env.cell(ResourceType.TOPIC, t, op, "aio-ok", "aio-deny")
    env.acl("aio-none", ResourceType.TOPIC, "elsewhere", AclOperation.ALL)

    def sasl(user: str, mechanism: str) -> dict[str, Any]:
        return {"bootstrap_servers": env.gw.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": _pw(user)}

    async def produce(user: str, mechanism: str) -> str | None:
        p = AIOKafkaProducer(**sasl(user, mechanism), request_timeout_ms=15000)
        await p.start()
        try:
            await asyncio.wait_for(p.send_and_wait(t, f"{user}-{mechanism}".encode()), 30)
            return None
        except TopicAuthorizationFailedError as exc:
            return type(exc).__name__
        finally:
            await p.stop()

    async def consume(user: str, mechanism: str, want: int) -> tuple[list[bytes], str | None]:
        c = AIOKafkaConsumer(**sasl(user, mechanism), enable_auto_commit=False,
                             group_id=None, auto_offset_reset="earliest")
        await c.start()
        got: list[bytes] = []
        try:
            c.assign([ATP(t, 0)])
            await c.seek_to_beginning(ATP(t, 0))
            deadline = time.monotonic() + 30
            while len(got) < want and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got.extend(m.value for m in msgs)
            return got, None
        except TopicAuthorizationFailedError as exc:
            return got, type(exc).__name__
        finally:
            await c.stop()

    async def run() -> None:
        mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        for m in mechanisms:
            assert await produce("aio-ok", m) is None, m
        assert env.end_offset(t) == 3
        for user in ("aio-deny", "aio-none"):
            for m in mechanisms:
                assert await produce(user, m) == "TopicAuthorizationFailedError", (user, m)
        assert env.end_offset(t) == 3
        got, err = await consume("aio-ok", "SCRAM-SHA-512", 3)
        assert err is None and sorted(got) == sorted(f"aio-ok-{m}".encode()
                                                     for m in mechanisms)
        # (one without DESCRIBE is not even shown the topic: aiokafka waits for it)
        got, err = await consume("aio-deny", "SCRAM-SHA-256", 1)
        assert (got, err) == ([], "TopicAuthorizationFailedError")

    asyncio.run(run())
