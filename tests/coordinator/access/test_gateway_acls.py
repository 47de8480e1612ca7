"""Principals and ACLs through a real ``txnlog gateway --sasl``: Kafka's clients, Kafka's codes.

A coordinator and a gateway over a file root. Users authenticate with SCRAM-SHA-256,
SCRAM-SHA-512 and PLAIN (confluent-kafka, kafka-python); a super user manages ACLs and
SCRAM credentials with confluent-kafka's AdminClient (CreateAcls, DescribeAcls, DeleteAcls,
AlterUserScramCredentials, DescribeUserScramCredentials). A matrix of resource type x
operation x (allowed, denied, no ACL) checks each API's answer code and that a refused
request changed nothing in the root.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc, coordinator_and_gateway
from kafka_client_guard import close_quietly
from kafka_raw_client import RawKafkaConnection
from txnlog.coordinator.access.scram import ScramCredential
from txnlog.coordinator.access.store import AccessStore
from txnlog.log_format import topics
from txnlog.log_format.layout import TopicPartition
from txnlog.log_format.storage import Storage

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
SUPER = "User:admin"


def _conf(gw: GatewayProc, user: str, mechanism: str = "SCRAM-SHA-256",
          password: str | None = None) -> dict[str, Any]:
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": PASSWORDS.get(user, "") if password is None else password}


class Env:
    def __init__(self, root: str, coord: CoordinatorProc, gw: GatewayProc) -> None:
        self.root, self.coord, self.gw = root, coord, gw
        self.storage = Storage.for_url(root)
        self.admin = AdminClient(_conf(gw, "admin", "SCRAM-SHA-512"))

    def admin_as(self, user: str) -> AdminClient:
        return AdminClient(_conf(self.gw, user))

    def allow(self, principal: str, rt: ResourceType, name: str, op: AclOperation,
              perm: AclPermissionType = AclPermissionType.ALLOW,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> None:
        b = AclBinding(rt, name, pattern, principal, "*", op, perm)
        for f in self.admin.create_acls([b]).values():
            f.result(30)

    def end_offset(self, topic: str) -> int:
        return self.coord.end_offset(topic)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = "file://" + str(tmp_path_factory.mktemp("gw-acls"))
    store = AccessStore(Storage.for_url(root))
    store.alter_credentials({("admin", m): ScramCredential.from_password(m, "admin-pw", 4096)
                             for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}, set())
    with coordinator_and_gateway(root, extra=["--sasl", "--super-users", SUPER]) as (coord, gw):
        gw.wait_listening()
        e = Env(root, coord, gw)
        # the super user creates the others through Kafka's own API
        ups = [UserScramCredentialUpsertion(
            u, ScramCredentialInfo(m, 4096), PASSWORDS[u].encode())
            for u in ("alice", "bob", "carol")
            for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
        for f in e.admin.alter_user_scram_credentials(ups).values():
            f.result(30)
        for t in ("t-ok", "t-no", "t-none", "t-free"):
            coord.client().create_topic(t, 1)
        yield e
        log = gw.log_text()
        assert "Traceback" not in log, log[-4000:]
        for secret in PASSWORDS.values():
            assert secret not in log


def _produce(conf: dict[str, Any], topic: str, n: int = 3) -> list[Any]:
    p = CKProducer({**conf, "message.timeout.ms": 15000, "enable.idempotence": False})
    errors: list[Any] = []
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    return errors


def _consume(conf: dict[str, Any], topic: str, want: int, group: str | None = None
             ) -> tuple[list[bytes], list[int]]:
    c = CKConsumer({**conf, "group.id": group or "g-read", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False})
    c.assign([CTP(topic, 0, 0)])
    got, codes = [], []
    deadline = time.monotonic() + 30
    while len(got) < want and not codes and time.monotonic() < deadline:
        m = c.poll(0.3)
        if m is None:
            continue
        if m.error() is not None:
            codes.append(m.error().code())
        else:
            got.append(m.value())
    c.close()
    return got, codes


def test_scram_and_plain_clients_produce_and_consume(env: Env) -> None:
    env.allow("User:alice", ResourceType.TOPIC, "sales-", AclOperation.ALL,
              pattern=ResourcePatternType.PREFIXED)
    env.allow("User:alice", ResourceType.GROUP, "g-", AclOperation.READ,
              pattern=ResourcePatternType.PREFIXED)
    env.coord.client().create_topic("sales-eu", 1)
    assert _produce(_conf(env.gw, "alice", "SCRAM-SHA-512"), "sales-eu") == [None] * 3
    got, codes = _consume(_conf(env.gw, "alice", "SCRAM-SHA-256"), "sales-eu", 3)
    assert codes == [] and sorted(got) == [b"v0", b"v1", b"v2"]
    got, codes = _consume(_conf(env.gw, "alice", "PLAIN"), "sales-eu", 3)
    assert codes == [] and len(got) == 3

    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    for mech in ("PLAIN", "SCRAM-SHA-256"):
        kp = KafkaProducer(bootstrap_servers=env.gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism=mech, sasl_plain_username="alice",
                           sasl_plain_password="alice-pw")
        kp.send("sales-eu", b"kp-" + mech.encode()).get(30)
        kp.close()
    kc = KafkaConsumer(bootstrap_servers=env.gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                       sasl_plain_password="alice-pw", auto_offset_reset="earliest",
                       enable_auto_commit=False)
    kc.assign([KTP("sales-eu", 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 5 and time.monotonic() < deadline:
        for msgs in kc.poll(500).values():
            seen.extend(m.value for m in msgs)
    kc.close()
    assert b"kp-PLAIN" in seen and b"kp-SCRAM-SHA-256" in seen


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_password_gets_nothing(env: Env, mechanism: str) -> None:
    conf = _conf(env.gw, "alice", mechanism, password="not-alice-pw")
    a = AdminClient(conf)
    with pytest.raises(KafkaException) as exc:
        a.list_topics(timeout=1)
    assert exc.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT,
                                        KafkaError._TIMED_OUT)
    assert env.gw.alive()


def test_acl_apis_round_trip_and_need_cluster_alter(env: Env) -> None:
    b = AclBinding(ResourceType.GROUP, "audit-", ResourcePatternType.PREFIXED, "User:carol",
                   "*", AclOperation.READ, AclPermissionType.ALLOW)
    for f in env.admin.create_acls([b]).values():
        f.result(30)
    flt = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, "User:carol",
                           None, AclOperation.ANY, AclPermissionType.ANY)
    assert env.admin.describe_acls(flt).result(30) == [b]
    # carol may not change ACLs: CLUSTER_AUTHORIZATION_FAILED, and nothing changed
    carol = env.admin_as("carol")
    with pytest.raises(KafkaException) as exc:
        for f in carol.create_acls([AclBinding(
                ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:carol", "*",
                AclOperation.ALL, AclPermissionType.ALLOW)]).values():
            f.result(30)
    assert exc.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (librdkafka returns an empty list for a refused DescribeAcls; kafka-python raises)
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KRT
    from kafka.errors import ClusterAuthorizationFailedError
    kcarol = KafkaAdminClient(bootstrap_servers=env.gw.bootstrap,
                              security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                              sasl_plain_username="carol", sasl_plain_password="carol-pw")
    with pytest.raises(ClusterAuthorizationFailedError):
        kcarol.describe_acls(ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                                       ResourcePatternFilter(KRT.ANY, None,
                                                             ACLResourcePatternType.ANY)))
    kcarol.close()
    deleted = [r for f in env.admin.delete_acls([flt]).values() for r in f.result(30)]
    assert deleted == [b]
    assert env.admin.describe_acls(flt).result(30) == []
    # SCRAM credentials: iterations shown, keys never; a deleted credential stops working
    desc = env.admin.describe_user_scram_credentials(["bob"])["bob"].result(30)
    assert {i.mechanism for i in desc.scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512}
    for f in env.admin.alter_user_scram_credentials([UserScramCredentialDeletion(
            "carol", ScramMechanism.SCRAM_SHA_256)]).values():
        f.result(30)
    with pytest.raises(KafkaException):
        env.admin_as("carol").list_topics(timeout=5)
    assert AdminClient(_conf(env.gw, "carol", "SCRAM-SHA-512")).list_topics(timeout=10)
    for f in env.admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            b"carol-pw")]).values():
        f.result(30)
    assert AdminClient(_conf(env.gw, "carol")).list_topics(timeout=10)


# ---- the matrix ---------------------------------------------------------------------------
# For each (resource, operation): bob is ALLOWed it, carol is DENYed it (over an ALLOW ALL),
# and on a resource named by ACLs of others only, alice has none (refused, allow-everyone off).
def _setup(env: Env, rt: ResourceType, name: str, op: AclOperation) -> None:
    env.allow("User:bob", rt, name, op)
    env.allow("User:carol", rt, name, AclOperation.ALL)
    env.allow("User:carol", rt, name, op, AclPermissionType.DENY)


def _fresh_topic(env: Env, name: str) -> str:
    env.coord.client().create_topic(name, 1)
    return name


def _try_write(env: Env, user: str, topic: str) -> tuple[int | None, bool]:
    before = env.end_offset(topic)
    errs = _produce(_conf(env.gw, user), topic, 2)
    code = next((e.code() for e in errs if e is not None), None)
    return code, env.end_offset(topic) != before


def _try_read(env: Env, user: str, topic: str) -> tuple[int | None, bool]:
    """kafka-python: it raises the Fetch's partition error from poll (librdkafka backs
    off and retries a TOPIC_AUTHORIZATION_FAILED partition without telling the app)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import TopicAuthorizationFailedError
    if _try_describe(env, user, topic)[0] is not None:
        return KafkaError.TOPIC_AUTHORIZATION_FAILED, False  # not even shown: not read
    kc = KafkaConsumer(bootstrap_servers=env.gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                       sasl_plain_password=PASSWORDS[user], enable_auto_commit=False)
    kc.assign([KTP(topic, 0)])
    kc.seek(KTP(topic, 0), 0)
    got: list[Any] = []
    code = None
    # allowed: records within seconds; READ denied: the Fetch's error raised
    deadline = time.monotonic() + 30
    try:
        while not got and time.monotonic() < deadline:
            for msgs in kc.poll(300).values():
                got.extend(msgs)
    except TopicAuthorizationFailedError:
        code = KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        kc.close()
    return code, bool(got)


def _try_describe(env: Env, user: str, topic: str) -> tuple[int | None, bool]:
    md = env.admin_as(user).list_topics(timeout=10)
    return (None if topic in md.topics else KafkaError.TOPIC_AUTHORIZATION_FAILED), False


def _admin_code(fut: Any) -> int | None:
    try:
        fut.result(30)
        return None
    except KafkaException as exc:
        return exc.args[0].code()


def _try_create(env: Env, user: str, topic: str) -> tuple[int | None, bool]:
    name = f"{topic}-{user}-new"
    a = env.admin_as(user)  # held until the answer: a dropped client cancels its calls
    code = _admin_code(a.create_topics([NewTopic(name, 1)])[name])
    return code, name in topics.list_topics(env.storage)


def _try_delete(env: Env, user: str, topic: str) -> tuple[int | None, bool]:
    name = _fresh_topic(env, f"{topic}-{user}-del")
    a = env.admin_as(user)
    code = _admin_code(a.delete_topics([name])[name])
    return code, name not in topics.list_topics(env.storage)


def _try_alter(env: Env, user: str, topic: str) -> tuple[int | None, bool]:
    name = _fresh_topic(env, f"{topic}-{user}-alt")
    a = env.admin_as(user)
    code = _admin_code(a.create_partitions([NewPartitions(name, 2)])[name])
    return code, topics.read_topic(env.storage, name).partitions != 1


def _try_describe_configs(env: Env, user: str, topic: str) -> tuple[int | None, bool]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    a = env.admin_as(user)
    return _admin_code(a.describe_configs([res])[res]), False


TOPIC_OPS: dict[str, tuple[AclOperation, Callable[[Env, str, str], tuple[int | None, bool]],
                           bool]] = {
    # name: (operation, attempt -> (code, whether it changed something), writes?)
    "write": (AclOperation.WRITE, _try_write, True),
    "read": (AclOperation.READ, _try_read, False),
    "describe": (AclOperation.DESCRIBE, _try_describe, False),
    "create": (AclOperation.CREATE, _try_create, True),
    "delete": (AclOperation.DELETE, _try_delete, True),
    "alter": (AclOperation.ALTER, _try_alter, True),
    "describe_configs": (AclOperation.DESCRIBE_CONFIGS, _try_describe_configs, False),
}


@pytest.mark.parametrize("opname", sorted(TOPIC_OPS))
def test_topic_matrix(env: Env, opname: str) -> None:
    op, attempt, writes = TOPIC_OPS[opname]
    topic = _fresh_topic(env, f"m-{opname}")
    _produce(_conf(env.gw, "admin", "SCRAM-SHA-512"), topic, 1)
    pattern = ResourcePatternType.PREFIXED if opname in ("create", "delete", "alter") \
        else ResourcePatternType.LITERAL
    env.allow("User:bob", ResourceType.TOPIC, topic, op, pattern=pattern)
    if opname == "delete":  # Kafka: deleting needs DESCRIBE too
        env.allow("User:bob", ResourceType.TOPIC, topic, AclOperation.DESCRIBE, pattern=pattern)
    env.allow("User:carol", ResourceType.TOPIC, topic, AclOperation.ALL, pattern=pattern)
    env.allow("User:carol", ResourceType.TOPIC, topic, op, AclPermissionType.DENY,
              pattern=pattern)
    code, changed = attempt(env, "bob", topic)
    assert code is None, (opname, code)
    assert changed or not writes
    for user in ("carol", "alice"):  # denied; no ACL for alice on this topic
        code, changed = attempt(env, user, topic)
        assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED, (opname, user, code)
        assert not changed, (opname, user)


def test_group_and_transactional_id_matrix(env: Env) -> None:
    topic = _fresh_topic(env, "m-groups")
    env.allow("User:*", ResourceType.TOPIC, topic, AclOperation.ALL)
    _setup(env, ResourceType.GROUP, "grp", AclOperation.READ)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import GroupAuthorizationFailedError
    from kafka.structs import OffsetAndMetadata
    for user, ok in (("bob", True), ("carol", False), ("alice", False)):
        kc = KafkaConsumer(bootstrap_servers=env.gw.bootstrap, group_id="grp",
                           security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                           sasl_plain_username=user, sasl_plain_password=PASSWORDS[user],
                           enable_auto_commit=False)
        kc.assign([KTP(topic, 0)])
        try:
            kc.commit({KTP(topic, 0): OffsetAndMetadata(1 if ok else 7, "", -1)})
            committed = True
        except GroupAuthorizationFailedError:
            committed = False
        finally:
            kc.close()
        assert committed == ok, user
    assert env.coord.client().committed_offsets("grp") == {TopicPartition(topic, 0): 1}
    # transactional ids: WRITE needed to init a transactional producer
    _setup(env, ResourceType.TRANSACTIONAL_ID, "tx-1", AclOperation.WRITE)
    env.allow("User:bob", ResourceType.TRANSACTIONAL_ID, "tx-1", AclOperation.DESCRIBE)
    env.allow("User:carol", ResourceType.TRANSACTIONAL_ID, "tx-1", AclOperation.DESCRIBE)
    for user, ok in (("bob", True), ("carol", False), ("alice", False)):
        p = CKProducer({**_conf(env.gw, user), "transactional.id": "tx-1",
                        "transaction.timeout.ms": 60000})
        try:
            p.init_transactions(20)
            p.begin_transaction()
            p.produce(topic, b"tx")
            p.commit_transaction(20)
            code = None
        except KafkaException as exc:
            code = exc.args[0].code()
        finally:  # a refused producer's C handle holds this frame: it would live on
            close_quietly(p)
        assert (code is None) == ok, (user, code)
        if not ok:
            assert code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, (user, code)


def test_allow_everyone_if_no_acl_found(env: Env) -> None:
    """Off (this gateway): a topic no ACL names is closed; on (a second gateway): open,
    but a topic some ACL names stays closed to others."""
    topic = _fresh_topic(env, "m-free")
    closed = _fresh_topic(env, "m-closed")
    env.allow("User:bob", ResourceType.TOPIC, closed, AclOperation.READ)
    assert _try_describe(env, "alice", topic)[0] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with GatewayProc(env.root, extra=["--sasl", "--allow-everyone-if-no-acl-found", "true"]
                     ) as open_gw:
        try:
            md = AdminClient(_conf(open_gw, "alice")).list_topics(timeout=10)
            assert topic in md.topics and "t-ok" in md.topics
            assert closed not in md.topics
        finally:
            open_gw.stop()


def test_cli_changes_reach_a_running_gateway(env: Env) -> None:
    """`txnlog acls` writes the root; the gateway re-reads it within its refresh time."""
    import subprocess
    import sys
    topic = _fresh_topic(env, "m-cli")
    assert _try_describe(env, "alice", topic)[0] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    out = subprocess.run([sys.executable, "-m", "txnlog.coordinator.cli", "acls", "--root",
                          env.root, "--add", "--allow-principal", "User:alice",
                          "--operation", "Describe", "--topic", topic],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "CREATE_ACL User:alice ALLOW DESCRIBE" in out.stderr  # the audit line
    deadline = time.monotonic() + 30
    while _try_describe(env, "alice", topic)[0] is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _try_describe(env, "alice", topic)[0] is None


def test_fuzz_sasl_tokens(env: Env) -> None:
    """Random SaslAuthenticate tokens for every mechanism: refused (and the connection
    closed, as Kafka closes it), never a crash."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    token = st.one_of(st.binary(max_size=300), st.sampled_from([
        b"n,,n=alice,r=abc", b"\0alice\0", b"\0\0", b"c=biws,r=x,p=AAAA", b"n,,n=,r=",
        b"n,a=bob,n=alice,r=1", b"\0admin\0admin-p"]))

    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
           st.lists(token, min_size=1, max_size=2))
    def one(mechanism: str, tokens: list[bytes]) -> None:
        conn = RawKafkaConnection(env.gw.port or 0, client_id="fz")
        assert conn.send(17, 1, SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        for t in tokens:
            r = conn.send(36, 2, SaslAuthenticateRequest(auth_bytes=t))
            if r.error_code != 0:
                assert conn.sock.recv(1) == b""  # closed after the refusal
                break
        else:
            assert mechanism != "PLAIN" or tokens[-1] == b"\0admin\0admin-pw"
        conn.sock.close()

    one()
    assert env.gw.alive()


# ---- fuzz (last in this module: what it creates stays in the root) ------------------------
def test_fuzz_acl_and_credential_apis(env: Env) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from kio.schema.alter_user_scram_credentials.v0 import request as alt
    from kio.schema.create_acls.v3 import request as cr
    from kio.schema.delete_acls.v3 import request as dl
    from kio.schema.describe_acls.v3 import request as ds
    from kio.schema.describe_user_scram_credentials.v0 import request as dsu
    from kio.static.primitive import i8, i32

    conn = RawKafkaConnection(env.gw.port or 0, "admin", "admin-pw", client_id="fz")
    i8s = st.integers(-128, 127).map(i8)
    small = st.one_of(st.integers(0, 8).map(i8), i8s)
    text = st.text(max_size=40)
    maybe = st.one_of(st.none(), text, st.sampled_from(["*", "User:bob", "fz-", "kafka-cluster"]))
    creation = st.builds(cr.AclCreation, resource_type=small, resource_name=st.one_of(
        text, st.sampled_from(["fz-t", "*", "kafka-cluster"])), resource_pattern_type=small,
        principal=st.one_of(text, st.sampled_from(["User:fz", "User:*", "fz"])),
        host=st.one_of(text, st.just("*")), operation=small, permission_type=small)
    flt = {"resource_type_filter": small, "resource_name_filter": maybe,
           "pattern_type_filter": small, "principal_filter": maybe, "host_filter": maybe,
           "operation": small, "permission_type": small}
    upsert = st.builds(alt.ScramCredentialUpsertion, name=st.one_of(text, st.just("fz")),
                       mechanism=small, iterations=st.integers(-1, 20000).map(i32),
                       salt=st.binary(max_size=40), salted_password=st.binary(max_size=70))
    deletion = st.builds(alt.ScramCredentialDeletion, name=st.one_of(text, st.just("fz")),
                         mechanism=small)
    request = st.one_of(
        st.builds(cr.CreateAclsRequest, creations=st.lists(creation, max_size=4).map(tuple))
        .map(lambda b: (30, 3, b)),
        st.builds(dl.DeleteAclsRequest, filters=st.lists(st.builds(dl.DeleteAclsFilter, **flt),
                                                         max_size=3).map(tuple))
        .map(lambda b: (31, 3, b)),
        st.builds(ds.DescribeAclsRequest, **flt).map(lambda b: (29, 3, b)),
        st.builds(alt.AlterUserScramCredentialsRequest,
                  deletions=st.lists(deletion, max_size=3).map(tuple),
                  upsertions=st.lists(upsert, max_size=3).map(tuple)).map(lambda b: (51, 0, b)),
        st.builds(dsu.DescribeUserScramCredentialsRequest, users=st.one_of(
            st.none(), st.lists(st.builds(dsu.UserName, name=st.one_of(text, st.just("bob"))),
                                max_size=3).map(tuple))).map(lambda b: (50, 0, b)))

    @settings(max_examples=100, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(request)
    def one(req: tuple[int, int, Any]) -> None:
        key, version, body = req
        resp = conn.send(key, version, body)  # an answer, never a closed connection
        if key == 30:
            assert len(resp.results) == len(body.creations)
        elif key == 31:
            assert len(resp.filter_results) == len(body.filters)
        elif key == 29:
            assert resp.error_code in (0, 42)
        elif key == 50:
            assert resp.error_code == 0

    one()
    assert env.gw.alive()
    # the fuzz's users and ACLs did not lock the admin out nor wedge the gateway
    assert _produce(_conf(env.gw, "admin", "SCRAM-SHA-512"), "t-ok", 1) == [None]
