"""FindCoordinator, consumer groups and their offsets, forwarded to the coordinator.

Every gateway answers FindCoordinator with itself: the decisions are the coordinator's
(``group_membership``), reached through whichever gateway a client talks to. JoinGroup and
SyncGroup are held until the rebalance step completes, so they run on the ``waits`` pool
with a timeout above the group's rebalance timeout. Offsets committed here and read by
OffsetFetch are the same group offsets Spark's ``groupId`` commits and reads.
"""

from __future__ import annotations

from typing import Any

from ..wire import b64, unb64
from . import errors as E
from .backend import Backend
from .codec import CLIENT, ms

DEFAULT_REBALANCE_MS = 300_000


def _unavailable(exc: BaseException) -> int:
    code = E.code_of(exc)
    # a coordinator that cannot be reached is retriable for a group member
    return E.COORDINATOR_NOT_AVAILABLE if code in (E.NOT_COORDINATOR, E.KAFKA_STORAGE_ERROR,
                                                   E.UNKNOWN_SERVER_ERROR) else code


async def find_coordinator(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    cfg = backend.config
    me = {"node_id": cfg.node_id, "host": cfg.advertised_host, "port": cfg.advertised_port,
          "error_code": 0, "error_message": None}
    keys = list(getattr(req, "coordinator_keys", None) or ())
    if version < 4:
        return {"throttle_time": 0, **me}
    return {"throttle_time": 0, "coordinators": [{"key": k, **me} for k in keys]}


async def join_group(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    rebalance_ms = ms(req.rebalance_timeout) if version >= 1 else ms(req.session_timeout)
    client_id, client_host = CLIENT.get()
    body = {"group_id": req.group_id, "member_id": req.member_id or "",
            "client_id": client_id[:255], "client_host": client_host[:255],
            "session_timeout_ms": ms(req.session_timeout),
            "rebalance_timeout_ms": rebalance_ms or DEFAULT_REBALANCE_MS,
            "protocol_type": req.protocol_type,
            "require_known_member_id": version >= 4,
            "group_instance_id": getattr(req, "group_instance_id", None),
            "protocols": [{"name": p.name, "metadata": b64(p.metadata)}
                          for p in req.protocols]}
    try:
        client = backend.long_client(rebalance_ms / 1000)
        r = await backend.wait(client.call, "join_group", body)
    except Exception as exc:
        return {"throttle_time": 0, "error_code": _unavailable(exc), "generation_id": -1,
                "protocol_type": None, "protocol_name": None, "leader": "",
                "member_id": req.member_id or "", "members": []}
    r["members"] = [{"member_id": m["member_id"],
                     "group_instance_id": m.get("group_instance_id"),
                     "metadata": unb64(m["metadata"])} for m in r["members"]]
    if version < 7 and r.get("protocol_name") is None:
        r["protocol_name"] = ""
    return {"throttle_time": 0, **r}


async def sync_group(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    body = {"group_id": req.group_id, "member_id": req.member_id,
            "generation_id": req.generation_id,
            "group_instance_id": getattr(req, "group_instance_id", None),
            "assignments": [{"member_id": a.member_id, "assignment": b64(a.assignment)}
                            for a in req.assignments]}
    try:
        client = backend.long_client(DEFAULT_REBALANCE_MS / 1000)
        r = await backend.wait(client.call, "sync_group", body)
    except Exception as exc:
        return {"throttle_time": 0, "error_code": _unavailable(exc), "assignment": b"",
                "protocol_type": None, "protocol_name": None}
    return {"throttle_time": 0, "error_code": r["error_code"],
            "assignment": unb64(r.get("assignment") or ""),
            "protocol_type": r.get("protocol_type"), "protocol_name": r.get("protocol_name")}


async def heartbeat(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    try:
        r = await backend.run(backend.client.call, "group_heartbeat", {
            "group_id": req.group_id, "member_id": req.member_id,
            "generation_id": req.generation_id,
            "group_instance_id": getattr(req, "group_instance_id", None)})
        code = r["error_code"]
    except Exception as exc:
        code = _unavailable(exc)
    return {"throttle_time": 0, "error_code": code}


async def leave_group(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    members_in = [{"member_id": m.member_id or "",
                   "group_instance_id": getattr(m, "group_instance_id", None)}
                  for m in req.members] if version >= 3 else \
        [{"member_id": req.member_id, "group_instance_id": None}]
    try:
        r = await backend.run(backend.client.call, "leave_group",
                              {"group_id": req.group_id, "members": members_in})
    except Exception as exc:
        return {"throttle_time": 0, "error_code": _unavailable(exc), "members": []}
    members = [{"member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "error_code": m["error_code"]} for m in r["members"]]
    code = members[0]["error_code"] if version < 3 and members else 0
    return {"throttle_time": 0, "error_code": code, "members": members}


OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes


async def offset_checks(backend: Backend, topics: Any) -> tuple[list[dict[str, Any]],
                                                                 dict[tuple[str, int], int]]:
    """The offsets of an OffsetCommit or TxnOffsetCommit request as the coordinator takes
    them (commit metadata and leader epoch included), and the error of each partition
    refused before that, as Kafka's broker refuses them: a topic or partition that does
    not exist is UNKNOWN_TOPIC_OR_PARTITION, metadata over ``offset.metadata.max.bytes``
    OFFSET_METADATA_TOO_LARGE, a negative offset INVALID_REQUEST (txnlog keeps no
    "unknown offset" commits)."""
    offsets: list[dict[str, Any]] = []
    refused: dict[tuple[str, int], int] = {}
    for t in topics:
        n = await backend.run(backend.partitions, t.name)
        for p in t.partitions:
            metadata = p.committed_metadata or ""
            if n is None or not 0 <= p.partition_index < n:
                refused[(t.name, p.partition_index)] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                refused[(t.name, p.partition_index)] = E.OFFSET_METADATA_TOO_LARGE
            elif p.committed_offset < 0:
                refused[(t.name, p.partition_index)] = E.INVALID_REQUEST
            else:
                offsets.append({"topic": t.name, "partition": p.partition_index,
                                "offset": p.committed_offset, "metadata": metadata,
                                "leader_epoch": int(getattr(p, "committed_leader_epoch", -1))})
    return offsets, refused


def offset_answer(topics: Any, refused: dict[tuple[str, int], int], code: int
                  ) -> list[dict[str, Any]]:
    """Each partition's code: its own refusal, else the commit's."""
    return [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index,
         "error_code": refused.get((t.name, p.partition_index), code)}
        for p in t.partitions]} for t in topics]


async def offset_commit(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    offsets, refused = await offset_checks(backend, req.topics)
    generation = getattr(req, "generation_id_or_member_epoch",
                         getattr(req, "generation_id", -1))
    code = 0
    if offsets:
        try:
            r = await backend.run(backend.client.call, "commit_offsets", {
                "group_id": req.group_id, "member_id": req.member_id or "",
                "generation_id": generation, "offsets": offsets,
                "group_instance_id": getattr(req, "group_instance_id", None)})
            code = r["error_code"]
        except Exception as exc:
            code = _unavailable(exc)
    return {"throttle_time": 0, "topics": offset_answer(req.topics, refused, code)}


async def offset_fetch(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    try:
        r = await backend.run(backend.client.call, "committed_offsets",
                              {"group_id": req.group_id})
        committed, extra, code = r["offsets"], r.get("metadata") or {}, 0
    except Exception as exc:
        committed, extra, code = {}, {}, _unavailable(exc)
    if req.topics is None:
        wanted: dict[str, list[int]] = {}
        for key in sorted(committed, key=lambda k: (k.rpartition("-")[0],
                                                    int(k.rpartition("-")[2]))):
            topic, _, p = key.rpartition("-")
            wanted.setdefault(topic, []).append(int(p))
    else:
        wanted = {t.name: list(t.partition_indexes) for t in req.topics}
    topics = []
    for name, parts in wanted.items():
        rows = []
        for p in parts:
            key = f"{name}-{p}"
            metadata, epoch = (extra.get(key) or ["", -1])[:2]
            rows.append({"partition_index": p, "committed_offset": committed.get(key, -1),
                         "committed_leader_epoch": epoch, "metadata": metadata,
                         "error_code": code})
        topics.append({"name": name, "partitions": rows})
    return {"throttle_time": 0, "topics": topics, "error_code": code}
