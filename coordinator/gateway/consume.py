"""Metadata, ListOffsets and Fetch: what a consumer asks, answered from storage alone.

Fetch serves the stored record batches verbatim (``PartitionReader.read_raw``): no
decoding, no re-encoding, CRCs untouched, control batches and aborted batches included as
a broker includes them. The bound is the published stable state's LSO (read_committed) or
HW (read_uncommitted), and ``aborted_transactions`` is Kafka's broker-side collection from
the ``.txnindex`` objects for the range served, so the client's own read_committed filter
drops exactly what Kafka's would. Long polling (``max_wait_ms``/``min_bytes``) re-reads the
stable state every ``fetch_poll_s`` and answers as soon as enough bytes are readable.

Every partition of one gateway is led by that gateway's node id: a txnlog root has no
replicas and no leaders, and any gateway serves any partition.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.codec.batch_header import parse_header
from txnlog.log_format.planted_bugs import enabled as planted_bug_enabled
from txnlog.log_format.reader import RawRead
from txnlog.log_format.topics import TopicMeta

from ..access.kafka_authz import CreateRefused
from ..client.admin_client import _max_timestamp
from . import errors as E
from .backend import Backend
from .codec import ms as _ms

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
ZERO_UUID = uuid.UUID(int=0)
EPOCH_BASE_MS = 1_577_836_800_000  # 2020-01-01T00:00:00Z, the leader epochs' zero
NO_OPS = -2147483648  # Kafka's "authorized operations not requested"


def _isolation(level: int) -> str:
    return "read_committed" if level == 1 else "read_uncommitted"


# --------------------------------------------------------------------------- Metadata
async def metadata(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    cfg = backend.config
    if req.topics is None or (version == 0 and not req.topics):
        names = await backend.run(backend.list_topics)
    else:
        names = [t.name for t in req.topics if t.name is not None]
    # Kafka's Metadata v0-v3 always allowed auto-creation; v4 on asks for it
    create = req.topics is not None and (version < 4 or bool(
        getattr(req, "allow_auto_topic_creation", True)))
    metas = await asyncio.gather(*(_topic_meta(backend, n, create) for n in names),
                                 return_exceptions=True)
    topics = []
    for name, meta in zip(names, metas, strict=True):
        if not isinstance(meta, TopicMeta):
            try:
                layout.validate_topic(name)
                code = E.UNKNOWN_TOPIC_OR_PARTITION if meta is None else \
                    E.TOPIC_AUTHORIZATION_FAILED if isinstance(meta, CreateRefused) else \
                    _not_created(meta)
            except ValueError:
                code = E.INVALID_TOPIC_EXCEPTION
            topics.append({"error_code": code, "name": name, "topic_id": ZERO_UUID,
                           "is_internal": False, "partitions": [],
                           "topic_authorized_operations": NO_OPS})
            continue
        epoch = leader_epoch(meta)
        topics.append({
            "error_code": 0, "name": name, "topic_id": topic_id(meta),
            "is_internal": name.startswith("__"),
            "partitions": [{"error_code": 0, "partition_index": p, "leader_id": cfg.leader(p),
                            "leader_epoch": epoch, "replica_nodes": (cfg.leader(p),),
                            "isr_nodes": (cfg.leader(p),), "offline_replicas": ()}
                           for p in range(meta.partitions)],
            "topic_authorized_operations": NO_OPS})
    topic_ops = E.authorized_operations(
        "topic", bool(getattr(req, "include_topic_authorized_operations", False)))
    for t in topics:
        if t["error_code"] == 0:
            t["topic_authorized_operations"] = topic_ops
    return {"throttle_time": 0, "cluster_id": cfg.cluster_id, "controller_id": cfg.node_id,
            "brokers": [{"node_id": b, "host": cfg.advertised_host, "port": port,
                         "rack": None} for b, port in cfg.brokers()],
            "topics": topics, "cluster_authorized_operations": E.authorized_operations(
                "cluster",
                bool(getattr(req, "include_cluster_authorized_operations", False)))}


async def _topic_meta(backend: Backend, name: str, create: bool) -> TopicMeta | None:
    if await backend.topic_partitions(name, create) is None:
        return None
    return await backend.run(backend.topic_meta, name)


def topic_id(meta: TopicMeta) -> uuid.UUID:
    """Kafka's topic id: the UUID given at the topic's creation (the zero UUID for topics
    of roots written before topics had ids)."""
    return uuid.UUID(meta.topic_id) if meta.topic_id else ZERO_UUID


def leader_epoch(meta: TopicMeta) -> int:
    """Every partition's leader epoch: the whole seconds from 2020 to the topic's creation.

    A txnlog partition never changes leader, so its epoch changes only where Kafka's
    would tell a client that its view is stale: a topic deleted and created again is a
    later topic, with a larger epoch (and another id), so a client's cached epoch is
    older than the one Metadata now answers, Fetch and ListOffsets with that epoch are
    FENCED_LEADER_EPOCH, and the client looks the topic up again. Partitions a topic gains
    start at the topic's epoch, as new partitions in Kafka start at theirs."""
    return max(0, min((meta.created_ms - EPOCH_BASE_MS) // 1000, 0x7FFFFFFF))


def epoch_error(meta: TopicMeta, current: int) -> int:
    """Kafka's check of a request's ``current_leader_epoch`` (-1: not checked)."""
    if current < 0:
        return 0
    ours = leader_epoch(meta)
    if current < ours:
        return E.FENCED_LEADER_EPOCH
    return E.UNKNOWN_LEADER_EPOCH if current > ours else 0


def _not_created(exc: BaseException) -> int:
    """The code for a topic whose auto-creation failed: LEADER_NOT_AVAILABLE (Kafka's
    answer while a topic is being created; clients ask again) when it may succeed later,
    the coordinator's own code (a config it refuses) when it will not."""
    code = E.code_of(exc)
    return code if code in (E.INVALID_TOPIC_EXCEPTION, E.INVALID_CONFIG,
                            E.INVALID_PARTITIONS, E.INVALID_REPLICATION_FACTOR,
                            E.UNKNOWN_TOPIC_OR_PARTITION) else E.LEADER_NOT_AVAILABLE


# ------------------------------------------------------------------------ ListOffsets
def _list_one(backend: Backend, topic: str, partition: int, spec: int, isolation: str,
              snap: Any, current_epoch: int = -1) -> dict[str, Any]:
    meta = backend.topic_meta(topic)
    out: dict[str, Any] = {"partition_index": partition, "error_code": 0, "timestamp": -1,
                           "offset": -1, "leader_epoch": -1, "old_style_offsets": ()}
    if meta is None or not 0 <= partition < meta.partitions:
        out["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
        return out
    out["error_code"] = epoch_error(meta, current_epoch)
    if out["error_code"]:
        return out
    out["leader_epoch"] = leader_epoch(meta)
    lock, reader = backend.reader(topic, partition, isolation)
    try:
        with lock:
            reader.advance_snapshot(snap)
            if spec == EARLIEST:
                out["offset"] = reader.earliest_offset()
            elif spec == LATEST:
                out["offset"] = reader.latest_offset()
            elif spec == MAX_TIMESTAMP:
                out.update(_max_timestamp(reader))
            elif spec >= 0:
                found = reader.offset_for_timestamp(spec)
                if found is not None:
                    out["offset"], out["timestamp"] = found, spec
            else:
                out["error_code"] = E.INVALID_REQUEST
    except Exception as exc:
        out["error_code"] = E.code_of(exc)
    return out


async def list_offsets(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    isolation = _isolation(getattr(req, "isolation_level", 0))
    snap = await backend.run(backend.snapshot)
    topics = []
    for t in req.topics:
        parts = await asyncio.gather(*(backend.run(
            _list_one, backend, t.name, p.partition_index, p.timestamp, isolation, snap,
            getattr(p, "current_leader_epoch", -1))
            for p in t.partitions))
        topics.append({"name": t.name, "partitions": list(parts)})
    return {"throttle_time": 0, "topics": topics}


# ------------------------------------------------------------------------------ Fetch
def _fetch_one(backend: Backend, topic: str, partition: int, offset: int, limit: int,
               isolation: str, snap: Any, current_epoch: int = -1, strict: bool = False
               ) -> tuple[dict[str, Any], int]:
    """One partition's answer and how many bytes of records it holds: at most ``limit``,
    except for a first batch larger than that, unless ``strict`` (the response already
    holds records: KIP-74 lets only the response's first batch exceed its limits)."""
    out: dict[str, Any] = {"partition_index": partition, "error_code": 0,
                           "high_watermark": -1, "last_stable_offset": -1,
                           "log_start_offset": -1, "aborted_transactions": None,
                           "preferred_read_replica": -1, "records": b""}
    meta = backend.topic_meta(topic)
    if meta is None or not 0 <= partition < meta.partitions:
        out["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
        return out, 0
    out["error_code"] = epoch_error(meta, current_epoch)
    if out["error_code"]:
        return out, 0
    lock, reader = backend.reader(topic, partition, isolation)
    try:
        with lock:
            reader.advance_snapshot(snap)
            hw, lso = reader.high_watermark(), reader.last_stable_offset()
            start = reader.earliest_offset() if hw > 0 else 0
            out.update(high_watermark=hw, last_stable_offset=lso, log_start_offset=start)
            if offset < start or offset > hw:
                out["error_code"] = E.OFFSET_OUT_OF_RANGE
                return out, 0
            if isolation == "read_committed":
                out["aborted_transactions"] = []
            if limit <= 0:
                return out, 0
            if isolation == "read_committed" and planted_bug_enabled("gateway_fetch_ignores_lso"):
                raw = _read_past_lso(backend, topic, partition, offset, limit, snap)
            else:
                raw = reader.read_raw(offset, limit)
            if strict and len(raw.data) > limit:
                raw = _whole_batches(raw, offset, limit)
            if raw.data and isolation == "read_committed":
                out["aborted_transactions"] = [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in reader.aborted_transactions(offset, raw.next_offset)]
            out["records"] = raw.data
            return out, len(raw.data)
    except Exception as exc:
        out["error_code"] = E.code_of(exc)
        return out, 0


def _whole_batches(raw: RawRead, offset: int, limit: int) -> RawRead:
    """The batches of ``raw`` that fit in ``limit`` bytes whole (none: nothing read)."""
    data = raw.data
    end, next_offset = 0, offset
    while end < len(data):
        h = parse_header(data, end)
        size = h.batch_length + 12
        if end + size > limit:
            break
        end += size
        next_offset = h.base_offset + h.last_offset_delta + 1
    return RawRead(bytes(data[:end]), next_offset)


def _read_past_lso(backend: Backend, topic: str, partition: int, offset: int, limit: int,
                   snap: Any) -> Any:
    """The planted bug ``gateway_fetch_ignores_lso``: a read_committed Fetch served up to
    the HW instead of the LSO, so an open transaction's batches reach the client with no
    abort listed for them (they may abort later)."""
    lock, reader = backend.reader(topic, partition, "read_uncommitted")
    with lock:
        reader.advance_snapshot(snap)
        return reader.read_raw(offset, limit)


def _fetch_all(backend: Backend, wanted: list[tuple[str, int, int, int, int]], max_bytes: int,
               isolation: str, snap: Any) -> tuple[list[tuple[str, dict[str, Any]]], int, bool]:
    """Every partition read in order; the response's records stay within ``max_bytes``
    and each partition's within its ``partition_max_bytes``, except for the response's
    first batch, which is given whole however large (KIP-74: a consumer always moves on;
    Kafka's ``minOneMessage`` for the first partition that has records)."""
    answers: list[tuple[str, dict[str, Any]]] = []
    total = 0
    failed = False
    for topic, partition, offset, part_max, current_epoch in wanted:
        limit = max(0, min(part_max, max_bytes - total))
        ans, size = _fetch_one(backend, topic, partition, offset, limit, isolation, snap,
                               current_epoch, strict=total > 0)
        total += size
        failed = failed or ans["error_code"] != 0
        answers.append((topic, ans))
    return answers, total, failed


async def fetch(backend: Backend, req: Any, version: int) -> dict[str, Any]:
    isolation = _isolation(getattr(req, "isolation_level", 0))
    wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
               getattr(p, "current_leader_epoch", -1))
              for t in req.topics for p in t.partitions]
    max_bytes = getattr(req, "max_bytes", 0x7FFFFFFF)
    wait_s = max(0.0, min(_ms(req.max_wait), 60_000) / 1000.0)
    deadline = time.monotonic() + wait_s
    min_bytes = max(0, req.min_bytes)
    seen_key: Any = object()  # no snapshot read yet
    while True:
        snap = await backend.run(backend.snapshot)
        key = snap.key if snap is not None else None
        if key != seen_key:
            seen_key = key
            answers, total, failed = await backend.run(
                _fetch_all, backend, wanted, max_bytes, isolation, snap)
            if total >= min_bytes or failed or not wanted:
                break
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(backend.config.fetch_poll_s,
                                max(0.0, deadline - time.monotonic())))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, ans in answers:
        by_topic.setdefault(topic, []).append(ans)
    return {"throttle_time": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}


