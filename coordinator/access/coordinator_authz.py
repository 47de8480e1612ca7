"""Principals and ACLs for the coordinator's HTTP API (``txnlog coordinator --principals``).

A request's bearer token is either the shared coordinator token (its holder is a super
user: gateways, operators) or a token bound to a principal in the root (``txnlog
principal-tokens``, kept as SHA-256 digests). Each operation then needs what Kafka's
matching API needs: a producer's reserve and confirm WRITE on each topic, a transactional
id's operations WRITE on it, ``add_offsets`` READ on the group and its topics, topic
creation CREATE on the cluster or the topic. Operations that only gateways and operators
use (a gateway's flush, groups, Kafka transactions, admin) need a super user.

What this cannot guard: producers write their data objects to storage themselves, so a
principal's storage credentials decide what it can write; ACLs decide what the
coordinator will commit (a refused reserve or confirm leaves nothing visible).
"""

from __future__ import annotations

import hmac
from typing import Any

from txnlog.log_format import layout

from ..errors import (
    ClusterAuthorizationFailedError,
    CoordinatorError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from . import audit
from .model import CLUSTER_NAME, Operation
from .model import ResourceType as RT
from .sasl import Subject
from .store import AccessStore, token_digest

SHARED_PRINCIPAL = "User:coordinator-token"
TXN_OPS = ("add_member", "heartbeat", "end_txn", "begin_batch")


class CoordinatorGuard:
    """Who a request is, and whether it may run its operation."""

    def __init__(self, store: AccessStore, shared_token: bytes | None,
                 super_users: frozenset[str] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store, self.shared_token = store, shared_token
        self.super_users = super_users
        self.allow_everyone = allow_everyone_if_no_acl_found

    def __repr__(self) -> str:  # never the token
        return f"CoordinatorGuard(super_users={sorted(self.super_users)})"

    def subject(self, authorization: str | None, host: str) -> Subject | None:
        """The request's subject; None: no token, or one nobody holds (storage I/O)."""
        if not authorization:
            return None
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = given.strip().encode("utf-8", "replace")
        if self.shared_token is not None and hmac.compare_digest(token, self.shared_token):
            return Subject(SHARED_PRINCIPAL, host, True)
        principal = self.store.state().tokens.get(token_digest(token))
        if principal is None:
            return None
        return Subject(principal, host, principal in self.super_users)

    def _exists(self, topic: str) -> bool:
        try:
            return self.store.storage.exists(layout.topic_meta_path(topic))
        except (ValueError, OSError):
            return False

    def refusal(self, subject: Subject, op: str, body: Any) -> CoordinatorError | None:
        """None when ``subject`` may run ``op`` with ``body``, else the error to answer
        (storage I/O: call off the event loop)."""
        if subject.super_user:
            return None
        az = self.store.authorizer(self.super_users, self.allow_everyone)
        b = body if isinstance(body, dict) else {}

        def ok(oper: Operation, rtype: RT, name: object) -> bool:
            return isinstance(name, str) and az.authorize(subject.principal, subject.host,
                                                          oper, rtype, name)

        def topics(key: str) -> list[object]:
            items = b.get(key)
            return [p.get("topic") if isinstance(p, dict) else None
                    for p in (items if isinstance(items, list) else [])]

        tid = b.get("transactional_id")
        if op == "init_producer_id":
            if tid is not None:
                return None if ok(Operation.WRITE, RT.TRANSACTIONAL_ID, tid) else \
                    TransactionalIdAuthorizationFailedError(f"WRITE on transactional id {tid}")
            if az.allowed(subject.principal, subject.host, Operation.IDEMPOTENT_WRITE,
                          RT.CLUSTER, CLUSTER_NAME) or az.any_of_type(
                    subject.principal, subject.host, Operation.WRITE, RT.TOPIC):
                return None
            audit.refused(subject.principal, subject.host, "IDEMPOTENT_WRITE",
                          f"CLUSTER:{CLUSTER_NAME}")
            return ClusterAuthorizationFailedError("IDEMPOTENT_WRITE on the cluster")
        if op in ("reserve", "confirm"):
            bad = sorted({str(t) for t in topics("partitions")
                          if not ok(Operation.WRITE, RT.TOPIC, t)})
            return TopicAuthorizationFailedError(f"WRITE on topics {bad}") if bad else None
        if op in TXN_OPS:
            return None if ok(Operation.WRITE, RT.TRANSACTIONAL_ID, tid) else \
                TransactionalIdAuthorizationFailedError(f"WRITE on transactional id {tid}")
        if op == "add_offsets":
            if not ok(Operation.WRITE, RT.TRANSACTIONAL_ID, tid):
                return TransactionalIdAuthorizationFailedError(
                    f"WRITE on transactional id {tid}")
            if not ok(Operation.READ, RT.GROUP, b.get("group_id")):
                return GroupAuthorizationFailedError(f"READ on group {b.get('group_id')}")
            bad = sorted({str(t) for t in topics("offsets") if not ok(Operation.READ,
                                                                       RT.TOPIC, t)})
            return TopicAuthorizationFailedError(f"READ on topics {bad}") if bad else None
        if op == "committed_offsets":
            return None if ok(Operation.DESCRIBE, RT.GROUP, b.get("group_id")) else \
                GroupAuthorizationFailedError(f"DESCRIBE on group {b.get('group_id')}")
        if op == "describe_txn":
            return None if ok(Operation.DESCRIBE, RT.TRANSACTIONAL_ID, tid) else \
                TransactionalIdAuthorizationFailedError(f"DESCRIBE on transactional id {tid}")
        if op == "create_topic":
            name = b.get("name")
            if b.get("exist_ok") and isinstance(name, str) and self._exists(name):
                # "make sure it exists" (a Spark write's first step) of an existing topic
                # creates nothing: DESCRIBE (which WRITE implies) is enough
                return None if ok(Operation.DESCRIBE, RT.TOPIC, name) else \
                    TopicAuthorizationFailedError(f"DESCRIBE on topic {name}")
            if az.allowed(subject.principal, subject.host, Operation.CREATE, RT.CLUSTER,
                          CLUSTER_NAME) or ok(Operation.CREATE, RT.TOPIC, b.get("name")):
                return None
            return TopicAuthorizationFailedError(f"CREATE on topic {b.get('name')}")
        if op == "describe_topic":
            return None if ok(Operation.DESCRIBE, RT.TOPIC, b.get("name")) else \
                TopicAuthorizationFailedError(f"DESCRIBE on topic {b.get('name')}")
        if op == "stable":
            return None  # offsets only, as the root's _stable/ objects hold them
        if ok(Operation.ALTER, RT.CLUSTER, CLUSTER_NAME):
            return None  # gateway and admin operations: ALTER on the cluster
        return ClusterAuthorizationFailedError(f"{op} needs ALTER on the cluster")
