"""The topic lifecycle operations a broker answers Kafka's tools: DeleteRecords
(``kafka-delete-records``) and IncrementalAlterConfigs (``kafka-configs --alter``), and
the auto-creation of topics clients name (``auto.create.topics.enable``).

Each is a record in the coordinator's log, so a restart replays it, and each is published
where readers and tools look — a manifest carrying the new log start offset
(``log_retention``), the topic's metadata object carrying the new configs — before it is
answered.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from txnlog.log_format import topics

from ..errors import (
    ConcurrentTransactionsError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
    validate_topic_name,
)
from ..state.txn_log_records import LogRecord
from ..topic_config import (
    DEFAULTS,
    LIST_CONFIGS,
    TOPIC_CONFIGS,
    check_values,
    validate_topic_config,
)

if TYPE_CHECKING:
    from ..transaction.transaction_coordinator import TransactionCoordinator

Reply = dict[str, Any]


async def delete_records(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """DeleteRecords: ``partitions: [{topic, partition, offset}]`` (offset -1: the high
    watermark). Answers each partition's new low watermark (its log start offset)."""
    parts = [(validate_topic_name(p["topic"]), int(p["partition"]), int(p["offset"]))
             for p in b["partitions"]]
    timeout_s = int(b.get("timeout_ms", 60_000)) / 1000.0
    return {"partitions": await e.retention.delete_records(parts, timeout_s)}


async def alter_configs(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """IncrementalAlterConfigs of one topic: ``set`` (SET), ``delete`` (DELETE: back to
    the default), ``append`` and ``subtract`` (APPEND/SUBTRACT of list items, for list
    configs); ``replace``: AlterConfigs, every config not in ``set`` goes back to its
    default. Every entry is checked as CreateTopics checks them (unknown names and bad
    values refused, nothing changed); ``validate_only`` checks and changes nothing.

    The new configs are computed from the coordinator's state and logged with no await in
    between (the log record is applied to the state as it is queued), so alterations of
    one topic apply one after the other, each to what the one before left: two at once
    never lose either's change. APPEND/SUBTRACT are computed here for that reason (a
    client reading the configs and sending a SET could lose a concurrent change). Answers
    the topic's configs after the change."""
    name = validate_topic_name(b["name"])
    if name not in e.state.topics:
        try:
            await e.io.call(topics.read_topic, e.storage, name)
        except topics.UnknownTopicError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
        await e.describe_topic(name)  # the coordinator learns it (a topic record)
    set_cfg = validate_topic_config({str(k): str(v) for k, v in (b.get("set") or {}).items()})
    delete = [str(x) for x in b.get("delete") or []]
    lists = {op: {str(k): [x.strip() for x in str(v).split(",") if x.strip()]
                  for k, v in (b.get(op) or {}).items()} for op in ("append", "subtract")}
    unknown = [x for x in [*delete, *lists["append"], *lists["subtract"]]
               if x not in TOPIC_CONFIGS]
    if unknown:
        raise InvalidConfigError(f"unknown topic config {unknown[0][:100]!r}; known: "
                                 f"{', '.join(sorted(TOPIC_CONFIGS))}")
    for op, given in lists.items():
        not_list = sorted(k for k in given if k not in LIST_CONFIGS)
        if not_list:
            raise InvalidRequestError(f"Config value {op} is not allowed for config key: "
                                      f"{not_list[0]}")
    both = sorted(set(set_cfg) & set(delete))
    if both:
        raise InvalidConfigError(f"topic config {both[0]!r} is both set and deleted")
    named = [*set_cfg, *delete, *lists["append"], *lists["subtract"]]
    twice = sorted({k for k in named if named.count(k) > 1})
    if twice:
        raise InvalidConfigError(f"topic config {twice[0]!r} is altered more than once")
    current = dict(e.state.topics[name].get("config", {}))
    config = {} if b.get("replace") else {k: v for k, v in current.items()
                                          if k not in delete}
    config.update(set_cfg)
    for k, given in lists["append"].items():
        have = _items(current.get(k, DEFAULTS.get(k, "")))
        config[k] = ",".join(have + [x for x in given if x not in have])
    for k, given in lists["subtract"].items():
        left = [x for x in _items(current.get(k, DEFAULTS.get(k, ""))) if x not in given]
        if not left:
            raise InvalidConfigError(f"{k} would be an empty list")
        config[k] = ",".join(left)
    check_values(validate_topic_config(config))
    if not b.get("validate_only") and config != current:
        await e.commits.commit([LogRecord("topic_config", {"id": name, "name": name,
                                                           "config": config})])
        await _publish_topic_meta(e, name)
        e.merger.kick()
    return {"name": name, "config": config}


def _items(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


async def delete_topic(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """DeleteTopics: the topic is gone for every request once answered (its metadata object
    is deleted, the coordinator forgets it); its objects are deleted in the background
    (``LogRetention.finish_deletes``), and until then CreateTopics of the name is refused,
    as Kafka's "marked for deletion". A topic with a transaction open in it is refused
    (retriable): its markers must land first."""
    name = validate_topic_name(b["name"])
    if name.startswith("__"):
        raise InvalidRequestError(f"topic {name!r} is internal and cannot be deleted")
    meta = e.state.topics.get(name)
    if meta is None:
        try:
            tm = await e.io.call(topics.read_topic, e.storage, name)
        except topics.UnknownTopicError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
        n = tm.partitions
    else:
        n = int(meta["partitions"])
    busy = sorted({t.tid for t in e.state.txns.values() if not t.state.is_idle
                   and any(key.rsplit("-", 1)[0] == name for key in t.partitions)})
    if busy:
        raise ConcurrentTransactionsError(
            f"topic {name!r} has open transactions ({', '.join(busy[:5])}); retry once they "
            "end")
    await e.commits.commit([LogRecord("topic_delete", {"id": name, "name": name,
                                                       "partitions": n})])
    await e.io.call(_delete_meta, e.storage, name)
    e.merger.kick()
    return {"name": name, "partitions": n}


async def create_partitions(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """CreatePartitions: grow a topic to ``total`` partitions (never shrink, as Kafka).
    The new count is in the coordinator's log, then in the topic's metadata object, where
    producers (``PartitionCounts``: keyed records follow ``murmur2(key) % n``), readers and
    running streams (new partitions from ``earliest``) find it."""
    name = validate_topic_name(b["name"])
    total = int(b["total"])
    if name in e.state.topics_deleting:
        raise UnknownTopicOrPartitionError(f"topic {name!r} is marked for deletion")
    try:
        await e.describe_topic(name)  # the coordinator knows it (a topic record)
    except topics.UnknownTopicError:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
    meta = e.state.topics[name]
    n = int(meta["partitions"])
    if total == n:
        raise InvalidPartitionsError(f"topic {name!r} already has {n} partitions")
    if total < n:
        raise InvalidPartitionsError(f"topic {name!r} currently has {n} partitions, which is "
                                     f"higher than the requested {total}")
    if total > topics.MAX_PARTITIONS:
        raise InvalidPartitionsError(f"partitions must be at most {topics.MAX_PARTITIONS}")
    if not b.get("validate_only"):
        await e.commits.commit([LogRecord("topic", {
            "id": name, "name": name, "partitions": total,
            "config": dict(meta.get("config") or {})})])
        await _publish_topic_meta(e, name)
        await e.request_stable()
    return {"name": name, "partitions": total}


def _delete_meta(storage: Any, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        storage.delete(topics.topic_meta_path(name))


async def _publish_topic_meta(e: TransactionCoordinator, name: str) -> None:
    """rewrite_topic_meta from the state as it is when this rewrite's turn comes: one at a
    time, so of two changes at once the later write carries both (two writes in
    threads could land in either order)."""
    async with e.topic_meta_lock:
        meta = e.state.topics.get(name)
        if meta is not None:
            await e.io.call(rewrite_topic_meta, e.storage, name, dict(meta))


def rewrite_topic_meta(storage: Any, name: str, meta: dict[str, Any]) -> None:
    """``_meta/topics/<t>.json`` as the coordinator's state says (configs altered,
    partitions added): the coordinator is the one writer of a root, fenced by its log, and
    its log record is written first, so a crash between the two is repaired by the next
    change (tools reading storage see the configs of the log's previous change until then)."""
    old = topics.read_topic(storage, name)
    new = topics.TopicMeta(name, int(meta["partitions"]), dict(meta.get("config") or {}),
                           old.created_ms, old.topic_id)
    storage.put(topics.topic_meta_path(name), new.to_json())


# ----------------------------------------------------------------- auto-creation
@dataclass
class AutoCreate:
    """Kafka's ``auto.create.topics.enable`` and ``num.partitions`` of one coordinator,
    set by ``txnlog coordinator --auto-create-topics-enable/--num-partitions``: decided
    here, so every gateway of the root agrees."""

    enabled: bool = True
    num_partitions: int = 1


_AUTO_CREATE: weakref.WeakKeyDictionary[Any, AutoCreate] = weakref.WeakKeyDictionary()


def set_auto_create(e: TransactionCoordinator, settings: AutoCreate) -> None:
    _AUTO_CREATE[e] = settings


async def auto_create_topic(e: TransactionCoordinator, b: dict[str, Any]) -> Reply:
    """A gateway's auto-creation of a topic a client named (Metadata, Produce): created
    with ``partitions`` (the gateway's ``num.partitions``, else the coordinator's) and
    default configs, exclusively (``create_topic``: one topic id), when this coordinator
    allows auto-creation; an existing topic is answered as it is. Refused
    (UnknownTopicOrPartition, what Kafka answers then) when it does not, and for internal
    (``__``) names, which the coordinator creates with their own shapes."""
    name = validate_topic_name(b["name"])
    settings = _AUTO_CREATE.get(e) or AutoCreate()
    if name in e.state.topics:
        return await e.describe_topic(name)
    if not settings.enabled or name.startswith("__"):
        why = "auto.create.topics.enable is false on the coordinator" \
            if not settings.enabled else "internal topics are not auto-created"
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist ({why})")
    n = b.get("partitions") or settings.num_partitions
    return await e.create_topic(name, int(n), {}, exist_ok=True)


ADMIN_TOPIC_OPERATIONS: dict[str, Callable[[TransactionCoordinator, dict[str, Any]],
                                           Awaitable[Any]]] = {
    "delete_records": delete_records, "alter_configs": alter_configs,
    "delete_topic": delete_topic, "create_partitions": create_partitions,
    "auto_create_topic": auto_create_topic,
}
