"""Kafka's admin APIs: what AdminClients (confluent-kafka, kafka-python, the Java client and
Kafka's tools) ask a broker to manage topics, configs, groups and transactions.

Every handler is thin: it checks what Kafka's broker checks of the request (duplicates,
shapes, replica assignments), then calls the coordinator operation that ``txnlog topics``,
``txnlog groups`` and ``txnlog transactions`` use (``topic_admin``, ``log_retention``,
``admin_ops``, ``group_membership``), item by item, and answers each item with Kafka's
error code and message. One bad item never fails the others, and nothing a request holds
can fail the connection: an unexpected failure of one item is UNKNOWN_SERVER_ERROR for it.

A coordinator that cannot be reached is NOT_CONTROLLER for the topic operations (Kafka's
admin clients look the controller up again and retry) and COORDINATOR_NOT_AVAILABLE for
the group and transaction ones. Topics have no ids (DeleteTopics by id is
UNKNOWN_TOPIC_ID) and no replicas: storage is the replica, so a replication factor of -1
or any positive one is accepted and the topic answers as replicated once.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections import Counter
from typing import Any

from txnlog.log_format import layout, topics

from ..errors import CoordinatorError, InvalidConfigError, InvalidTopicError
from ..group_membership import unb64
from ..topic_admin import check_values
from ..topic_config import validate_topic_config
from . import admin_configs as C
from . import errors as E
from .backend import Backend
from .codec import ms

log = logging.getLogger("txnlog.gateway.admin")

MAX_ITEMS = 1_000            # topics, resources, groups or transactional ids per request
DEFAULT_PARTITIONS = 1       # Kafka's num.partitions
ZERO_UUID = uuid.UUID(int=0)
NO_OPS = -2147483648         # Kafka's "authorized operations not requested"
TOPIC, BROKER = 2, 4         # DescribeConfigs / AlterConfigs resource types
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "Dead", "PrepareEpochFence")  # Kafka's transaction states


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
                raise _Refused(E.UNKNOWN_TOPIC_ID, f"topic id {topic_id}: txnlog topics have "
                                                   "no ids; delete topics by name")
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
    timeout_ms = min(max(ms(req.timeout), 0), 300_000)
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
                row["configs"] = C.broker_entries(
                    cfg.node_id, f"{cfg.advertised_host}:{cfg.advertised_port}", keys)
            else:
                raise _Refused(E.INVALID_REQUEST, f"resource type {r.resource_type} is not "
                                                  "served (topics and brokers are)")
        except Exception as exc:
            row["error_code"], row["error_message"] = _answer(exc, E.NOT_CONTROLLER)
        out.append(row)
    return {"throttle_time": 0, "results": out}


def _check_broker(backend: Backend, name: str) -> None:
    node = backend.config.node_id
    if name not in ("", str(node)):
        raise _Refused(E.INVALID_REQUEST, f"unexpected broker id, expected {node} or empty "
                                          f"string, but received {name[:100]!r}")


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
    """SET/DELETE go to the coordinator's alter_configs as they are; APPEND/SUBTRACT of a
    list config become a SET of the list the topic's current value gives (read from the
    coordinator just before); AlterConfigs (not incremental) replaces the topic's configs:
    SET of what it gives, DELETE of every other config the topic sets."""
    names = [c.name for c in r.configs]
    if _dupes(names):
        raise _Refused(E.INVALID_REQUEST, f"config {sorted(_dupes(names))[0]!r} is given "
                                          "more than once")
    ops = [(c.name, int(getattr(c, "config_operation", SET)), c.value) for c in r.configs]
    needs_current = not incremental or any(op in (APPEND, SUBTRACT) for _, op, _ in ops)
    current: dict[str, str] = {}
    if needs_current:
        current = dict((await call("describe_topic", {"name": r.resource_name}))
                       ["config"])
    set_cfg: dict[str, str] = {}
    delete: list[str] = []
    for name, op, value in ops:
        if op in (SET, APPEND, SUBTRACT) and value is None:
            raise _Refused(E.INVALID_REQUEST, f"null value not supported for {name!r}")
        if op == SET:
            set_cfg[name] = value
        elif op == DELETE:
            delete.append(name)
        elif op in (APPEND, SUBTRACT):
            if name not in C.LIST_CONFIGS:
                what = "append" if op == APPEND else "subtract"
                raise _Refused(E.INVALID_REQUEST, f"config value {what} is not allowed for "
                                                  f"config key: {name}")
            have = [x.strip() for x in current.get(
                name, C.TOPIC_CONFIG_INFO[name][0]).split(",") if x.strip()]
            given = [x.strip() for x in value.split(",") if x.strip()]
            if op == APPEND:
                new = have + [x for x in given if x not in have]
            else:
                new = [x for x in have if x not in given]
            if not new:
                raise InvalidConfigError(f"{name} would be an empty list")
            set_cfg[name] = ",".join(new)
        else:
            raise _Refused(E.INVALID_REQUEST, f"unknown config operation {op} for {name!r}")
    if not incremental:
        delete = [k for k in current if k not in set_cfg]
    await call("alter_configs", {"name": r.resource_name, "set": set_cfg, "delete": delete,
                                 "validate_only": validate_only})


# ---------------------------------------------------------------------------- groups
async def list_groups(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    try:
        rows = (await _call(backend, "list_groups", {}))["groups"]
        code = 0
    except Exception as exc:
        rows, code = [], _answer(exc, E.COORDINATOR_NOT_AVAILABLE)[0]
    states = {s.lower() for s in getattr(req, "states_filter", None) or ()}
    types = {s.lower() for s in getattr(req, "types_filter", None) or ()}
    if types and "classic" not in types:
        rows = []
    groups = [{"group_id": g["group_id"], "protocol_type": g.get("protocol_type") or "",
               "group_state": g["state"], "group_type": "classic"}
              for g in rows if not states or g["state"].lower() in states]
    return {"throttle_time": 0, "error_code": code, "groups": groups}


async def _group_view(call: _Calls, group: str, listed: dict[str, Any]
                      ) -> tuple[dict[str, Any], bool]:
    """(the group's live membership, whether it has committed or pending offsets);
    ``listed`` caches ListGroups' rows for the request."""
    live = await call("describe_group", {"group_id": group})
    if "rows" not in listed:
        listed["rows"] = {g["group_id"] for g in (await call("list_groups", {}))["groups"]}
    return live, group in listed["rows"]


async def describe_groups(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    call = _Calls(backend)
    many = _too_many(len(req.groups), "groups")
    listed: dict[str, Any] = {}
    out = []
    for group in req.groups:
        row: dict[str, Any] = {"error_code": 0, "error_message": None, "group_id": group,
                               "group_state": "Dead", "protocol_type": "",
                               "protocol_data": "", "members": [],
                               "authorized_operations": NO_OPS}
        try:
            if many is not None:
                raise many
            if not group:
                raise _Refused(E.INVALID_GROUP_ID, "the group id is empty")
            live, has_offsets = await _group_view(call, group, listed)
            if live["members"]:
                stable = live["state"] == "Stable"
                row.update(group_state=live["state"],
                           protocol_type=live.get("protocol_type") or "",
                           protocol_data=(live.get("protocol_name") or "") if stable else "",
                           members=[{"member_id": m["member_id"], "group_instance_id": None,
                                     "client_id": m.get("client_id") or "",
                                     "client_host": m.get("client_host") or "",
                                     "member_metadata": unb64(m.get("metadata") or ""),
                                     "member_assignment": unb64(m.get("assignment") or "")
                                     if stable else b""}
                                    for m in live["members"]])
            elif has_offsets:
                row["group_state"] = "Empty"
            elif version >= 6:  # KIP-1043: a group that does not exist is an error
                raise _Refused(E.GROUP_ID_NOT_FOUND, f"group {group!r} not found")
        except Exception as exc:
            row["error_code"], row["error_message"] = _answer(exc, E.COORDINATOR_NOT_AVAILABLE)
        out.append(row)
    return {"throttle_time": 0, "groups": out}


def _delete_group_code(exc: BaseException) -> int:
    code = _answer(exc, E.COORDINATOR_NOT_AVAILABLE)[0]
    # offsets in an open transaction: Kafka's group would not be empty either
    return E.NON_EMPTY_GROUP if code == E.INVALID_TXN_STATE else code


async def delete_groups(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    call = _Calls(backend)
    names = list(req.groups_names)
    many = _too_many(len(names), "groups")
    out = []
    for group in names:
        code = 0
        try:
            if many is not None:
                raise many
            if not group:
                raise _Refused(E.INVALID_GROUP_ID, "the group id is empty")
            r = await call("delete_group", {"group_id": group})
            if not r["deleted"]:
                code = E.GROUP_ID_NOT_FOUND
        except Exception as exc:
            code = _delete_group_code(exc)
        out.append({"group_id": group, "error_code": code})
    return {"throttle_time": 0, "results": out}


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a consumer's subscription (Kafka's ConsumerProtocolSubscription:
    int16 version, array of int16-length strings); None if it cannot be read."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, out = 6, set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            out.add(metadata[pos + 2:pos + 2 + n].decode())
            pos += 2 + n
        return out
    except (struct.error, UnicodeDecodeError):
        return None


async def offset_delete(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    """Kafka's OffsetDelete: a partition of a topic the group's live members subscribe to
    is GROUP_SUBSCRIBED_TO_TOPIC; the others' offsets are deleted (one coordinator call)."""
    call = _Calls(backend)
    wanted = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    codes = dict.fromkeys(wanted, 0)
    top = 0
    try:
        if not req.group_id:
            raise _Refused(E.INVALID_GROUP_ID, "the group id is empty")
        if len(wanted) > 10 * MAX_ITEMS:
            raise _Refused(E.INVALID_REQUEST, "too many partitions")
        live, has_offsets = await _group_view(call, req.group_id, {})
        if not live["members"] and not has_offsets:
            raise _Refused(E.GROUP_ID_NOT_FOUND, f"group {req.group_id!r} not found")
        subscribed: set[str] | None = set()
        for m in live["members"]:
            got = subscribed_topics(unb64(m.get("metadata") or ""))
            subscribed = None if got is None or subscribed is None else subscribed | got
        todo = []
        for t, p in wanted:
            n = await backend.run(backend.partitions, t)
            if n is None or not 0 <= p < n:
                codes[(t, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif live["members"] and (subscribed is None or t in subscribed):
                codes[(t, p)] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                todo.append({"topic": t, "partition": p})
        if todo:
            await call("delete_group", {"group_id": req.group_id, "partitions": todo})
    except Exception as exc:
        top = _delete_group_code(exc)
    return {"throttle_time": 0, "error_code": top, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": codes[(t.name, p.partition_index)] if not top else 0}
            for p in t.partitions]} for t in req.topics]}


# ---------------------------------------------------------------------- transactions
async def list_transactions(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    given = list(req.state_filters)
    unknown = [s for s in given if s not in STATES]
    body: dict[str, Any] = {"states": [s for s in given if s in STATES],
                            "producer_ids": list(req.producer_id_filters)}
    duration = int(getattr(req, "duration_filter", -1))
    if duration >= 0:
        body["duration_ms"] = duration
    rows, code = [], 0
    if not given or body["states"]:  # only unknown states asked for: nothing matches
        try:
            rows = (await _call(backend, "list_transactions", body))["transactions"]
        except Exception as exc:
            code = _answer(exc, E.COORDINATOR_NOT_AVAILABLE)[0]
    return {"throttle_time": 0, "error_code": code, "unknown_state_filters": tuple(unknown),
            "transaction_states": [{"transactional_id": x["transactional_id"],
                                    "producer_id": x["producer_id"],
                                    "transaction_state": x["state"]} for x in rows]}


async def describe_transactions(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    call = _Calls(backend)
    many = _too_many(len(req.transactional_ids), "transactional ids")
    out = []
    for tid in req.transactional_ids:
        row: dict[str, Any] = {"error_code": 0, "transactional_id": tid,
                               "transaction_state": "", "transaction_timeout": 0,
                               "transaction_start_time": -1, "producer_id": -1,
                               "producer_epoch": -1, "topics": []}
        try:
            if many is not None:
                raise many
            if not tid:
                raise _Refused(E.TRANSACTIONAL_ID_NOT_FOUND, "empty transactional id")
            [x] = (await call("describe_transactions",
                              {"transactional_ids": [tid]}))["transactions"]
            by_topic: dict[str, list[int]] = {}
            for key in x["partitions"]:
                topic, _, p = key.rpartition("-")
                by_topic.setdefault(topic, []).append(int(p))
            row.update(transaction_state=x["state"], transaction_timeout=x["timeout_ms"],
                       transaction_start_time=x["start_ms"] if x["start_ms"] >= 0 else -1,
                       producer_id=x["producer_id"], producer_epoch=x["epoch"],
                       topics=[{"topic": t, "partitions": tuple(sorted(ps))}
                               for t, ps in sorted(by_topic.items())])
        except Exception as exc:
            code = _answer(exc, E.COORDINATOR_NOT_AVAILABLE)[0]
            row["error_code"] = E.TRANSACTIONAL_ID_NOT_FOUND \
                if code == E.INVALID_PRODUCER_ID_MAPPING else code
        out.append(row)
    return {"throttle_time": 0, "transaction_states": out}


async def describe_producers(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    wanted = [(t.name, p) for t in req.topics for p in t.partition_indexes]
    results: dict[tuple[str, int], dict[str, Any]] = {}
    valid = []
    many = len(wanted) > 10 * MAX_ITEMS
    for t, p in wanted:
        if many:
            results[(t, p)] = {"error_code": E.INVALID_REQUEST,
                               "error_message": f"at most {10 * MAX_ITEMS} partitions"}
            continue
        n = await backend.run(backend.partitions, t)
        if n is None or not 0 <= p < n:
            results[(t, p)] = {"error_code": E.UNKNOWN_TOPIC_OR_PARTITION,
                               "error_message": f"{t}-{p} does not exist"}
        else:
            valid.append((t, p))
    if valid:
        try:
            r = await _call(backend, "describe_producers", {"partitions": [
                {"topic": t, "partition": p} for t, p in dict.fromkeys(valid)]})
            for part in r["partitions"]:
                results[(part["topic"], part["partition"])] = {
                    "error_code": 0, "error_message": None, "active_producers": [
                        {"producer_id": x["producer_id"], "producer_epoch": x["producer_epoch"],
                         "last_sequence": x["last_sequence"], "last_timestamp": -1,
                         "coordinator_epoch": x["coordinator_epoch"],
                         "current_txn_start_offset": x["current_txn_start_offset"]}
                        for x in part["producers"]]}
        except Exception as exc:
            code, msg = _answer(exc, E.NOT_LEADER_OR_FOLLOWER)
            for key in valid:
                results[key] = {"error_code": code, "error_message": msg}
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p, "active_producers": [],
             **results[(t.name, p)]} for p in t.partition_indexes]} for t in req.topics]}


__all__ = ["alter_configs", "create_partitions", "create_topics", "delete_groups",
           "delete_records", "delete_topics", "describe_configs", "describe_groups",
           "describe_producers", "describe_transactions", "incremental_alter_configs",
           "list_groups", "list_transactions", "offset_delete", "subscribed_topics"]
