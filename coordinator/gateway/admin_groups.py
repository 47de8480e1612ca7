"""Kafka's admin APIs for groups and transactions: ListGroups, DescribeGroups,
DeleteGroups, OffsetDelete (``kafka-consumer-groups``), ListTransactions,
DescribeTransactions, DescribeProducers (``kafka-transactions``).

Thin, as ``admin.py``'s topic handlers: the coordinator's ``list_groups``,
``describe_group`` (group membership: live members), ``delete_group``,
``list_transactions``, ``describe_transactions`` and ``describe_producers`` answer, item by
item, with Kafka's codes. Groups exist where Kafka's do: with live members, or with
committed offsets (``Empty``); anything else is ``Dead`` / GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import struct
from typing import Any

from ..wire import unb64
from . import errors as E
from .admin import MAX_ITEMS, _answer, _call, _Calls, _Refused, _too_many
from .backend import Backend
from .codec import BROKER

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "Dead", "PrepareEpochFence")  # Kafka's transaction states


async def list_groups(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    if BROKER.get() != 0:  # an admin client asks every broker: the groups' is the first
        return {"throttle_time": 0, "error_code": 0, "groups": []}
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
        listed["rows"] = {g["group_id"]: g for g in (await call("list_groups", {}))["groups"]}
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
                               "authorized_operations": E.authorized_operations(
                                   "group", bool(getattr(
                                       req, "include_authorized_operations", False)))}
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
                           members=[{"member_id": m["member_id"],
                                     "group_instance_id": m.get("group_instance_id"),
                                     "client_id": m.get("client_id") or "",
                                     "client_host": m.get("client_host") or "",
                                     "member_metadata": unb64(m.get("metadata") or ""),
                                     "member_assignment": unb64(m.get("assignment") or "")
                                     if stable else b""}
                                    for m in live["members"]])
            elif has_offsets:
                row["group_state"] = "Empty"
                row["protocol_type"] = listed["rows"][group].get("protocol_type") or ""
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
        if not 0 <= count <= len(metadata) // 2:  # each name takes 2 bytes at least
            return None
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return None
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
    # an admin client asks every broker; the transactions' coordinator is the first
    if BROKER.get() == 0 and (not given or body["states"]):  # unknown states match none
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
                               "transaction_start_time": 0, "producer_id": -1,
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


__all__ = ["delete_groups", "describe_groups", "describe_producers", "describe_transactions",
           "list_groups", "list_transactions", "offset_delete", "subscribed_topics"]
