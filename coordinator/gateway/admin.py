"""Kafka's admin APIs: what AdminClients (confluent-kafka, kafka-python, the Java client and
Kafka's tools) ask a broker to manage topics, configs, groups and transactions. This module
holds the topic and config ones and what every admin handler shares; the group and
transaction ones are in ``admin_groups``.

Every handler is thin: it checks what Kafka's broker checks of the request (duplicates,
shapes, replica assignments), then calls the coordinator operation that ``txnlog topics``,
``txnlog groups`` and ``txnlog transactions`` use (``topic_admin``, ``log_retention``,
``admin_ops``, ``group_membership``), item by item, and answers each item with Kafka's
error code and message. One bad item never fails the others, and nothing a request holds
can fail the connection: an unexpected failure of one item is UNKNOWN_SERVER_ERROR for it.

A coordinator that cannot be reached is NOT_CONTROLLER for the topic operations (Kafka's
admin clients look the controller up again and retry) and COORDINATOR_NOT_AVAILABLE for
the group and transaction ones. Topics have Kafka's ids (given at creation, answered by
CreateTopics and Metadata; DeleteTopics 6 may name a topic by its id) and no replicas:
storage is the replica, so a replication factor of -1 or any positive one is accepted and
the topic answers as replicated once.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import Any

from txnlog.log_format import layout, topics

from ..errors import CoordinatorError, InvalidTopicError
from ..topic_config import check_values, validate_topic_config
from . import admin_configs as C
from . import errors as E
from .backend import Backend
from .codec import ms

log = logging.getLogger("txnlog.gateway.admin")

MAX_ITEMS = 1_000            # topics, resources, groups or transactional ids per request
DEFAULT_PARTITIONS = 1       # Kafka's num.partitions
DELETE_RECORDS_WAIT_MS = 30_000
BROKERS, CONTROLLERS = 1, 2  # DescribeCluster's endpoint types
ZERO_UUID = uuid.UUID(int=0)
NO_OPS = -2147483648         # Kafka's "authorized operations not requested"
TOPIC, BROKER = 2, 4         # DescribeConfigs / AlterConfigs resource types
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations


class _Refused(Exception):
    """One item refused by the gateway's own checks, with Kafka's code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _answer(exc: BaseException, unreachable: int) -> tuple[int, str]:
    """(Kafka error code, message) for an item that failed with ``exc``."""
    if isinstance(exc, _Refused):
        return exc.code, str(exc)
    code = E.code_of(exc)
    if code in (E.NOT_COORDINATOR, E.KAFKA_STORAGE_ERROR):
        return unreachable, f"the coordinator is not available: {exc}"[:1000]
    if not isinstance(exc, CoordinatorError):
        log.warning("admin request item failed", exc_info=exc)
        return E.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"[:1000]
    return code, str(exc)[:1000]


async def _call(backend: Backend, op: str, body: dict[str, Any], held_s: float = 0.0
                ) -> Any:
    """A coordinator call on the ``waits`` pool (a slow or restarting coordinator never
    holds the threads fetches read storage with); ``held_s``: the call may be held that
    long by the coordinator (DeleteRecords waits for the new log start to be published)."""
    client = backend.long_client(held_s) if held_s > 0 else backend.client
    return await backend.wait(client.call, op, body)


class _Calls:
    """The coordinator calls of one request's items: once the coordinator is found
    unreachable (after the client's retries), the remaining items get the same answer at
    once instead of each waiting out the retries again."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.down: BaseException | None = None

    async def __call__(self, op: str, body: dict[str, Any], held_s: float = 0.0) -> Any:
        if self.down is not None:
            raise self.down
        try:
            return await _call(self.backend, op, body, held_s)
        except Exception as exc:
            if E.code_of(exc) == E.NOT_COORDINATOR:
                self.down = exc
            raise


def _too_many(n: int, what: str) -> _Refused | None:
    return _Refused(E.INVALID_REQUEST, f"at most {MAX_ITEMS} {what} per request, not {n}") \
        if n > MAX_ITEMS else None


def _dupes(names: list[Any]) -> set[Any]:
    return {k for k, c in Counter(names).items() if c > 1}


def _topic_meta(backend: Backend, name: str) -> topics.TopicMeta | None:
    """The topic's metadata from storage (never the gateway's cache), None if absent."""
    try:
        layout.validate_topic(name)
    except ValueError:
        raise InvalidTopicError(f"{name[:300]!r} is not a valid topic name") from None
    try:
        return topics.read_topic(backend.storage, name)
    except topics.UnknownTopicError:
        return None


def _name_of_id(backend: Backend, topic_id: uuid.UUID | None) -> str | None:
    """The name of the topic with this id (each topic's metadata read: DeleteTopics by
    id is an admin's rare request), None if none has it."""
    if topic_id is None or topic_id == ZERO_UUID:
        return None
    for name in backend.list_topics():
        meta = _topic_meta(backend, name)
        if meta is not None and meta.topic_id == str(topic_id):
            return name
    return None


# ------------------------------------------------------------------------ CreateTopics
async def create_topics(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    call = _Calls(backend)
    reqs = list(req.topics)
    dupes = _dupes([t.name for t in reqs])
    many = _too_many(len(reqs), "topics")
    out = []
    for t in reqs:
        row: dict[str, Any] = {"name": t.name, "topic_id": ZERO_UUID, "error_code": 0,
                               "error_message": None, "topic_config_error_code": 0,
                               "num_partitions": -1, "replication_factor": -1,
                               "configs": None}
        try:
            if many is not None:
                raise many
            if t.name in dupes:
                raise _Refused(E.INVALID_REQUEST, f"topic {t.name!r} is named more than once")
            n, cfg = _create_checks(t)
            if await backend.run(_topic_meta, backend, t.name) is not None:
                raise _Refused(E.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
            if not req.validate_only:
                meta = await call("create_topic", {
                    "name": t.name, "partitions": n, "config": cfg, "exist_ok": False})
                n, cfg = int(meta["partitions"]), dict(meta["config"])
                backend.forget_topic(t.name)
                made = await backend.run(_topic_meta, backend, t.name)
                if made is not None and made.topic_id:
                    row["topic_id"] = uuid.UUID(made.topic_id)
            row.update(num_partitions=n, replication_factor=1,
                       configs=[{k: e[k] for k in ("name", "value", "read_only",
                                                   "config_source", "is_sensitive")}
                                for e in C.topic_entries(cfg, None, False)])
        except Exception as exc:
            row["error_code"], row["error_message"] = _answer(exc, E.NOT_CONTROLLER)
        out.append(row)
    return {"throttle_time": 0, "topics": out}


def _create_checks(t: Any) -> tuple[int, dict[str, str]]:
    """(partitions, configs) of one CreatableTopic, refused as Kafka's broker refuses."""
    try:
        layout.validate_topic(t.name)
    except ValueError as exc:
        raise _Refused(E.INVALID_TOPIC_EXCEPTION, str(exc)) from None
    n, rf = int(t.num_partitions), int(t.replication_factor)
    if t.assignments:
        if n != -1 or rf != -1:
            raise _Refused(E.INVALID_REQUEST, "both num_partitions or replication_factor "
                                              "and replica assignments were set")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(E.INVALID_REPLICA_ASSIGNMENT,
                           "partitions of a replica assignment must be 0 to n-1, each once")
        if any(not a.broker_ids or len(set(a.broker_ids)) != len(a.broker_ids)
               for a in t.assignments):
            raise _Refused(E.INVALID_REPLICA_ASSIGNMENT,
                           "each partition needs distinct, non-empty replica broker ids")
        n = len(indexes)
    if n == -1:
        n = DEFAULT_PARTITIONS
    if not 1 <= n <= topics.MAX_PARTITIONS:
        raise _Refused(E.INVALID_PARTITIONS,
                       f"number of partitions must be in [1, {topics.MAX_PARTITIONS}], not {n}")
    if rf == 0 or rf < -1:
        raise _Refused(E.INVALID_REPLICATION_FACTOR,
                       f"replication factor must be -1 or larger than 0, not {rf}")
    names = [c.name for c in t.configs]
    if _dupes(names):
        raise _Refused(E.INVALID_REQUEST, f"config {sorted(_dupes(names))[0]!r} is given "
                                          "more than once")
    nulls = [c.name for c in t.configs if c.value is None]
    if nulls:
        raise _Refused(E.INVALID_CONFIG, f"null value not supported for topic config "
                                         f"{nulls[0]!r}")
    cfg = validate_topic_config({c.name: c.value for c in t.configs})
    check_values(cfg)
    return n, cfg


# ------------------------------------------------------------------------ DeleteTopics
async def delete_topics(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    call = _Calls(backend)
    if version >= 6:
        items = [(t.name, t.topic_id) for t in req.topics]
    else:
        items = [(name, None) for name in req.topic_names]
    dupes = _dupes([n for n, _ in items if n is not None])
    many = _too_many(len(items), "topics")
    out = []
    for name, topic_id in items:
        row: dict[str, Any] = {"name": name, "topic_id": topic_id or ZERO_UUID,
                               "error_code": 0, "error_message": None}
        try:
            if many is not None:
                raise many
            if name is None:
                name = await backend.run(_name_of_id, backend, topic_id)
                row["name"] = name
                if name is None:
                    raise _Refused(E.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}")
            if name in dupes:
                raise _Refused(E.INVALID_REQUEST, f"topic {name!r} is named more than once")
            await call("delete_topic", {"name": name})
            backend.forget_topic(name)
        except Exception as exc:
            row["error_code"], row["error_message"] = _answer(exc, E.NOT_CONTROLLER)
        out.append(row)
    return {"throttle_time": 0, "responses": out}


# -------------------------------------------------------------------- CreatePartitions
async def create_partitions(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    call = _Calls(backend)
    reqs = list(req.topics)
    dupes = _dupes([t.name for t in reqs])
    many = _too_many(len(reqs), "topics")
    out = []
    for t in reqs:
        row: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            if many is not None:
                raise many
            if t.name in dupes:
                raise _Refused(E.INVALID_REQUEST, f"topic {t.name!r} is named more than once")
            if t.assignments is not None:
                meta = await backend.run(_topic_meta, backend, t.name)
                if meta is not None and len(t.assignments) != int(t.count) - meta.partitions:
                    raise _Refused(E.INVALID_REPLICA_ASSIGNMENT,
                                   f"{len(t.assignments)} assignments for "
                                   f"{int(t.count) - meta.partitions} new partitions")
            if int(t.count) < 1:
                raise _Refused(E.INVALID_PARTITIONS, f"partition count {t.count} is not "
                                                     "positive")
            await call("create_partitions", {
                "name": t.name, "total": int(t.count),
                "validate_only": bool(req.validate_only)})
            backend.forget_topic(t.name)
        except Exception as exc:
            row["error_code"], row["error_message"] = _answer(exc, E.NOT_CONTROLLER)
        out.append(row)
    return {"throttle_time": 0, "results": out}


# ----------------------------------------------------------------------- DeleteRecords
async def delete_records(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    """One coordinator call for every partition the gateway found valid (the new log
    starts are logged together); if it fails, each is tried alone so the error lands on
    the partition that caused it."""
    call = _Calls(backend)
    # Kafka's timeout is how long to wait for the followers; storage is the replica, so
    # the one step to wait for is the publication of the new log start, which is always
    # waited for (at least DELETE_RECORDS_WAIT_MS): timeout_ms=0 applies, as on a broker
    # without followers (a held call holds a thread: at most 120 s)
    timeout_ms = min(max(ms(req.timeout), DELETE_RECORDS_WAIT_MS), 120_000)
    wanted = [(t.name, p.partition_index, p.offset) for t in req.topics for p in t.partitions]
    results: dict[tuple[str, int], tuple[int, int]] = {}  # (low watermark, error code)
    many = len(wanted) > 10 * MAX_ITEMS
    dupes = _dupes([(t, p) for t, p, _ in wanted])
    valid = []
    for t, p, off in wanted:
        if many or (t, p) in dupes:
            results[(t, p)] = (-1, E.INVALID_REQUEST)
            continue
        n = await backend.run(backend.partitions, t)
        if n is None or not 0 <= p < n:
            results[(t, p)] = (-1, E.UNKNOWN_TOPIC_OR_PARTITION)
        elif off < -1:
            results[(t, p)] = (-1, E.OFFSET_OUT_OF_RANGE)
        else:
            valid.append((t, p, off))

    async def attempt(batch: list[tuple[str, int, int]]) -> None:
        r = await call("delete_records", {
            "partitions": [{"topic": t, "partition": p, "offset": o} for t, p, o in batch],
            "timeout_ms": timeout_ms}, timeout_ms / 1000)
        for row in r["partitions"]:
            results[(row["topic"], row["partition"])] = (row["low_watermark"], 0)

    if valid:
        try:
            await attempt(valid)
        except Exception as exc:
            if len(valid) == 1:
                results[valid[0][:2]] = (-1, _answer(exc, E.NOT_CONTROLLER)[0])
            else:
                for one in valid:
                    try:
                        await attempt([one])
                    except Exception as exc1:
                        results[one[:2]] = (-1, _answer(exc1, E.NOT_CONTROLLER)[0])
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "low_watermark": results[(t.name, p.partition_index)][0],
             "error_code": results[(t.name, p.partition_index)][1]}
            for p in t.partitions]} for t in req.topics]}


# --------------------------------------------------------------------- DescribeCluster
async def describe_cluster(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    """This gateway as the cluster's brokers (its broker ids, as Metadata answers them) and
    controller;
    asked for controllers (v1 ``endpoint_type`` 2), MISMATCHED_ENDPOINT_TYPE, as a
    broker answers."""
    cfg = backend.config
    out: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None,
                           "endpoint_type": BROKERS, "cluster_id": cfg.cluster_id,
                           "controller_id": cfg.node_id, "brokers": [],
                           "cluster_authorized_operations": E.authorized_operations(
                               "cluster", bool(req.include_cluster_authorized_operations))}
    if int(getattr(req, "endpoint_type", BROKERS)) != BROKERS:
        out.update(error_code=E.MISMATCHED_ENDPOINT_TYPE,
                   error_message="the gateway answers for brokers (endpoint type 1)",
                   endpoint_type=int(req.endpoint_type))
        return out
    out["brokers"] = [{"broker_id": b, "host": cfg.advertised_host, "port": port,
                       "rack": None, "is_fenced": False} for b, port in cfg.brokers()]
    return out


# --------------------------------------------------------------------- DescribeConfigs
async def describe_configs(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    synonyms = bool(getattr(req, "include_synonyms", False))
    many = _too_many(len(req.resources), "resources")
    out = []
    for r in req.resources:
        keys = None if r.configuration_keys is None else list(r.configuration_keys)
        row: dict[str, Any] = {"error_code": 0, "error_message": None,
                               "resource_type": r.resource_type,
                               "resource_name": r.resource_name, "configs": []}
        try:
            if many is not None:
                raise many
            if r.resource_type == TOPIC:
                meta = await backend.run(_topic_meta, backend, r.resource_name)
                if meta is None:
                    raise _Refused(E.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"topic {r.resource_name!r} does not exist")
                row["configs"] = C.topic_entries(dict(meta.config), keys, synonyms)
            elif r.resource_type == BROKER:
                _check_broker(backend, r.resource_name)
                cfg = backend.config
                node = int(r.resource_name or cfg.node_id)
                port = dict(cfg.brokers())[node]
                row["configs"] = C.broker_entries(
                    node, f"{cfg.advertised_host}:{port}", keys,
                    cfg.auto_create_topics, cfg.num_partitions)
            else:
                raise _Refused(E.INVALID_REQUEST, f"resource type {r.resource_type} is not "
                                                  "served (topics and brokers are)")
        except Exception as exc:
            row["error_code"], row["error_message"] = _answer(exc, E.NOT_CONTROLLER)
        out.append(row)
    return {"throttle_time": 0, "results": out}


def _check_broker(backend: Backend, name: str) -> None:
    ids = [b for b, _ in backend.config.brokers()]
    if name not in ("", *map(str, ids)):
        raise _Refused(E.INVALID_REQUEST, f"unexpected broker id, expected one of "
                                          f"{ids[0]}, {ids[-1]}... or empty string, but "
                                          f"received {name[:100]!r}")


# ------------------------------------------------------- (Incremental)AlterConfigs
async def incremental_alter_configs(backend: Backend, req: Any, version: int
                                    ) -> dict[str, Any]:
    return await _alter(backend, req, incremental=True)


async def alter_configs(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    return await _alter(backend, req, incremental=False)


async def _alter(backend: Backend, req: Any, incremental: bool) -> dict[str, Any]:
    call = _Calls(backend)
    many = _too_many(len(req.resources), "resources")
    dupes = _dupes([(r.resource_type, r.resource_name) for r in req.resources])
    out = []
    for r in req.resources:
        row: dict[str, Any] = {"error_code": 0, "error_message": None,
                               "resource_type": r.resource_type,
                               "resource_name": r.resource_name}
        try:
            if many is not None:
                raise many
            if (r.resource_type, r.resource_name) in dupes:
                raise _Refused(E.INVALID_REQUEST, "resource is named more than once")
            if r.resource_type == BROKER:
                _check_broker(backend, r.resource_name)
                raise _Refused(E.INVALID_REQUEST, "a txnlog gateway has no dynamic broker "
                                                  "configs; alter topic configs")
            if r.resource_type != TOPIC:
                raise _Refused(E.INVALID_REQUEST, f"resource type {r.resource_type} is not "
                                                  "served (topics are)")
            await _alter_topic(call, r, incremental, bool(req.validate_only))
        except Exception as exc:
            row["error_code"], row["error_message"] = _answer(exc, E.NOT_CONTROLLER)
        out.append(row)
    return {"throttle_time": 0, "responses": out}


async def _alter_topic(call: _Calls, r: Any, incremental: bool, validate_only: bool
                       ) -> None:
    """One coordinator alter_configs call, which applies it atomically: SET, DELETE,
    APPEND and SUBTRACT as they are (the coordinator computes a list config's new value
    from its current one under its lock, so two APPENDs at once both land); AlterConfigs
    (not incremental) is a ``replace``: what it does not SET goes back to its default."""
    names = [c.name for c in r.configs]
    if _dupes(names):
        raise _Refused(E.INVALID_REQUEST, f"config {sorted(_dupes(names))[0]!r} is given "
                                          "more than once")
    by_op: dict[int, dict[str, str]] = {SET: {}, APPEND: {}, SUBTRACT: {}}
    delete: list[str] = []
    for c in r.configs:
        name, op, value = c.name, int(getattr(c, "config_operation", SET)), c.value
        if op in (SET, APPEND, SUBTRACT) and value is None:
            raise _Refused(E.INVALID_REQUEST, f"null value not supported for {name!r}")
        if op == DELETE:
            delete.append(name)
        elif op in by_op:
            if op != SET and name not in C.LIST_CONFIGS:
                what = "append" if op == APPEND else "subtract"
                raise _Refused(E.INVALID_REQUEST, f"config value {what} is not allowed for "
                                                  f"config key: {name}")
            by_op[op][name] = value
        else:
            raise _Refused(E.INVALID_REQUEST, f"unknown config operation {op} for {name!r}")
    await call("alter_configs", {"name": r.resource_name, "set": by_op[SET],
                                 "delete": delete, "append": by_op[APPEND],
                                 "subtract": by_op[SUBTRACT], "replace": not incremental,
                                 "validate_only": validate_only})


__all__ = ["alter_configs", "create_partitions", "create_topics", "delete_records",
           "delete_topics", "describe_cluster", "describe_configs",
           "incremental_alter_configs"]
