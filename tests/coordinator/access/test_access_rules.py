"""Kafka's authorization rules, SCRAM derivation and the root's access store, in-process.

The rules are checked against Kafka's documented behaviour (StandardAuthorizer): DENY
wins, implied DESCRIBE, prefixed and wildcard ACLs, super users, allow-everyone only for
resources no ACL names; the store against concurrent writers that must not lose a change.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from pathlib import Path

import pytest
from txnlog.coordinator.access.authorizer import Authorizer
from txnlog.coordinator.access.model import (
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from txnlog.coordinator.access.scram import CredentialError, ScramCredential
from txnlog.coordinator.access.store import AccessStore
from txnlog.log_format.storage import Storage

T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)
ALICE, BOB = "User:alice", "User:bob"


def acl(rt: ResourceType, name: str, op: Operation, perm: Permission = Permission.ALLOW,
        principal: str = ALICE, pattern: PatternType = PatternType.LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding.new(rt, name, pattern, principal, host, op, perm)


def test_deny_wins_over_allow_and_all() -> None:
    az = Authorizer([acl(T, "orders", Operation.ALL),
                     acl(T, "orders", Operation.WRITE, Permission.DENY)])
    assert az.allowed(ALICE, "h", Operation.READ, T, "orders")
    assert not az.allowed(ALICE, "h", Operation.WRITE, T, "orders")


def test_implied_describe_from_allow_only() -> None:
    az = Authorizer([acl(T, "a", Operation.READ), acl(T, "b", Operation.ALTER_CONFIGS),
                     acl(T, "c", Operation.READ, Permission.DENY),
                     acl(T, "c", Operation.DESCRIBE)])
    assert az.allowed(ALICE, "h", Operation.DESCRIBE, T, "a")
    assert not az.allowed(ALICE, "h", Operation.WRITE, T, "a")
    assert az.allowed(ALICE, "h", Operation.DESCRIBE_CONFIGS, T, "b")
    assert az.allowed(ALICE, "h", Operation.DESCRIBE, T, "c")  # DENY READ keeps DESCRIBE
    assert not az.allowed(ALICE, "h", Operation.READ, T, "c")


def test_prefixed_wildcard_principal_and_host() -> None:
    az = Authorizer([acl(T, "sales-", Operation.READ, pattern=PatternType.PREFIXED),
                     acl(T, "*", Operation.DESCRIBE, principal="User:*"),
                     acl(G, "g", Operation.READ, host="10.0.0.1")])
    assert az.allowed(ALICE, "h", Operation.READ, T, "sales-eu")
    assert not az.allowed(ALICE, "h", Operation.READ, T, "sale")
    assert not az.allowed(BOB, "h", Operation.READ, T, "sales-eu")
    assert az.allowed(BOB, "h", Operation.DESCRIBE, T, "anything")
    assert az.allowed(ALICE, "10.0.0.1", Operation.READ, G, "g")
    assert not az.allowed(ALICE, "10.0.0.2", Operation.READ, G, "g")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    bindings = [acl(T, "guarded", Operation.READ, principal=BOB)]
    az = Authorizer(bindings, super_users=[ALICE])
    assert az.allowed(ALICE, "h", Operation.DELETE, T, "guarded")
    closed = Authorizer(bindings)
    opened = Authorizer(bindings, allow_everyone_if_no_acl_found=True)
    assert not closed.allowed(ALICE, "h", Operation.READ, T, "free")
    assert opened.allowed(ALICE, "h", Operation.READ, T, "free")
    # a resource some ACL names is closed to everyone else, whatever the setting
    assert not opened.allowed(ALICE, "h", Operation.READ, T, "guarded")


def test_any_of_type() -> None:
    az = Authorizer([acl(T, "a", Operation.WRITE), acl(T, "b", Operation.WRITE, principal=BOB),
                     acl(T, "b", Operation.WRITE, Permission.DENY, principal=BOB)])
    assert az.any_of_type(ALICE, "h", Operation.WRITE, T)
    assert not az.any_of_type(BOB, "h", Operation.WRITE, T)


def test_audit_logs_refusals_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    az = Authorizer([])
    with caplog.at_level(logging.WARNING, logger="txnlog.audit"):
        assert not az.authorize(ALICE, "1.2.3.4", Operation.WRITE, T, "orders")
    assert "principal=User:alice" in caplog.text and "operation=WRITE" in caplog.text
    assert "resource=TOPIC:orders" in caplog.text


def test_index_finds_the_same_answers_as_a_scan() -> None:
    bindings = [acl(T, f"t{i}-", Operation.READ, pattern=PatternType.PREFIXED,
                    principal=f"User:u{i % 7}") for i in range(500)]
    bindings += [acl(T, f"t{i}-x", Operation.READ, Permission.DENY, principal="User:u3")
                 for i in range(0, 500, 5)]
    az = Authorizer(bindings)
    for i in range(0, 500, 13):
        for u in range(7):
            name = f"t{i}-x"
            match = [b for b in bindings if name.startswith(b.name) if
                     b.principal == f"User:u{u}"]
            want = bool(match) and not any(b.permission is Permission.DENY for b in match)
            assert az.allowed(f"User:u{u}", "h", Operation.READ, T, name) == want


def test_bindings_refused_as_kafka_does() -> None:
    for bad in [(ResourceType.ANY, "t", 3, ALICE, "*", 3, 3), (T, "t", 1, ALICE, "*", 3, 3),
                (T, "t", 3, "alice", "*", 3, 3), (T, "", 3, ALICE, "*", 3, 3),
                (C, "other", 3, ALICE, "*", 3, 3), (T, "t", 3, ALICE, "*", 1, 3),
                (T, "t", 3, ALICE, "*", 3, 1), (99, "t", 3, ALICE, "*", 3, 3)]:
        with pytest.raises(AclError):
            AclBinding.new(*bad)


def test_filters_match_and_any() -> None:
    lit = acl(T, "sales-eu", Operation.READ)
    pre = acl(T, "sales-", Operation.READ, pattern=PatternType.PREFIXED)
    star = acl(T, "*", Operation.READ)
    match = AclFilter.new(T, "sales-eu", PatternType.MATCH)
    assert all(match.matches(b) for b in (lit, pre, star))
    anyp = AclFilter.new(T, "sales-eu", PatternType.ANY)
    assert anyp.matches(lit) and not anyp.matches(pre) and not anyp.matches(star)


def test_scram_keys_are_kafkas_and_plain_checks_them() -> None:
    salt = b"salt" * 4
    salted = hashlib.pbkdf2_hmac("sha512", b"secret", salt, 4096)
    cred = ScramCredential.from_salted("SCRAM-SHA-512", salt, salted, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    assert cred.stored_key == hashlib.sha512(client_key).digest()
    assert cred.server_key == hmac.new(salted, b"Server Key", "sha512").digest()
    assert cred.check_password(b"secret") and not cred.check_password(b"Secret")
    assert "secret" not in repr(cred) and salted.hex() not in repr(cred)
    for n in (4095, 16385):
        with pytest.raises(CredentialError):
            ScramCredential.from_salted("SCRAM-SHA-256", salt, salted, n)
    with pytest.raises(CredentialError):
        ScramCredential.from_password("SCRAM-SHA-1", "x")


def test_store_keeps_every_concurrent_change(tmp_path: Path) -> None:
    root = f"file://{tmp_path / 'root'}"
    stores = [AccessStore(Storage.for_url(root), refresh_s=0.0) for _ in range(4)]

    def add(k: int) -> None:
        for i in range(10):
            stores[k].add_acls([acl(T, f"t{k}-{i}", Operation.READ)])
    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh = AccessStore(Storage.for_url(root))
    assert len(fresh.state().acls) == 40
    cred = ScramCredential.from_password("SCRAM-SHA-256", "hunter2-secret", 4096)
    fresh.alter_credentials({("alice", "SCRAM-SHA-256"): cred}, set())
    gone = fresh.remove_acls(lambda b: b.name.startswith("t0-"))
    assert len(gone) == 10
    again = AccessStore(Storage.for_url(root))
    st = again.state()
    assert len(st.acls) == 30 and st.users["alice"]["SCRAM-SHA-256"] == cred
    # the root holds the hashed keys only
    for f in (tmp_path / "root").rglob("*.json"):
        assert b"hunter2" not in f.read_bytes()


def test_a_mixed_request_is_split_and_its_answer_encodes() -> None:
    """Produce and Fetch naming an allowed and a refused topic: only the allowed one reaches
    the handler; the refused one is answered per partition; the whole answer encodes."""
    import asyncio

    from kio.schema.fetch.v12 import request as fr
    from kio.schema.produce.v9 import request as pr
    from kio.static.primitive import i32, i64
    from txnlog.coordinator.access import kafka_authz
    from txnlog.coordinator.access.sasl import Subject
    from txnlog.coordinator.gateway import codec

    az = Authorizer([acl(T, "ok", Operation.ALL)])
    seen: list[list[str]] = []

    def handler(key: int) -> object:
        async def call(body: object) -> dict[str, object]:
            if key == 0:
                names = [t.name for t in body.topic_data]  # type: ignore[attr-defined]
                seen.append(names)
                return {"throttle_time": 0, "responses": [
                    {"name": n, "partition_responses": [
                        {**codec.blank(codec.response_class(0, 9), 0,
                                       ("responses", "partition_responses")), "index": 0}]}
                    for n in names]}
            names = [t.topic for t in body.topics]  # type: ignore[attr-defined]
            seen.append(names)
            return {**codec.blank(codec.response_class(1, 12), 0), "responses": []}
        return call

    produce = pr.ProduceRequest(transactional_id=None, acks=-1, timeout=i32(1000), topic_data=(
        pr.TopicProduceData(name="ok", partition_data=(pr.PartitionProduceData(
            index=i32(0), records=b""),)),
        pr.TopicProduceData(name="secret", partition_data=(
            pr.PartitionProduceData(index=i32(0), records=b""),
            pr.PartitionProduceData(index=i32(1), records=b"")))))
    fetch = fr.FetchRequest(
        cluster_id=None, replica_id=i32(-1), max_wait=i32(0), min_bytes=i32(1),
        max_bytes=i32(1 << 20), isolation_level=1, session_id=i32(0), session_epoch=i32(-1),
        topics=tuple(fr.FetchTopic(topic=n, partitions=(fr.FetchPartition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
            last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
            partition_max_bytes=i32(1 << 20)),)) for n in ("secret", "ok")),
        forgotten_topics_data=(), rack_id="")
    for key, version, body in ((0, 9, produce), (1, 12, fetch)):
        resp_cls = codec.response_class(key, version)
        g = kafka_authz.Guard(Subject(ALICE, "h"), az, handler(key),  # type: ignore[arg-type]
                              lambda path, code, c=resp_cls: codec.blank(c, code, path))
        out = asyncio.run(kafka_authz.guard(key, version, body, g))
        assert seen[-1] == ["ok"]
        assert out is not None
        codec.encode_response(resp_cls, 1, codec.build(resp_cls, out))
        refused = [t for t in out["responses"] if t.get("name", t.get("topic")) == "secret"]
        parts = refused[0]["partition_responses" if key == 0 else "partitions"]
        assert {p["error_code"] for p in parts} == {29}
        assert len(parts) == (2 if key == 0 else 1)


def test_a_corrupt_state_object_keeps_the_last_good_state(tmp_path: Path) -> None:
    """A bad object in the chain (a bug, a hand edit): readers keep deciding with the last
    good state; a reader that never read one refuses (fails closed)."""
    from txnlog.coordinator.access.store import DIR, StoreError

    root = f"file://{tmp_path / 'root'}"
    storage = Storage.for_url(root)
    store = AccessStore(storage, refresh_s=0.0)
    store.add_acls([acl(T, "orders", Operation.READ)])
    assert len(store.state().acls) == 1
    storage.put_if_absent(f"{DIR}/{2:020d}.json", b"{not json")
    assert len(store.state().acls) == 1
    with pytest.raises(StoreError, match="not a valid access state"):
        AccessStore(Storage.for_url(root)).state()
