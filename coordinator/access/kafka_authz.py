"""Which operation on which resource each Kafka API needs, and what a refusal answers.

Kafka's per-API rules (KafkaApis, AuthHelper): a request naming several topics (Produce,
Fetch, OffsetCommit, CreateTopics, ...) is split: the items the principal may act on go to
the gateway's handler, the others are answered with the resource's code
(TOPIC_AUTHORIZATION_FAILED, GROUP_..., TRANSACTIONAL_ID_..., CLUSTER_...) and never reach
the handler, so a refused item changes nothing. A check on the request's one group or
transactional id refuses the whole request. Metadata for all topics omits the topics the
principal may not describe; ListGroups and ListTransactions are filtered the same way.
Auto-creation (Metadata, and the gateway's Produce) needs CREATE on the cluster or the topic:
the check reaches the gateway's auto-creation through ``MAY_CREATE``, so only a topic that
does not exist is checked, as Kafka checks it. The "authorized operations" bit fields
(Metadata, DescribeGroups, DescribeCluster) report what the principal may do.

This module knows requests by their kio field names only; the gateway passes in ``call``
(its handler) and ``blank`` (a response, or a nested item of one, with every error code
set), so the access package never imports the gateway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .authorizer import Authorizer
from .model import CLUSTER_NAME, Operation
from .model import ResourceType as RT
from .sasl import Subject

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
CODE_OF = {RT.TOPIC: TOPIC_AUTHORIZATION_FAILED, RT.GROUP: GROUP_AUTHORIZATION_FAILED,
           RT.CLUSTER: CLUSTER_AUTHORIZATION_FAILED,
           RT.TRANSACTIONAL_ID: TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
# DescribeConfigs/AlterConfigs resource types: 2 topic, 4 broker, 8 broker logger, 32 group
CONFIG_TYPES = {2: RT.TOPIC, 4: RT.CLUSTER, 8: RT.CLUSTER, 32: RT.GROUP}
NOT_REQUESTED = -2147483648  # Kafka's "authorized operations not requested"
# Kafka's AclEntry.supportedOperations: the bits an "authorized operations" field may hold
SUPPORTED_OPERATIONS: dict[RT, tuple[Operation, ...]] = {
    RT.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                 Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                 Operation.DESCRIBE),
    RT.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
               Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
               Operation.ALTER_CONFIGS),
    RT.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    RT.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


class CreateRefused(Exception):
    """An unknown topic the principal may not create (no CREATE on the cluster nor on the
    topic): answered TOPIC_AUTHORIZATION_FAILED, and nothing is created."""


# Set while an authorized request runs: may this request auto-create the topic it names?
# (None: no authorizer, or a super user.) The gateway asks it only for a topic that does
# not exist, just before creating it, so an existing topic needs no CREATE.
MAY_CREATE: ContextVar[Callable[[str], bool] | None] = ContextVar("txnlog_may_create",
                                                                   default=None)


def check_auto_create(topic: str) -> None:
    """Raise ``CreateRefused`` if the running request may not auto-create ``topic``."""
    may = MAY_CREATE.get()
    if may is not None and not may(topic):
        raise CreateRefused(f"not authorized to create topic {topic!r}")

Call = Callable[[Any], Awaitable[dict[str, Any] | None]]
Blank = Callable[[tuple[str, ...], int], dict[str, Any]]


@dataclass(frozen=True)
class Items:
    """Where a request lists its resources and where the response answers each one."""

    req: str                        # the request's list of items
    resp: str                       # the response's list of answers
    name: str | None                # an item's name field (None: the items are names)
    resp_name: str                  # an answer's name field
    parts: str | None = None        # an item's partitions (None: no partitions)
    part: str | None = None         # a partition's index field (None: plain ints)
    resp_parts: str | None = None
    resp_part: str | None = None
    copy: tuple[str, ...] = ()      # fields copied from the item to its answer


class Guard:
    """One request's checks: who asks, with which ACLs, and how the gateway answers."""

    def __init__(self, subject: Subject, az: Authorizer, call: Call, blank: Blank) -> None:
        self.subject, self.az, self.call, self.blank = subject, az, call, blank

    def ok(self, op: Operation, rtype: RT, name: str | None) -> bool:
        if self.subject.super_user:
            return True
        return self.az.authorize(self.subject.principal, self.subject.host, op, rtype,
                                 name if name is not None else "")

    def cluster_ok(self, op: Operation) -> bool:
        return self.ok(op, RT.CLUSTER, CLUSTER_NAME)

    def quiet_ok(self, op: Operation, rtype: RT, name: str) -> bool:
        """For filtering listings: an omitted item is not a refusal worth logging."""
        return self.subject.super_user or self.az.allowed(
            self.subject.principal, self.subject.host, op, rtype, name)

    def may_create(self, topic: str) -> bool:
        """Kafka's auto-creation check: CREATE on the cluster (not logged), else CREATE
        on the topic (a refusal logged)."""
        return self.quiet_ok(Operation.CREATE, RT.CLUSTER, CLUSTER_NAME) or self.ok(
            Operation.CREATE, RT.TOPIC, topic)

    def authorized_ops(self, rtype: RT, name: str) -> int:
        """Kafka's AuthHelper.authorizedOperations: a bit per operation the resource type
        supports that the principal may do on this resource (implied ones included)."""
        return sum(1 << int(op) for op in SUPPORTED_OPERATIONS[rtype]
                   if self.quiet_ok(op, rtype, name))

    def cluster_ops(self) -> int:
        """The cluster's bit field as Metadata v8-v10 and DescribeCluster answer it: 0
        without DESCRIBE on the cluster."""
        if not self.quiet_ok(Operation.DESCRIBE, RT.CLUSTER, CLUSTER_NAME):
            return 0
        return self.authorized_ops(RT.CLUSTER, CLUSTER_NAME)

    # ---- the engine -------------------------------------------------------------------
    def _answer(self, it: Items, item: Any, code: int) -> dict[str, Any]:
        d = self.blank((it.resp,), code)
        d[it.resp_name] = item if it.name is None else getattr(item, it.name)
        for f in it.copy:
            d[f] = getattr(item, f)
        if it.parts is not None and it.resp_parts is not None and it.resp_part is not None:
            parts = getattr(item, it.parts) or ()
            d[it.resp_parts] = [
                {**self.blank((it.resp, it.resp_parts), code),
                 it.resp_part: p if it.part is None else getattr(p, it.part)}
                for p in parts]
        return d

    def refuse_all(self, body: Any, it: Items | None, code: int) -> dict[str, Any]:
        """The whole request refused: every item answered with ``code`` (the request's own
        error code too when it has no items)."""
        out = self.blank((), code if it is None else 0)
        if it is not None:
            out[it.resp] = [self._answer(it, x, code) for x in getattr(body, it.req) or ()]
        return out

    async def split(self, body: Any, it: Items, decide: Callable[[Any], int | None],
                    all_or_nothing: bool = False) -> dict[str, Any] | None:
        """Items ``decide`` refuses (returns a code) answered here; the rest handled."""
        items = list(getattr(body, it.req) or ())
        codes = [decide(x) for x in items]
        if not any(codes):
            return await self.call(body)
        if all_or_nothing:  # AddPartitionsToTxn: one refusal fails the transaction
            out = self.blank((), 0)
            out[it.resp] = [self._answer(it, x, c or OPERATION_NOT_ATTEMPTED)
                            for x, c in zip(items, codes, strict=True)]
            return out
        allowed = [x for x, c in zip(items, codes, strict=True) if not c]
        denied = [self._answer(it, x, c) for x, c in zip(items, codes, strict=True) if c]
        if not allowed:
            out = self.blank((), 0)
        else:
            got = await self.call(dataclasses.replace(body, **{it.req: tuple(allowed)}))
            if got is None:
                return None
            out = got
        out[it.resp] = [*list(out.get(it.resp) or ()), *denied]
        return out

    def topic(self, op: Operation, attr: str = "name") -> Callable[[Any], int | None]:
        def decide(x: Any) -> int | None:
            name = x if isinstance(x, str) else getattr(x, attr)
            return None if self.ok(op, RT.TOPIC, name) else TOPIC_AUTHORIZATION_FAILED
        return decide


# ---- the item layouts of the APIs ---------------------------------------------------------
PRODUCE = Items("topic_data", "responses", "name", "name", "partition_data", "index",
                "partition_responses", "index")
FETCH = Items("topics", "responses", "topic", "topic", "partitions", "partition",
              "partitions", "partition_index")
LIST_OFFSETS = Items("topics", "topics", "name", "name", "partitions", "partition_index",
                     "partitions", "partition_index")
OFFSET_COMMIT = Items("topics", "topics", "name", "name", "partitions", "partition_index",
                      "partitions", "partition_index")
OFFSET_FETCH = Items("topics", "topics", "name", "name", "partition_indexes", None,
                     "partitions", "partition_index")
METADATA = Items("topics", "topics", "name", "name")
DESCRIBE_GROUPS = Items("groups", "groups", None, "group_id")
DELETE_GROUPS = Items("groups_names", "results", None, "group_id")
CREATE_TOPICS = Items("topics", "topics", "name", "name")
DELETE_TOPICS_V6 = Items("topics", "responses", "name", "name")
DELETE_TOPICS = Items("topic_names", "responses", None, "name")
DELETE_RECORDS = Items("topics", "topics", "name", "name", "partitions", "partition_index",
                       "partitions", "partition_index")
CREATE_PARTITIONS = Items("topics", "results", "name", "name")
CONFIGS = Items("resources", "results", "resource_name", "resource_name",
                copy=("resource_type",))
ALTER_CONFIGS = Items("resources", "responses", "resource_name", "resource_name",
                      copy=("resource_type",))
OFFSET_DELETE = Items("topics", "topics", "name", "name", "partitions", "partition_index",
                      "partitions", "partition_index")
DESCRIBE_PRODUCERS = Items("topics", "topics", "name", "name", "partition_indexes", None,
                           "partitions", "partition_index")
DESCRIBE_TXNS = Items("transactional_ids", "transaction_states", None, "transactional_id")
FIND_COORDINATOR = Items("coordinator_keys", "coordinators", None, "key")


def _first(body: Any, *names: str) -> Any:
    for n in names:
        if hasattr(body, n):
            return getattr(body, n)
    return None


def add_partitions_items(body: Any) -> Items:
    prefix = "v3_and_below_" if hasattr(body, "v3_and_below_topics") else ""
    return Items(f"{prefix}topics", "results_by_topic_v3_and_below", "name", "name",
                 "partitions", None, "results_by_partition", "partition_index")


# ---- per API ------------------------------------------------------------------------------
async def _metadata(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    topics = body.topics
    if topics is None or (version == 0 and not topics):
        out = await g.call(body)  # all topics: those the principal may not describe omitted
        if out is not None:
            out["topics"] = [t for t in out.get("topics") or ()
                             if g.quiet_ok(Operation.DESCRIBE, RT.TOPIC, _get(t, "name"))]
        return _metadata_ops(g, body, version, out)
    # auto-creation of a named, unknown topic: CREATE checked by the gateway (MAY_CREATE)
    decide = g.topic(Operation.DESCRIBE)
    codes = [decide(t) for t in topics]
    if not any(codes):
        return _metadata_ops(g, body, version, await g.call(body))
    allowed = tuple(t for t, c in zip(topics, codes, strict=True) if not c)
    # always the handler: the answer carries the brokers (v0 reads no topics as all)
    out = _metadata_ops(g, body, version, await g.call(dataclasses.replace(body, topics=allowed)))
    if out is None:
        return None
    if not allowed:
        out["topics"] = []
    out["topics"] = [*list(out.get("topics") or ()),
                     *({**g._answer(METADATA, t, c), "topic_authorized_operations": NOT_REQUESTED}
                       for t, c in zip(topics, codes, strict=True) if c)]
    return out


def _metadata_ops(g: Guard, body: Any, version: int, out: dict[str, Any] | None
                  ) -> dict[str, Any] | None:
    """The principal's authorized operations where Metadata asks for them (KafkaApis: the
    cluster's from v8 to v10, the described topics' from v8)."""
    if out is None or version < 8:
        return out
    if getattr(body, "include_cluster_authorized_operations", False) and version <= 10:
        out["cluster_authorized_operations"] = g.cluster_ops()
    if getattr(body, "include_topic_authorized_operations", False):
        for t in out.get("topics") or ():  # not the ones refused creation (as Kafka)
            if isinstance(t, dict) and t.get("name") is not None and \
                    t.get("error_code") != TOPIC_AUTHORIZATION_FAILED:
                t["topic_authorized_operations"] = g.authorized_ops(RT.TOPIC, t["name"])
    return out


def _get(x: Any, name: str) -> Any:
    return x.get(name) if isinstance(x, dict) else getattr(x, name, None)


def _group(g: Guard, op: Operation, group: str) -> bool:
    return g.ok(op, RT.GROUP, group)


def _txn(g: Guard, tid: str | None) -> bool:
    return tid is not None and g.ok(Operation.WRITE, RT.TRANSACTIONAL_ID, tid)


async def _produce(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    tid = getattr(body, "transactional_id", None)
    if tid is not None and not _txn(g, tid):
        return g.refuse_all(body, PRODUCE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return await g.split(body, PRODUCE, g.topic(Operation.WRITE))


async def _fetch(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if getattr(body, "replica_id", -1) >= 0 and not g.cluster_ok(Operation.CLUSTER_ACTION):
        return g.refuse_all(body, FETCH, TOPIC_AUTHORIZATION_FAILED)
    return await g.split(body, FETCH, g.topic(Operation.READ, "topic"))


async def _init_producer_id(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    tid = body.transactional_id
    if tid is not None:
        if not _txn(g, tid):
            return g.refuse_all(body, None, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not (g.quiet_ok(Operation.IDEMPOTENT_WRITE, RT.CLUSTER, CLUSTER_NAME) or
              g.az.any_of_type(g.subject.principal, g.subject.host, Operation.WRITE,
                               RT.TOPIC)):
        g.cluster_ok(Operation.IDEMPOTENT_WRITE)  # the refusal, audited
        return g.refuse_all(body, None, CLUSTER_AUTHORIZATION_FAILED)
    return await g.call(body)


async def _offset_commit(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if not _group(g, Operation.READ, body.group_id):
        return g.refuse_all(body, OFFSET_COMMIT, GROUP_AUTHORIZATION_FAILED)
    return await g.split(body, OFFSET_COMMIT, g.topic(Operation.READ))


async def _txn_offset_commit(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if not _txn(g, body.transactional_id):
        return g.refuse_all(body, OFFSET_COMMIT, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not _group(g, Operation.READ, body.group_id):
        return g.refuse_all(body, OFFSET_COMMIT, GROUP_AUTHORIZATION_FAILED)
    return await g.split(body, OFFSET_COMMIT, g.topic(Operation.READ))


async def _offset_fetch(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if not _group(g, Operation.DESCRIBE, body.group_id):
        out = g.blank((), GROUP_AUTHORIZATION_FAILED)
        out["topics"] = [g._answer(OFFSET_FETCH, t, GROUP_AUTHORIZATION_FAILED)
                         for t in body.topics or ()]
        return out
    if body.topics is None:  # all of the group's topics: the undescribable dropped
        out = await g.call(body)
        if out is not None:
            out["topics"] = [t for t in out.get("topics") or ()
                             if g.quiet_ok(Operation.DESCRIBE, RT.TOPIC, _get(t, "name"))]
        return out
    return await g.split(body, OFFSET_FETCH, g.topic(Operation.DESCRIBE))


async def _find_coordinator(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    rtype = RT.TRANSACTIONAL_ID if getattr(body, "key_type", 0) == 1 else RT.GROUP

    def decide(key: str) -> int | None:
        return None if g.ok(Operation.DESCRIBE, rtype, key) else CODE_OF[rtype]
    if version < 4:
        code = decide(body.key)
        return g.refuse_all(body, None, code) if code else await g.call(body)
    return await g.split(body, FIND_COORDINATOR, decide)


def _whole_group(op: Operation) -> Callable[[Guard, Any, int], Awaitable[Any]]:
    async def check(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
        if not _group(g, op, body.group_id):
            return g.refuse_all(body, None, GROUP_AUTHORIZATION_FAILED)
        return await g.call(body)
    return check


async def _list_groups(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    out = await g.call(body)
    if out is not None and not g.subject.super_user and not g.az.allowed(
            g.subject.principal, g.subject.host, Operation.DESCRIBE, RT.CLUSTER, CLUSTER_NAME):
        out["groups"] = [x for x in out.get("groups") or ()
                         if g.quiet_ok(Operation.DESCRIBE, RT.GROUP, _get(x, "group_id"))]
    return out


async def _describe_groups(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    out = await g.split(body, DESCRIBE_GROUPS, lambda x: None if _group(
        g, Operation.DESCRIBE, x) else GROUP_AUTHORIZATION_FAILED)
    if out is not None:
        for grp in out.get("groups") or ():
            asked = getattr(body, "include_authorized_operations", False)
            grp["authorized_operations"] = g.authorized_ops(RT.GROUP, grp["group_id"]) \
                if asked and grp.get("error_code") == 0 else NOT_REQUESTED
    return out


async def _describe_cluster(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    """Answered to anyone (a broker's DescribeCluster); the authorized operations are the
    principal's (0 without DESCRIBE on the cluster)."""
    out = await g.call(body)
    if out is not None and getattr(body, "include_cluster_authorized_operations", False):
        out["cluster_authorized_operations"] = g.cluster_ops()
    return out


def _groups(op: Operation, it: Items) -> Callable[[Guard, Any, int], Awaitable[Any]]:
    async def check(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
        return await g.split(body, it, lambda x: None if _group(g, op, x)
                             else GROUP_AUTHORIZATION_FAILED)
    return check


async def _create_topics(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if g.quiet_ok(Operation.CREATE, RT.CLUSTER, CLUSTER_NAME):
        return await g.call(body)
    return await g.split(body, CREATE_TOPICS, g.topic(Operation.CREATE))


async def _delete_topics(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if g.quiet_ok(Operation.DELETE, RT.CLUSTER, CLUSTER_NAME):
        return await g.call(body)
    it = DELETE_TOPICS_V6 if hasattr(body, "topics") else DELETE_TOPICS

    def decide(x: Any) -> int | None:
        name = x if isinstance(x, str) else x.name
        if name is None:  # by id only: the name (and its ACLs) unknown here
            return TOPIC_AUTHORIZATION_FAILED
        ok = g.ok(Operation.DESCRIBE, RT.TOPIC, name) and g.ok(Operation.DELETE, RT.TOPIC,
                                                                 name)
        return None if ok else TOPIC_AUTHORIZATION_FAILED
    return await g.split(body, it, decide)


def _topics(op: Operation, it: Items) -> Callable[[Guard, Any, int], Awaitable[Any]]:
    async def check(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
        return await g.split(body, it, g.topic(op))
    return check


def _configs(op: Operation, it: Items) -> Callable[[Guard, Any, int], Awaitable[Any]]:
    async def check(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
        def decide(r: Any) -> int | None:
            rtype = CONFIG_TYPES.get(int(r.resource_type))
            if rtype is None:
                return None  # the handler refuses a type it does not know
            name = CLUSTER_NAME if rtype is RT.CLUSTER else r.resource_name
            return None if g.ok(op, rtype, name) else CODE_OF[rtype]
        return await g.split(body, it, decide)
    return check


async def _add_partitions(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    it = add_partitions_items(body)
    if not _txn(g, _first(body, "v3_and_below_transactional_id", "transactional_id")):
        return g.refuse_all(body, it, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return await g.split(body, it, g.topic(Operation.WRITE), all_or_nothing=True)


async def _add_offsets(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if not _txn(g, body.transactional_id):
        return g.refuse_all(body, None, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not _group(g, Operation.READ, body.group_id):
        return g.refuse_all(body, None, GROUP_AUTHORIZATION_FAILED)
    return await g.call(body)


async def _end_txn(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if not _txn(g, body.transactional_id):
        return g.refuse_all(body, None, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return await g.call(body)


async def _offset_delete(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    if not _group(g, Operation.DELETE, body.group_id):
        return g.refuse_all(body, OFFSET_DELETE, GROUP_AUTHORIZATION_FAILED)
    return await g.split(body, OFFSET_DELETE, g.topic(Operation.READ))


async def _describe_txns(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    return await g.split(body, DESCRIBE_TXNS, lambda t: None if g.ok(
        Operation.DESCRIBE, RT.TRANSACTIONAL_ID, t) else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


async def _list_txns(g: Guard, body: Any, version: int) -> dict[str, Any] | None:
    out = await g.call(body)
    if out is not None:
        out["transaction_states"] = [
            t for t in out.get("transaction_states") or ()
            if g.quiet_ok(Operation.DESCRIBE, RT.TRANSACTIONAL_ID, _get(t, "transactional_id"))]
    return out


CHECKS: dict[int, Callable[[Guard, Any, int], Awaitable[dict[str, Any] | None]]] = {
    0: _produce, 1: _fetch, 2: _topics(Operation.DESCRIBE, LIST_OFFSETS), 3: _metadata,
    8: _offset_commit, 9: _offset_fetch, 10: _find_coordinator,
    11: _whole_group(Operation.READ), 12: _whole_group(Operation.READ),
    13: _whole_group(Operation.READ), 14: _whole_group(Operation.READ),
    15: _describe_groups, 16: _list_groups,
    19: _create_topics, 20: _delete_topics, 21: _topics(Operation.DELETE, DELETE_RECORDS),
    22: _init_producer_id, 24: _add_partitions, 25: _add_offsets, 26: _end_txn,
    28: _txn_offset_commit, 32: _configs(Operation.DESCRIBE_CONFIGS, CONFIGS),
    33: _configs(Operation.ALTER_CONFIGS, ALTER_CONFIGS),
    37: _topics(Operation.ALTER, CREATE_PARTITIONS),
    42: _groups(Operation.DELETE, DELETE_GROUPS),
    44: _configs(Operation.ALTER_CONFIGS, ALTER_CONFIGS), 47: _offset_delete,
    61: _topics(Operation.READ, DESCRIBE_PRODUCERS), 65: _describe_txns, 66: _list_txns,
    60: _describe_cluster,
}


async def guard(api_key: int, version: int, body: Any, g: Guard) -> dict[str, Any] | None:
    """The answer to one request, authorized. An API without a rule here is refused for
    everyone but super users (a new API is closed until someone writes its rule)."""
    check = CHECKS.get(api_key)
    if check is None:
        if g.subject.super_user:
            return await g.call(body)
        return g.refuse_all(body, None, CLUSTER_AUTHORIZATION_FAILED)
    token = MAY_CREATE.set(None if g.subject.super_user else g.may_create)
    try:
        return await check(g, body, version)
    finally:
        MAY_CREATE.reset(token)
