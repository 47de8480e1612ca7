"""The coordinator's state machine: producers, transactions, members, offsets, markers.

One asyncio loop owns all state. Every change is a LogRecord that is *applied* to memory and
*queued* for the log in the same synchronous step (``_commit``), then the RPC awaits
durability before answering. Replaying the log through the same ``_apply`` rebuilds the
state, so memory and log cannot disagree. Because the log is sequential, an answer that
depends on an earlier change is only sent after that change is durable too.

Ending a transaction (DESIGN 5.3):
1. (commit) named members' unconfirmed reservations are checked in storage;
2. Prepare{Commit,Abort} is logged with the whole plan: marker offsets, timestamp,
   coordinator epoch, fences, .txnindex entries — so a restarted coordinator rewrites the
   same bytes;
3. markers (one object per partition), fences and .txnindex objects are written in parallel;
4. Complete* is logged and, in parallel, a stable snapshot is published; then the reply.
A transaction in Prepare* is only ever rolled forward.

Why a stable snapshot may be written while the Complete record is still in flight: every
change that can raise an HW or LSO is either already durable (Prepare, reservations), true
in storage (confirms follow a successful write; markers/fences are written before
Complete), or replayed identically after a crash (Prepare -> roll forward).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from txnlog.log_format import layout, stable, topics
from txnlog.log_format.control import ControlType, Marker, encode_markers
from txnlog.log_format.errors import InvalidTopicError as FormatInvalidTopicError
from txnlog.log_format.indexes import AbortedTxn, encode_txn_index
from txnlog.log_format.records import encode_batch
from txnlog.log_format.storage import Storage, StorageError
from txnlog.log_format.unsafe import enabled as unsafe

from . import faults
from .errors import (
    ConcurrentTransactionsError,
    CoordinatorError,
    DuplicateSequenceError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from .states import TxnState, check_transition
from .txn_log import TxnLog
from .txnlog_records import LogRecord

log = logging.getLogger("txnlog.coordinator.engine")

PID_BLOCK = 1000
MAX_EPOCH = 32767 - 1  # Kafka: an epoch at Short.MAX_VALUE - 1 is exhausted
SEQ_HISTORY = 5  # Kafka keeps the last 5 batches per producer for duplicate detection
OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default


def now_ms() -> int:
    return int(time.time() * 1000)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, int32 overflow)."""
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group_id: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """Kafka's GroupCoordinator.partitionFor: Utils.abs(groupId.hashCode) % n."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def encode_offset_commit(group: str, topic: str, partition: int, offset: int,
                         metadata: str, timestamp: int) -> tuple[bytes, bytes]:
    """Kafka's OffsetCommitKey v1 and OffsetCommitValue v3 bytes."""
    def s(x: str) -> bytes:
        raw = x.encode()
        return struct.pack(">h", len(raw)) + raw
    key = struct.pack(">h", 1) + s(group) + s(topic) + struct.pack(">i", partition)
    value = struct.pack(">hqi", 3, offset, -1) + s(metadata) + struct.pack(">q", timestamp)
    return key, value


def pkey(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


@dataclass
class CommitTrace:
    """Storage calls on one EndTxn's critical path, grouped into sequential rounds.

    A round is one ``await`` of a group of storage calls issued together (in parallel); the
    number of rounds is the number of sequential storage round trips the reply waited for.
    Recorded where the calls are made, so /metrics (and bench/coordinator.py) can show it.
    """

    rounds: list[tuple[str, int]] = field(default_factory=list)

    def add(self, name: str, calls: int) -> None:
        if calls:
            self.rounds.append((name, calls))

    @property
    def calls(self) -> int:
        return sum(n for _, n in self.rounds)


# ------------------------------------------------------------------------------ state


@dataclass
class PartitionState:
    """Offsets handed out in one partition and which of them are not yet resolved."""

    leo: int = 0
    unresolved: dict[int, int] = field(default_factory=dict)  # base -> end (exclusive)
    open_first: dict[int, int] = field(default_factory=dict)  # pid -> first offset (open txn)

    def hw(self) -> int:
        return min(self.unresolved) if self.unresolved else self.leo

    def lso(self) -> int:
        hw = self.hw()
        return min(hw, min(self.open_first.values())) if self.open_first else hw


@dataclass
class Reservation:
    topic: str
    partition: int
    base: int
    count: int
    pid: int
    tid: str | None
    confirmed: bool = False
    created: float = field(default_factory=time.monotonic)


@dataclass
class ProducerState:
    pid: int
    epoch: int
    tid: str | None  # owning transactional id (None: idempotent producer)
    member: bool = False
    # "topic-p" -> [[epoch, base_seq, count, base_offset], ...] (last SEQ_HISTORY)
    seqs: dict[str, list[list[int]]] = field(default_factory=dict)


@dataclass
class Txn:
    tid: str
    pid: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    start_ms: int = -1
    last_update_ms: int = 0
    members: dict[str, int] = field(default_factory=dict)  # member_key -> member pid
    partitions: dict[str, list[Any]] = field(default_factory=dict)  # "t-p" -> [topic, p]
    reservations: list[tuple[str, int, int]] = field(default_factory=list)
    offsets: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] | None = None
    batch_id: int | None = None
    last_committed_batch: int | None = None
    last: dict[str, Any] | None = None  # the previous transaction: pid, epoch, outcome, reason
    last_heartbeat: float = field(default_factory=time.monotonic)
    # Set while an EndTxn(commit) waits for the next log write to be planned with the
    # others that arrived meanwhile (Engine._join_commit); the reply resolves it.
    ending: asyncio.Future[dict[str, Any]] | None = field(default=None, repr=False,
                                                          compare=False)

    def member_pids(self) -> set[int]:
        return set(self.members.values())

    @property
    def completing(self) -> bool:
        """Prepared, or its commit waits to be prepared: nothing may join or change it."""
        return self.state.is_prepare or self.ending is not None


@dataclass
class _Ending:
    """An EndTxn(commit) waiting to be planned with the others at the next log write."""

    txn: Txn
    committed: set[int]
    reason: str
    batch_id: int | None
    verified: list[list[Any]]
    trace: CommitTrace
    future: asyncio.Future[dict[str, Any]] | None = None


def _share_markers(plans: list[dict[str, Any]]) -> None:
    """Mark runs of markers at consecutive offsets of one partition, from transactions
    planned together, as one object: ``plan["shared"]`` gets ``[topic, p, object base]``.

    Only commit markers with no .txnindex entry in that partition share (an aborted
    member's range is indexed by its own marker object's name). The plans are in the
    Prepare records, so a restarted coordinator writes the same objects.
    """
    runs: dict[tuple[str, int], list[Any]] = {}  # (t, p) -> [object base, end, [plans]]
    done: list[list[Any]] = []
    for plan in plans:
        indexed = {(t, p) for t, p, _b, _e in plan["txnindex"]}
        for t, p, base, ms in plan["markers"]:
            if (t, p) in indexed:
                continue
            run = runs.get((t, p))
            if run is not None and run[1] == base:
                run[1] += len(ms)
                run[2].append(plan)
                continue
            if run is not None:
                done.append([t, p, run])
            runs[(t, p)] = [base, base + len(ms), [plan]]
    done += [[t, p, run] for (t, p), run in runs.items()]
    for t, p, (base, _end, members) in done:
        if len(members) > 1:
            for plan in members:
                plan.setdefault("shared", []).append([t, p, base])


_CONTROL = {1: ControlType.COMMIT, 0: ControlType.ABORT}


def _marker_bytes(plan: dict[str, Any], base: int, ms: list[list[int]]) -> bytes:
    """The control batches of one transaction's markers in one partition (deterministic:
    a restart rebuilds the same bytes from the Prepare record)."""
    return encode_markers([Marker(_CONTROL[typ], pid, ep, plan["cepoch"], plan["ts"])
                           for pid, ep, typ in ms], base_offset=base)


class Engine:
    """All coordinator state and operations; owned by one asyncio loop."""

    def __init__(self, storage: Storage, *, max_transaction_timeout_ms: int = 900_000,
                 transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000,
                 reservation_timeout_ms: int = 60_000, stable_keep: int = 10,
                 io_threads: int = 64) -> None:
        self.storage = storage
        self.max_timeout_ms = max_transaction_timeout_ms
        self.expiration_ms = transactional_id_expiration_ms
        self.reservation_timeout_ms = reservation_timeout_ms
        self.stable_keep = stable_keep
        self.coordinator_epoch = -1
        self.takeover_offsets: list[int] = []
        self.next_pid = 0
        self.pid_limit = 0
        self.topics: dict[str, dict[str, Any]] = {}
        self.partitions: dict[str, PartitionState] = {}
        self.producers: dict[int, ProducerState] = {}
        self.txns: dict[str, Txn] = {}
        self.reservations: dict[tuple[str, int, int], Reservation] = {}
        self.group_offsets: dict[str, dict[str, int]] = {}
        # Completed transactions that still hold LSOs back (see hw_lso): [{"commit": bool,
        # "parts": {"t-p": [first offset, end of its records, end of its markers]}}].
        self.held: list[dict[str, Any]] = []
        self.log: TxnLog | None = None
        self.stable_seq = 0
        self.stable_written: stable.StableSnapshot | None = None
        self._stable_waiters: list[asyncio.Future[int]] = []
        self._stable_wake: asyncio.Event | None = None
        self._completions: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._forming: list[_Ending] | None = None  # commits waiting for the next log write
        self._tasks: list[asyncio.Task[Any]] = []
        self.metrics: Any = None  # set by the server (prometheus objects)
        self._metric_cache: dict[tuple[str, tuple[str, ...]], Any] = {}
        # Storage calls block (fsync, HTTP): own pools, so markers of many transactions go
        # out in parallel and never queue behind (or in front of) the stable snapshot.
        self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="coord-io")
        self._stable_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coord-stable")
        self._prune_task: asyncio.Task[Any] | None = None
        # (HW, LSO) per partition of the newest stable snapshot at takeover; see hw_lso.
        self._floor: dict[str, tuple[int, int]] = {}

    # ======================================================================== apply
    def _apply(self, rec: LogRecord) -> None:
        getattr(self, f"_apply_{rec.kind}")(rec.data)

    def _apply_takeover(self, d: dict[str, Any]) -> None:
        self.coordinator_epoch = d["epoch"]
        self.takeover_offsets.append(d["log_offset"])
        self.next_pid = max(self.next_pid, self.pid_limit)  # skip the rest of a used block

    def _apply_pid_block(self, d: dict[str, Any]) -> None:
        self.pid_limit = d["limit"]
        self.next_pid = max(self.next_pid, d["start"])

    def _apply_producer(self, d: dict[str, Any]) -> None:
        self.producers[d["pid"]] = ProducerState(d["pid"], d["epoch"], None)
        self.next_pid = max(self.next_pid, d["pid"] + 1)

    def _apply_topic(self, d: dict[str, Any]) -> None:
        self.topics[d["name"]] = {"partitions": d["partitions"], "config": d.get("config", {})}
        for p in range(d["partitions"]):
            self.partitions.setdefault(pkey(d["name"], p), PartitionState())

    def _apply_member(self, d: dict[str, Any]) -> None:
        txn = self.txns[d["tid"]]
        txn.members[d["key"]] = d["pid"]
        self.producers[d["pid"]] = ProducerState(d["pid"], 0, d["tid"], member=True)
        self.next_pid = max(self.next_pid, d["pid"] + 1)
        txn.last_heartbeat = time.monotonic()

    def _apply_batch(self, d: dict[str, Any]) -> None:
        self.txns[d["tid"]].batch_id = d["batch_id"]

    def _apply_reserve(self, d: dict[str, Any]) -> None:
        pid, epoch, tid = d["pid"], d["epoch"], d.get("tid")
        ps = self.producers[pid]
        txn = self.txns.get(tid) if tid is not None else None
        for topic, p, seq, count, base in d["parts"]:
            key = pkey(topic, p)
            part = self.partitions.setdefault(key, PartitionState())
            part.leo = max(part.leo, base + count)
            part.unresolved[base] = base + count
            hist = ps.seqs.setdefault(key, [])
            if hist and hist[-1][0] != epoch:
                hist.clear()
            hist.append([epoch, seq, count, base])
            del hist[:-SEQ_HISTORY]
            self.reservations[(topic, p, base)] = Reservation(topic, p, base, count, pid, tid)
            if txn is not None:
                txn.partitions[key] = [topic, p]
                txn.reservations.append((topic, p, base))
                part.open_first.setdefault(pid, base)
        if txn is not None:
            txn.last_heartbeat = time.monotonic()

    def _resolve(self, topic: str, p: int, base: int) -> None:
        self.partitions[pkey(topic, p)].unresolved.pop(base, None)
        res = self.reservations.get((topic, p, base))
        if res is not None:
            res.confirmed = True
            if res.tid is None:
                del self.reservations[(topic, p, base)]

    def _apply_confirm(self, d: dict[str, Any]) -> None:
        for topic, p, base in d["parts"]:
            self._resolve(topic, p, base)

    def _apply_fence(self, d: dict[str, Any]) -> None:
        for topic, p, base in d["parts"]:
            self._resolve(topic, p, base)

    def _apply_offsets(self, d: dict[str, Any]) -> None:
        self.txns[d["tid"]].offsets.append({"group": d["group"], "offsets": d["offsets"]})

    def _apply_txn(self, d: dict[str, Any]) -> None:
        tid = d["tid"]
        if d.get("tombstone"):
            txn = self.txns.pop(tid, None)
            if txn is not None:
                self.producers.pop(txn.pid, None)
            return
        ext = d.get("ext") or {}
        state = TxnState(d["state"])
        txn = self.txns.get(tid)
        if txn is None:
            txn = self.txns[tid] = Txn(tid, d["pid"], d["epoch"], d["timeout_ms"])
        if txn.pid != d["pid"]:
            self.producers.pop(txn.pid, None)
        txn.pid, txn.epoch, txn.timeout_ms = d["pid"], d["epoch"], d["timeout_ms"]
        self.producers.setdefault(txn.pid, ProducerState(txn.pid, txn.epoch, tid))
        self.producers[txn.pid].epoch = txn.epoch
        self.next_pid = max(self.next_pid, txn.pid + 1)
        txn.last_update_ms = d["last_update_ms"]
        txn.start_ms = d["start_ms"]
        if "last" in ext:
            txn.last = ext["last"]
        if "batch_id" in ext:
            txn.batch_id = ext["batch_id"]
        if state is TxnState.ONGOING and txn.state is not TxnState.ONGOING:
            txn.last_heartbeat = time.monotonic()
        if state.is_prepare:
            self._apply_prepare(txn, ext["plan"])
        elif state.is_complete:
            self._apply_complete(txn, state)
        txn.state = state

    def _apply_prepare(self, txn: Txn, plan: dict[str, Any]) -> None:
        txn.plan = plan
        for topic, p, base in plan["verified"]:
            self._resolve(topic, p, base)
        for topic, p, base, markers in plan["markers"]:
            part = self.partitions.setdefault(pkey(topic, p), PartitionState())
            part.leo = max(part.leo, base + len(markers))
            part.unresolved[base] = base + len(markers)

    def _apply_complete(self, txn: Txn, state: TxnState) -> None:
        plan = txn.plan or {}
        self._hold(txn, plan, commit=state is TxnState.COMPLETE_COMMIT)
        for topic, p, base, _markers in plan.get("markers", []):
            self.partitions[pkey(topic, p)].unresolved.pop(base, None)
        pids = {txn.pid, *txn.member_pids()}
        for topic, p, base in txn.reservations:
            self._resolve(topic, p, base)
            self.reservations.pop((topic, p, base), None)
        for key in txn.partitions:
            part = self.partitions[key]
            for pid in pids:
                part.open_first.pop(pid, None)
        if state is TxnState.COMPLETE_COMMIT:
            for entry in txn.offsets:
                group = self.group_offsets.setdefault(entry["group"], {})
                for topic, p, offset in entry["offsets"]:
                    group[pkey(topic, p)] = offset
            if plan.get("batch_id") is not None:
                txn.last_committed_batch = plan["batch_id"]
        for pid in txn.member_pids():
            self.producers.pop(pid, None)
        txn.members.clear()
        txn.partitions.clear()
        txn.reservations.clear()
        txn.offsets.clear()
        txn.last = {"pid": txn.pid, "epoch": txn.epoch,
                    "outcome": "commit" if state is TxnState.COMPLETE_COMMIT else "abort",
                    "reason": plan.get("reason", "client")}
        if plan.get("next_pid") is not None and plan["next_pid"] != txn.pid:
            self.producers.pop(txn.pid, None)
            txn.pid = plan["next_pid"]
            self.producers[txn.pid] = ProducerState(txn.pid, 0, txn.tid)
        txn.epoch = plan.get("next_epoch", txn.epoch)
        self.producers[txn.pid].epoch = txn.epoch
        txn.plan = None

    def _hold(self, txn: Txn, plan: dict[str, Any], commit: bool) -> None:
        """Remember, per partition where a completed transaction has records, its first
        offset, the end of its records and the end of its markers, for as long as it holds
        LSOs back (see hw_lso)."""
        ranges: dict[str, list[int]] = {}
        for t, p, b in txn.reservations:
            res = self.reservations.get((t, p, b))
            end = b + (res.count if res is not None else 1)
            key = pkey(t, p)
            first, data_end, _ = ranges.get(key, [b, end, end])
            ranges[key] = [min(first, b), max(data_end, end), max(data_end, end)]
        for topic, p, base, markers in plan.get("markers", []):
            rng = ranges.get(pkey(topic, p))
            if rng is not None:  # markers where it wrote nothing hide nothing
                rng[2] = max(rng[2], base + len(markers))
        if ranges:
            self.held.append({"commit": commit, "parts": ranges})

    # ==================================================================== snapshots
    def to_snapshot(self) -> dict[str, Any]:
        """The full state as JSON-able data (what ``from_snapshot`` restores)."""
        return {
            "version": 1,
            "coordinator_epoch": self.coordinator_epoch,
            "takeover_offsets": self.takeover_offsets,
            "next_pid": self.next_pid, "pid_limit": self.pid_limit,
            "topics": self.topics,
            "partitions": {k: [v.leo, sorted(v.unresolved.items()), sorted(v.open_first.items())]
                           for k, v in self.partitions.items()},
            "producers": [[p.pid, p.epoch, p.tid, p.member, p.seqs]
                          for p in self.producers.values()],
            "reservations": [[r.topic, r.partition, r.base, r.count, r.pid, r.tid, r.confirmed]
                             for r in self.reservations.values()],
            "txns": [{"tid": t.tid, "pid": t.pid, "epoch": t.epoch, "timeout_ms": t.timeout_ms,
                      "state": int(t.state), "start_ms": t.start_ms,
                      "last_update_ms": t.last_update_ms, "members": t.members,
                      "partitions": t.partitions, "reservations": t.reservations,
                      "offsets": t.offsets, "plan": t.plan, "batch_id": t.batch_id,
                      "last_committed_batch": t.last_committed_batch, "last": t.last}
                     for t in self.txns.values()],
            "group_offsets": self.group_offsets,
            "held": self.held,
        }

    def from_snapshot(self, s: dict[str, Any]) -> None:
        if s.get("version") != 1:
            raise KafkaStorageError(f"unknown coordinator snapshot version {s.get('version')}")
        self.coordinator_epoch = s["coordinator_epoch"]
        self.takeover_offsets = list(s["takeover_offsets"])
        self.next_pid, self.pid_limit = s["next_pid"], s["pid_limit"]
        self.topics = s["topics"]
        self.partitions = {k: PartitionState(v[0], {int(a): b for a, b in v[1]},
                                             {int(a): b for a, b in v[2]})
                           for k, v in s["partitions"].items()}
        self.producers = {p[0]: ProducerState(p[0], p[1], p[2], p[3], p[4])
                          for p in s["producers"]}
        self.reservations = {(r[0], r[1], r[2]): Reservation(r[0], r[1], r[2], r[3], r[4], r[5],
                                                             r[6])
                             for r in s["reservations"]}
        self.txns = {}
        for t in s["txns"]:
            txn = Txn(t["tid"], t["pid"], t["epoch"], t["timeout_ms"], TxnState(t["state"]),
                      t["start_ms"], t["last_update_ms"], dict(t["members"]),
                      dict(t["partitions"]), [tuple(r) for r in t["reservations"]],
                      list(t["offsets"]), t["plan"], t["batch_id"], t["last_committed_batch"],
                      t["last"])
            self.txns[txn.tid] = txn
        self.group_offsets = s["group_offsets"]
        self.held = [dict(e) for e in s.get("held", [])]

    # ===================================================================== plumbing
    def _commit(self, records: list[LogRecord]) -> asyncio.Future[None]:
        """Apply records to memory and queue them for the log, in one synchronous step."""
        assert self.log is not None
        for rec in records:
            self._apply(rec)
        return self.log.append(records)

    def _txn_record(self, txn: Txn, state: TxnState, **ext: Any) -> LogRecord:
        """Kafka's TransactionLogValue for ``txn`` entering ``state`` (ext: our extras)."""
        check_transition(txn.tid, txn.state, state)
        start = txn.start_ms
        if state is TxnState.ONGOING and txn.state is not TxnState.ONGOING:
            start = now_ms()
        elif state is TxnState.EMPTY:
            start = -1
        parts = None
        if state is not TxnState.EMPTY:
            by_topic: dict[str, list[int]] = {}
            for topic, p in txn.partitions.values():
                by_topic.setdefault(topic, []).append(p)
            parts = [[t, sorted(ps)] for t, ps in sorted(by_topic.items())]
            if state.is_complete:
                parts = []
        return LogRecord("txn", {
            "tid": txn.tid, "pid": ext.pop("pid", txn.pid), "epoch": ext.pop("epoch", txn.epoch),
            "timeout_ms": ext.pop("timeout_ms", txn.timeout_ms), "state": int(state),
            "partitions": parts, "last_update_ms": now_ms(), "start_ms": start, "ext": ext})

    def _alloc_pids(self, n: int, records: list[LogRecord]) -> list[int]:
        """Producer ids from the current block; logs a new block record when needed."""
        out = []
        for _ in range(n):
            if self.next_pid >= self.pid_limit:
                rec = LogRecord("pid_block", {"id": "", "start": self.pid_limit,
                                              "limit": self.pid_limit + PID_BLOCK})
                self._apply(rec)
                records.append(rec)
            out.append(self.next_pid)
            self.next_pid += 1
        return out

    def _txn(self, tid: str) -> Txn:
        txn = self.txns.get(tid)
        if txn is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} is unknown: call init_producer_id first")
        return txn

    def _check_epoch(self, txn: Txn, pid: int, epoch: int) -> None:
        if pid != txn.pid:
            raise ProducerFencedError(
                f"producer id {pid} is not the current producer of {txn.tid!r} "
                f"(now {txn.pid}): fenced by a newer instance")
        if epoch < txn.epoch and not unsafe("no_epoch_check"):  # planted-bug switch
            raise ProducerFencedError(
                f"epoch {epoch} of {txn.tid!r} was fenced: the current epoch is {txn.epoch}")
        if epoch > txn.epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of {txn.tid!r} is ahead of the coordinator's {txn.epoch}")

    def _check_timeout(self, timeout_ms: int) -> int:
        if not isinstance(timeout_ms, int) or not 1 <= timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {timeout_ms} must be in [1, {self.max_timeout_ms}] "
                "(--max-transaction-timeout-ms)")
        return timeout_ms

    def _metric(self, name: str, *labels: str) -> Any:
        """The prometheus child for ``name{labels}``, cached: ``labels()`` takes a lock and
        builds a key, and the commit path asks several times per transaction."""
        if self.metrics is None:
            return None
        key = (name, labels)
        m = self._metric_cache.get(key)
        if m is None:
            m = getattr(self.metrics, name)
            m = self._metric_cache[key] = m.labels(*labels) if labels else m
        return m

    # ================================================================== recovery
    def load(self, recovered: Any) -> None:
        """The state recovery found: the snapshot, then the records after it."""
        if recovered.snapshot is not None:
            self.from_snapshot(recovered.snapshot)
        for rec in recovered.records:
            self._apply(rec)

    async def start(self, log_factory: Any, recovered: Any) -> None:
        """Load snapshot + records, take the log over, roll Prepare* transactions forward."""
        self.load(recovered)
        self.log = log_factory(self, recovered)
        self.log.start()
        epoch = self.coordinator_epoch + 1
        await self._commit([LogRecord("takeover", {
            "id": "", "epoch": epoch, "log_offset": self.log.next_offset, "ms": now_ms(),
            "pid": os.getpid()})])
        prev = await self._run_io(stable.read_latest_stable, self.storage)
        if prev is not None:
            self._floor = dict(prev.partitions)
        loop = asyncio.get_running_loop()
        self._stable_wake = asyncio.Event()
        self._tasks.append(loop.create_task(self._stable_loop(), name="stable"))
        self._tasks.append(loop.create_task(self._timer_loop(), name="timers"))
        for txn in list(self.txns.values()):
            txn.last_heartbeat = time.monotonic()
            if txn.state.is_prepare:
                log.info("rolling forward %s of %r", txn.state.kafka_name, txn.tid)
                self._spawn_completion(txn)
        await self.request_stable()

    async def stop(self) -> None:
        """Graceful: let running completions finish their durable steps, then stop loops."""
        pending = [t for t in self._completions.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=30)
        if self.log is not None:
            await self.log.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._prune_task is not None:
            await asyncio.gather(self._prune_task, return_exceptions=True)
        self._io.shutdown(wait=False)
        self._stable_io.shutdown(wait=False)

    # ================================================================ producer ids
    async def init_producer_id(self, tid: str | None, timeout_ms: int = 60_000
                               ) -> dict[str, Any]:
        self._check_timeout(timeout_ms)
        records: list[LogRecord] = []
        if tid is None:
            (pid,) = self._alloc_pids(1, records)
            rec = LogRecord("producer", {"id": str(pid), "pid": pid, "epoch": 0})
            self._apply(rec)
            records.append(rec)
            await self.log.append(records)  # type: ignore[union-attr]
            return {"producer_id": pid, "epoch": 0}
        if not isinstance(tid, str) or not tid:
            raise InvalidRequestError("transactional_id must be a non-empty string")
        while True:
            txn = self.txns.get(tid)
            if txn is None or txn.state is TxnState.DEAD:
                (pid,) = self._alloc_pids(1, records)
                txn = self.txns[tid] = Txn(tid, pid, 0, timeout_ms)
                records.append(self._txn_record(txn, TxnState.EMPTY, pid=pid, epoch=0))
                # _txn_record validated; apply the record (it sets the producer state too)
                await self._commit_prebuilt(records)
                log.debug("init_producer_id %r -> pid %d epoch 0", tid, pid)
                return {"producer_id": pid, "epoch": 0}
            if txn.completing:
                await self._completion(txn)
                continue
            if txn.state is TxnState.ONGOING:
                # Fence the previous instance: abort with the epoch bumped (Kafka's
                # PrepareEpochFence + PrepareAbort, in one durable record).
                await self._end(txn, commit=False, committed=set(), reason="fenced")
                continue
            pid, epoch = self._bumped(txn, records)
            records.append(self._txn_record(txn, TxnState.EMPTY, pid=pid, epoch=epoch,
                                            timeout_ms=timeout_ms,
                                            last={"pid": txn.pid, "epoch": txn.epoch,
                                                  "outcome": "abort", "reason": "fenced"}))
            await self._commit_prebuilt(records)
            log.debug("init_producer_id %r -> pid %d epoch %d", tid, pid, epoch)
            return {"producer_id": pid, "epoch": epoch}

    def _commit_prebuilt(self, records: list[LogRecord]) -> asyncio.Future[None]:
        """Like _commit for a list whose pid_block records were already applied."""
        assert self.log is not None
        self._apply_prebuilt(records)
        return self.log.append(records)

    def _apply_prebuilt(self, records: list[LogRecord]) -> None:
        """Apply records, but not pid_block ones: _alloc_pids applied those already."""
        for rec in records:
            if rec.kind != "pid_block":
                self._apply(rec)

    def _bumped(self, txn: Txn, records: list[LogRecord]) -> tuple[int, int]:
        """The (pid, epoch) after a bump: epoch + 1, or a new producer id when exhausted."""
        if txn.epoch + 1 >= MAX_EPOCH:
            (pid,) = self._alloc_pids(1, records)
            return pid, 0
        return txn.pid, txn.epoch + 1

    # =================================================================== members
    async def add_member(self, tid: str, pid: int, epoch: int, member_key: str
                         ) -> dict[str, Any]:
        txn = self._txn(tid)
        self._check_epoch(txn, pid, epoch)
        if not isinstance(member_key, str) or not member_key:
            raise InvalidRequestError("member_key must be a non-empty string")
        if member_key in txn.members:
            await self.log.sync()  # type: ignore[union-attr]
            self._check_epoch(txn, pid, epoch)
            return {"producer_id": txn.members[member_key], "epoch": 0}
        if txn.completing:
            raise ConcurrentTransactionsError(
                f"{tid!r} is completing its transaction; members cannot join it")
        records: list[LogRecord] = []
        if txn.state is not TxnState.ONGOING:
            records.append(self._txn_record(txn, TxnState.ONGOING))
        (mpid,) = self._alloc_pids(1, records)
        records.append(LogRecord("member", {"id": tid, "tid": tid, "key": member_key,
                                            "pid": mpid}))
        await self._commit_prebuilt(records)
        log.debug("add_member %r key %s -> pid %d", tid, member_key, mpid)
        return {"producer_id": mpid, "epoch": 0}

    def _writer(self, pid: int, epoch: int) -> tuple[ProducerState, Txn | None]:
        """The producer state for a write by (pid, epoch) and its transaction, checked."""
        ps = self.producers.get(pid)
        if ps is None:
            if 0 <= pid < self.next_pid:
                raise ProducerFencedError(
                    f"producer id {pid} was handed out, but its transaction has ended (a "
                    "member of a finished transaction, or a replaced producer id): fenced")
            raise InvalidProducerIdMappingError(f"producer id {pid} was never handed out")
        if ps.tid is None:
            if epoch != ps.epoch:
                raise InvalidProducerEpochError(f"producer {pid} has epoch {ps.epoch}, "
                                                f"not {epoch}")
            return ps, None
        txn = self.txns.get(ps.tid)
        if txn is None:
            raise InvalidProducerIdMappingError(f"transactional id {ps.tid!r} expired")
        if ps.member:
            if pid not in txn.member_pids() or txn.state is not TxnState.ONGOING \
                    or txn.completing:
                raise ProducerFencedError(
                    f"member producer {pid} belongs to a transaction of {ps.tid!r} that has "
                    "ended or is ending")
            if epoch != 0:
                raise InvalidProducerEpochError(f"member producer {pid} has epoch 0")
            return ps, txn
        self._check_epoch(txn, pid, epoch)
        if txn.completing:
            raise ConcurrentTransactionsError(
                f"{ps.tid!r} is completing its transaction; begin the next one after it")
        return ps, txn

    # ================================================================= reserve
    async def _partition_count(self, topic: str) -> int:
        meta = self.topics.get(topic)
        if meta is not None:
            return int(meta["partitions"])
        try:
            layout.validate_topic(topic)
        except FormatInvalidTopicError as exc:
            raise InvalidTopicError(str(exc)) from None
        try:
            tm = await self._run_io(topics.read_topic, self.storage, topic)
        except topics.UnknownTopicError as exc:
            raise UnknownTopicOrPartitionError(str(exc)) from None
        if topic not in self.topics:
            await self._commit([LogRecord("topic", {"id": topic, "name": topic,
                                                    "partitions": tm.partitions,
                                                    "config": dict(tm.config)})])
        return tm.partitions

    async def reserve(self, pid: int, epoch: int, parts: list[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
        if not parts:
            raise InvalidRequestError("reserve needs at least one partition")
        for part in parts:
            n = await self._partition_count(part["topic"])
            if not isinstance(part["partition"], int) or not 0 <= part["partition"] < n:
                raise UnknownTopicOrPartitionError(
                    f"topic {part['topic']!r} has {n} partitions; no partition "
                    f"{part['partition']!r}")
            if not isinstance(part["count"], int) or part["count"] < 1:
                raise InvalidRequestError(f"count must be >= 1, got {part['count']!r}")
        ps, txn = self._writer(pid, epoch)
        out: list[dict[str, Any]] = []
        new: list[list[Any]] = []
        seen: set[str] = set()
        for part in parts:
            topic, p, seq, count = part["topic"], part["partition"], part["base_sequence"], \
                part["count"]
            key = pkey(topic, p)
            if key in seen:
                raise InvalidRequestError(f"partition {key} named twice in one reserve")
            seen.add(key)
            hist = [h for h in ps.seqs.get(key, []) if h[0] == epoch]
            expected = hist[-1][1] + hist[-1][2] if hist else 0
            if seq == expected:
                new.append([topic, p, seq, count])
                out.append({"topic": topic, "partition": p, "base_offset": None})
                continue
            dup = next((h for h in hist if h[1] == seq and h[2] == count), None)
            if dup is not None:
                out.append({"topic": topic, "partition": p, "base_offset": dup[3]})
            elif hist and seq < expected:
                raise DuplicateSequenceError(
                    f"producer {pid} partition {key}: sequence {seq} was already reserved "
                    f"(next expected {expected}) with a different count")
            else:
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch} partition {key}: sequence {seq}, "
                    f"expected {expected}")
        if not new:
            await self.log.sync()  # type: ignore[union-attr]
            return out
        records: list[LogRecord] = []
        if txn is not None and not ps.member and txn.state is not TxnState.ONGOING:
            records.append(self._txn_record(txn, TxnState.ONGOING))
        assigned = [[topic, p, seq, count,
                     self.partitions.setdefault(pkey(topic, p), PartitionState()).leo]
                    for topic, p, seq, count in new]
        records.append(LogRecord("reserve", {"id": str(pid), "pid": pid, "epoch": epoch,
                                             "tid": ps.tid, "parts": assigned}))
        fut = self._commit(records)
        it = iter(assigned)
        for item in out:
            if item["base_offset"] is None:
                item["base_offset"] = next(it)[4]
        self._metric_inc("reservations")
        await fut
        faults.point("after_reserve")
        log.debug("reserve pid %d epoch %d -> %s", pid, epoch, assigned)
        return out

    def _metric_inc(self, name: str, *labels: str, amount: float = 1) -> None:
        m = self._metric(name, *labels)
        if m is not None:
            m.inc(amount)

    def _to_confirm(self, parts: list[dict[str, Any]], pids: set[int], whose: str
                    ) -> dict[int, list[list[Any]]]:
        """The reservations among ``parts`` still to confirm, by producer; one reserved by a
        producer outside ``pids`` is refused (Confirm and EndTxn's ``written``)."""
        todo: dict[int, list[list[Any]]] = {}
        for part in parts:
            key = (part["topic"], part["partition"], part["base_offset"])
            res = self.reservations.get(key)
            if res is None:
                continue  # already resolved (a retry) or never ours: nothing to move
            if res.pid not in pids:
                raise InvalidRequestError(
                    f"offset {key[2]} of {key[0]}-{key[1]} was reserved by producer {res.pid}, "
                    f"not {whose}")
            if not res.confirmed:
                todo.setdefault(res.pid, []).append(list(key))
        return todo

    async def confirm(self, pid: int, epoch: int, parts: list[dict[str, Any]],
                      wait_stable: bool = False) -> dict[str, Any]:
        todo = self._to_confirm(parts, {pid}, str(pid)).get(pid)
        if todo:
            await self._commit([LogRecord("confirm", {"id": str(pid), "pid": pid,
                                                      "parts": todo})])
        else:
            await self.log.sync()  # type: ignore[union-attr]
        txn = self.txns.get(self.producers[pid].tid or "") if pid in self.producers else None
        if txn is not None:
            txn.last_heartbeat = time.monotonic()
        if wait_stable:
            await self.request_stable()
        return {}

    async def heartbeat(self, tid: str, pid: int, epoch: int) -> dict[str, Any]:
        txn = self._txn(tid)
        if pid == txn.pid:
            self._check_epoch(txn, pid, epoch)
        elif pid not in txn.member_pids() or txn.state is not TxnState.ONGOING:
            raise ProducerFencedError(
                f"producer {pid} is not a member of the open transaction of {tid!r}")
        txn.last_heartbeat = time.monotonic()
        return {"state": txn.state.kafka_name}

    # ============================================================ consumer offsets
    async def _ensure_offsets_topic(self) -> None:
        name = layout.CONSUMER_OFFSETS_TOPIC
        if name in self.topics:
            return
        await self.create_topic(name, OFFSETS_PARTITIONS, {"cleanup.policy": "compact"},
                                exist_ok=True)

    async def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str,
                          offsets: list[dict[str, Any]]) -> dict[str, Any]:
        """AddOffsetsToTxn + TxnOffsetCommit: OffsetCommit records in the transaction."""
        if not isinstance(group_id, str) or not group_id:
            raise InvalidRequestError("group_id must be a non-empty string")
        if not offsets:
            raise InvalidRequestError("offsets must not be empty")
        await self._ensure_offsets_topic()
        txn = self._txn(tid)
        self._check_epoch(txn, pid, epoch)
        if txn.completing:
            raise ConcurrentTransactionsError(f"{tid!r} is completing its transaction")
        topic = layout.CONSUMER_OFFSETS_TOPIC
        p = offsets_partition(group_id)
        ps = self.producers[pid]
        hist = [h for h in ps.seqs.get(pkey(topic, p), []) if h[0] == epoch]
        seq = hist[-1][1] + hist[-1][2] if hist else 0
        count = len(offsets)
        res = await self.reserve(pid, epoch, [{"topic": topic, "partition": p,
                                               "base_sequence": seq, "count": count}])
        base = res[0]["base_offset"]
        ts = now_ms()
        recs = []
        for o in offsets:
            key, value = encode_offset_commit(group_id, o["topic"], o["partition"],
                                              o["offset"], o.get("metadata", ""), ts)
            recs.append((key, value, [], ts))
        data = encode_batch(recs, base_offset=base, producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)
        path = layout.segment_path(topic, p, base)
        ok = await self._storage(self.storage.put_if_absent, path, data)
        if not ok or txn.state is not TxnState.ONGOING or (txn.pid, txn.epoch) != (pid, epoch):
            raise ProducerFencedError(
                f"the transaction of {tid!r} ended before its offsets were written")
        await self._commit([
            LogRecord("confirm", {"id": str(pid), "pid": pid, "parts": [[topic, p, base]]}),
            LogRecord("offsets", {"id": tid, "tid": tid, "group": group_id,
                                  "offsets": [[o["topic"], o["partition"], o["offset"]]
                                              for o in offsets]})])
        return {"partition": p, "base_offset": base}

    async def committed_offsets(self, group_id: str) -> dict[str, int]:
        await self.log.sync()  # type: ignore[union-attr]
        return dict(self.group_offsets.get(group_id, {}))

    # ================================================================== storage
    def _run_io(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    def _object_written(self, kind: str, n: int = 1) -> None:
        self._metric_inc("objects_written", kind, amount=n)

    async def _storage(self, fn: Any, *args: Any) -> Any:
        try:
            return await self._run_io(fn, *args)
        except StorageError as exc:
            self._metric_inc("storage_errors")
            raise KafkaStorageError(str(exc)) from exc

    # =================================================================== end txn
    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool,
                      members: list[int] | None = None, batch_id: int | None = None,
                      written: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """EndTxn; ``written`` confirms the caller's own reservations in the same step.

        Folding the last Confirm into EndTxn saves an RPC and a log wait per transaction:
        the confirm record is queued right before Prepare, so it is durable when the reply
        (which waits for Prepare and more) is sent, exactly as if Confirm had been called.
        """
        txn = self._txn(tid)
        want = "commit" if commit else "abort"
        if batch_id is not None and txn.last_committed_batch is not None \
                and batch_id <= txn.last_committed_batch:
            await self.log.sync()  # type: ignore[union-attr]
            return {"outcome": "commit", "producer_id": txn.pid, "epoch": txn.epoch,
                    "batch_committed": True}
        last = txn.last
        if last is not None and last["pid"] == pid and last["epoch"] == epoch and \
                (pid, epoch) != (txn.pid, txn.epoch):
            return await self._late_end(txn, want, last)
        self._check_epoch(txn, pid, epoch)
        if txn.ending is not None:  # a retry while its commit waits to be prepared
            if not commit:
                raise InvalidTxnStateError(f"{tid!r} is committing its transaction; "
                                           "cannot abort")
            return await asyncio.shield(txn.ending)
        if batch_id is not None and txn.batch_id != batch_id:
            raise InvalidTxnStateError(
                f"{tid!r} runs batch {txn.batch_id}, not batch {batch_id}")
        if txn.state.is_prepare and not (unsafe("abort_after_prepare") and not commit):
            if (txn.state is TxnState.PREPARE_COMMIT) != commit:
                raise InvalidTxnStateError(
                    f"{tid!r} is already in {txn.state.kafka_name}; cannot {want}")
            return await self._completion(txn)
        if txn.state is not TxnState.ONGOING:
            if commit:
                raise InvalidTxnStateError(
                    f"{tid!r} has no open transaction to commit (state "
                    f"{txn.state.kafka_name}): begin one and send or add members first")
            await self.log.sync()  # type: ignore[union-attr]
            return {"outcome": "abort", "producer_id": txn.pid, "epoch": txn.epoch}
        mpids = txn.member_pids()
        if members is None:
            committed = set(mpids)
        else:
            committed = {int(m) for m in members}
            unknown = committed - mpids
            if unknown:
                raise InvalidTxnStateError(
                    f"producers {sorted(unknown)} are not members of the open transaction of "
                    f"{tid!r} (members: {sorted(mpids)})")
        committed.add(txn.pid)
        if written:
            self._confirm_in_end(txn, written)
        return await self._end(txn, commit=commit, committed=committed if commit else set(),
                               reason="client", batch_id=batch_id)

    def _confirm_in_end(self, txn: Txn, written: list[dict[str, Any]]) -> None:
        """Apply and queue a confirm of reservations of ``txn``'s producers (not awaited:
        the Prepare queued after it is, and the log is sequential)."""
        todo = self._to_confirm(written, {txn.pid, *txn.member_pids()},
                                f"by a producer of {txn.tid!r}")
        for rpid, parts in todo.items():
            self._commit([LogRecord("confirm", {"id": str(rpid), "pid": rpid, "parts": parts})])

    async def _late_end(self, txn: Txn, want: str, last: dict[str, Any]) -> dict[str, Any]:
        """A retry of an EndTxn whose transaction already completed (epoch since bumped)."""
        await self.log.sync()  # type: ignore[union-attr]
        if last["reason"] == "client" and (last["outcome"] == want
                                           or unsafe("abort_after_prepare")):
            return {"outcome": want, "producer_id": txn.pid, "epoch": txn.epoch}
        if last["reason"] == "timeout":
            raise InvalidProducerEpochError(
                f"the transaction of {txn.tid!r} at epoch {last['epoch']} was aborted after "
                "transaction.timeout.ms without heartbeat; init the producer again")
        if last["reason"] == "fenced":
            raise ProducerFencedError(
                f"{txn.tid!r} epoch {last['epoch']} was fenced by a newer instance")
        raise InvalidTxnStateError(
            f"the transaction of {txn.tid!r} at epoch {last['epoch']} already ended with "
            f"{last['outcome']}, not {want}")

    async def _completion(self, txn: Txn) -> dict[str, Any]:
        task = self._completions.get(txn.tid)
        if task is None or (task.done() and txn.state.is_prepare):
            task = self._spawn_completion(txn)
        return await asyncio.shield(task)

    def _spawn_completion(self, txn: Txn) -> asyncio.Task[dict[str, Any]]:
        task = asyncio.get_running_loop().create_task(self._complete(txn),
                                                      name=f"complete-{txn.tid}")
        self._completions[txn.tid] = task
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    async def _end(self, txn: Txn, *, commit: bool, committed: set[int], reason: str,
                   batch_id: int | None = None) -> dict[str, Any]:
        """Prepare (durable plan) then complete; the only way a transaction ends."""
        t0 = time.monotonic()
        trace = CommitTrace()
        verified: list[list[Any]] = []
        while commit and (missing := self._unconfirmed(txn, committed, verified)):
            verified += await self._verify_written(txn, missing)
            trace.add("verify", len(missing))
            if txn.state is not TxnState.ONGOING:
                raise ConcurrentTransactionsError(f"{txn.tid!r} changed state; retry")
        faults.point("before_prepare")
        task: asyncio.Future[dict[str, Any]]
        if commit:
            task = self._join_commit(_Ending(txn, committed, reason, batch_id, verified, trace))
        else:
            records: list[LogRecord] = []
            plan = self._plan(txn, commit, committed, reason, batch_id, verified, records)
            records.append(self._txn_record(txn, TxnState.PREPARE_ABORT, plan=plan))
            fut = self._commit_prebuilt(records)
            task = self._spawn_completion_after(txn, fut, trace)
            log.debug("PrepareAbort %r pid %d epoch %d: %d marker objects, %d fences",
                      txn.tid, txn.pid, txn.epoch, len(plan["markers"]), len(plan["fences"]))
        result = await asyncio.shield(task)
        m = self._metric("commit_latency")
        if m is not None and commit:
            m.observe(time.monotonic() - t0)
        self._metric_observe("commit_round_trips", len(trace.rounds))
        self._metric_observe("commit_storage_calls", trace.calls)
        return result

    def _metric_observe(self, name: str, value: float) -> None:
        m = self._metric(name)
        if m is not None:
            m.observe(value)

    # ------------------------------------------------------------ grouped commits
    def _join_commit(self, ending: _Ending) -> asyncio.Future[dict[str, Any]]:
        """Queue a commit to be prepared just before the next log object is cut.

        Commits that arrive while a log write is in flight would wait for the next write
        anyway; planning them together there gives their markers consecutive offsets in
        each partition, so one object holds the markers of all of them (one put instead of
        one per transaction) and one append holds their Complete records. Nothing waits
        longer than before: the group is sealed when the log is ready to write.
        """
        assert self.log is not None
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        ending.txn.ending = ending.future = fut
        self._completions[ending.txn.tid] = fut
        if self._forming is None:
            self._forming = []
            try:
                self.log.before_next_write(self._seal_commits)
            except BaseException:
                self._forming = None
                ending.txn.ending = None
                self._completions.pop(ending.txn.tid, None)
                raise
        self._forming.append(ending)
        return fut

    def _seal_commits(self) -> None:
        """Plan every waiting commit, in arrival order, and queue their Prepare records in
        one append (durable together: the log never splits an append)."""
        group, self._forming = self._forming or [], None
        try:
            self._seal(group)
        except BaseException as exc:  # a bug: no caller may wait forever for its answer
            for e in group:
                e.txn.ending = None
                self._fail_ending(e, exc)
            raise

    def _seal(self, group: list[_Ending]) -> None:
        records: list[LogRecord] = []
        sealed: list[_Ending] = []
        ts = now_ms()
        for e in group:
            e.txn.ending = None
            try:
                recs: list[LogRecord] = []
                plan = self._plan(e.txn, True, e.committed, e.reason, e.batch_id, e.verified,
                                  recs, ts=ts)
                recs.append(self._txn_record(e.txn, TxnState.PREPARE_COMMIT, plan=plan))
            except Exception as exc:  # this commit fails, not the group
                self._fail_ending(e, exc)
                continue
            self._apply_prebuilt(recs)
            records += recs
            sealed.append(e)
        if not sealed:
            return
        _share_markers([e.txn.plan for e in sealed])  # type: ignore[misc]
        try:
            prepared = self.log.append(records)  # type: ignore[union-attr]
        except Exception as exc:  # the log failed: the process stops
            for e in sealed:
                self._fail_ending(e, exc)
            return
        log.debug("PrepareCommit of %d transactions", len(sealed))
        task = asyncio.get_running_loop().create_task(self._complete_group(sealed, prepared),
                                                      name=f"commit-{sealed[0].txn.tid}")
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    @staticmethod
    def _fail_ending(e: _Ending, exc: BaseException) -> None:
        if e.future is not None and not e.future.done():
            e.future.set_exception(exc)
            e.future.exception()  # retrieved: a caller may be gone

    async def _complete_group(self, group: list[_Ending], prepared: asyncio.Future[None]
                              ) -> None:
        """Markers (shared objects), then all Complete records in one append, one stable
        snapshot, then every reply."""
        try:
            await prepared
            for e in group:
                e.trace.add("prepare", 1)
            faults.point("after_prepare")
            plans = [e.txn.plan for e in group]
            calls = await self._write_plans(plans, None)  # type: ignore[arg-type]
            for e in group:
                e.trace.add("markers", calls)
            records = [self._txn_record(e.txn, TxnState.COMPLETE_COMMIT) for e in group]
            fut = self._commit(records)
            await asyncio.gather(fut, self.request_stable())
            for e in group:
                e.trace.add("complete+stable", 2)
                self._metric_inc("transactions", "commit")
            faults.point("after_complete_before_reply")
        except BaseException as exc:
            for e in group:
                self._fail_ending(e, exc)
            raise
        for e in group:
            if e.future is not None and not e.future.done():
                e.future.set_result({"outcome": "commit", "producer_id": e.txn.pid,
                                     "epoch": e.txn.epoch})

    def _spawn_completion_after(self, txn: Txn, prepared: asyncio.Future[None],
                                trace: CommitTrace | None = None
                                ) -> asyncio.Task[dict[str, Any]]:
        async def run() -> dict[str, Any]:
            await prepared
            if trace is not None:
                trace.add("prepare", 1)  # the log object holding Prepare (group-committed)
            faults.point("after_prepare")
            return await self._complete(txn, trace)
        task = asyncio.get_running_loop().create_task(run(), name=f"end-{txn.tid}")
        self._completions[txn.tid] = task
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    def _unconfirmed(self, txn: Txn, committed: set[int], verified: list[list[Any]]
                     ) -> list[tuple[str, int, int]]:
        return [(t, p, b) for t, p, b in txn.reservations
                if (r := self.reservations.get((t, p, b))) is not None and not r.confirmed
                and r.pid in committed and [t, p, b] not in verified]

    async def _verify_written(self, txn: Txn, missing: list[tuple[str, int, int]]
                              ) -> list[list[Any]]:
        """A commit never includes a reservation that is not written: check storage."""
        sizes = await asyncio.gather(*(self._storage(self._size_or_none,
                                                     layout.segment_path(t, p, b))
                                       for t, p, b in missing))
        absent = [m for m, s in zip(missing, sizes, strict=True) if not s]
        if absent:
            raise InvalidTxnStateError(
                f"cannot commit {txn.tid!r}: reserved offsets were never written "
                f"(topic, partition, offset): {absent}; abort the transaction")
        return [list(m) for m in missing]

    def _size_or_none(self, path: str) -> int | None:
        try:
            return self.storage.size(path)
        except FileNotFoundError:
            return None

    def _plan(self, txn: Txn, commit: bool, committed: set[int], reason: str,
              batch_id: int | None, verified: list[list[Any]], records: list[LogRecord],
              ts: int | None = None) -> dict[str, Any]:
        """Every object the completion writes, fixed before any is written."""
        ts = now_ms() if ts is None else ts
        pids_in: dict[str, dict[int, int]] = {}  # "t-p" -> pid -> first offset
        for t, p, b in txn.reservations:
            firsts = pids_in.setdefault(pkey(t, p), {})
            pid = self.reservations[(t, p, b)].pid if (t, p, b) in self.reservations else None
            if pid is not None:
                firsts[pid] = min(firsts.get(pid, b), b)
        txn_pids = {txn.pid, *txn.member_pids()}
        markers, txnindex, fences = [], [], []
        for key, (topic, p) in sorted(txn.partitions.items()):
            part = self.partitions[key]
            firsts = pids_in.get(key, {})
            if not firsts:
                continue
            base = part.leo
            ms = []
            entries = []
            others = [f for pid, f in part.open_first.items() if pid not in txn_pids]
            for i, pid in enumerate(sorted(firsts)):
                ok = commit and pid in committed
                ep = txn.epoch if pid == txn.pid else 0
                ms.append([pid, ep, 1 if ok else 0])
                if not ok:
                    lso = min([*others, base + i + 1])
                    entries.append([pid, firsts[pid], base + i, lso])
            markers.append([topic, p, base, ms])
            if entries:
                txnindex.append([topic, p, base, entries])
        for t, p, b in txn.reservations:
            r = self.reservations.get((t, p, b))
            if r is None or r.confirmed or [t, p, b] in verified:
                continue
            if not (commit and r.pid in committed):
                fences.append([t, p, b])
        next_pid, next_epoch = self._bumped(txn, records)
        return {"outcome": "commit" if commit else "abort", "ts": ts,
                "cepoch": self.coordinator_epoch, "markers": markers, "txnindex": txnindex,
                "fences": fences, "verified": verified, "reason": reason,
                "batch_id": batch_id if batch_id is not None else txn.batch_id,
                "next_pid": next_pid, "next_epoch": next_epoch}

    async def _complete(self, txn: Txn, trace: CommitTrace | None = None) -> dict[str, Any]:
        """Write every planned object (idempotent), then Complete* + stable snapshot."""
        plan = txn.plan
        assert plan is not None and txn.state.is_prepare, (txn.tid, txn.state)
        commit = txn.state is TxnState.PREPARE_COMMIT
        calls = await self._write_plans([plan], txn.tid)
        if trace is not None:
            trace.add("markers", calls)
        state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        rec = self._txn_record(txn, state)
        fut = self._commit([rec])
        await asyncio.gather(fut, self.request_stable())
        if trace is not None:
            trace.add("complete+stable", 2)  # in parallel: one round trip
        self._metric_inc("transactions", plan["outcome"])
        log.debug("%s %r -> pid %d epoch %d", state.kafka_name, txn.tid, txn.pid, txn.epoch)
        faults.point("after_complete_before_reply")
        return {"outcome": plan["outcome"], "producer_id": txn.pid, "epoch": txn.epoch}

    async def _write_plans(self, plans: list[dict[str, Any]], alone: str | None) -> int:
        """Write every object of ``plans``, retrying storage errors until it succeeds (a
        prepared transaction is only ever rolled forward); returns the call count.

        ``alone``: the transactional id when one transaction completes by itself (recovery,
        a retry): objects it shares with others then hold the markers of every transaction
        still prepared; None when ``plans`` is a whole group (see _seal_commits).
        """
        attempt = 0
        while True:
            try:
                return await self._write_plans_once(plans, alone is not None)
            except KafkaStorageError as exc:
                attempt += 1
                log.warning("completing %s: storage error (attempt %d): %s",
                            repr(alone) if alone else "a group of commits", attempt, exc)
                await asyncio.sleep(min(5.0, 0.1 * 2 ** attempt))

    async def _write_plans_once(self, plans: list[dict[str, Any]], alone: bool) -> int:
        """Fences, markers and .txnindex objects, all in parallel.

        Fences need not precede markers (docs/coordinator.md, "Fences in parallel with
        markers"): a zombie write that beats its fence lands *below* the ABORT marker of its
        producer id, inside the aborted range, and nothing is visible before Complete* is
        applied, which only happens after every one of these puts has succeeded.
        """
        async def fence(t: str, p: int, b: int) -> None:
            # False = the data object is there (a late writer); its ABORT marker covers it.
            if await self._storage(self.storage.put_if_absent, layout.segment_path(t, p, b),
                                   b""):
                self._object_written("fence")

        async def markers(t: str, p: int, base: int, mine: list[bytes], data: bytes) -> None:
            path = layout.segment_path(t, p, base)
            if not await self._storage(self.storage.put_if_absent, path, data):
                # A shared object written before some of its transactions completed alone
                # (after a restart) holds more markers than are still prepared: ours must
                # be in it, byte for byte (their offsets are in the bytes).
                held = b"" if (t, p, base) not in shared_objs else \
                    await self._storage(self.storage.get, path)
                if not held or not all(m in held for m in mine):
                    log.critical("marker object %s holds other bytes: offset reused?", path)
                    raise KafkaStorageError(f"marker object {path} holds other bytes")
            self._object_written("marker")
            faults.point("after_marker")

        async def index(t: str, p: int, base: int, entries: list[list[int]]) -> None:
            data = encode_txn_index([AbortedTxn(*e) for e in entries])
            path = layout.segment_path(t, p, base, layout.TXNINDEX_SUFFIX)
            if not await self._storage(self.storage.put_if_absent, path, data):
                raise KafkaStorageError(f"txnindex object {path} holds other bytes")
            self._object_written("txnindex")

        jobs = []
        objects: dict[tuple[str, int, int], dict[int, bytes]] = {}  # object -> base -> bytes
        mine: dict[tuple[str, int, int], list[bytes]] = {}
        shared_objs: set[tuple[str, int, int]] = set()
        for plan in plans:
            jobs += [fence(*f) for f in plan["fences"]]
            jobs += [index(*i) for i in plan["txnindex"]]
            in_object = {(t, p): b for t, p, b in plan.get("shared", [])}
            shared_objs.update((t, p, b) for t, p, b in plan.get("shared", []))
            for t, p, base, ms in plan["markers"]:
                data = _marker_bytes(plan, base, ms)
                obj = (t, p, in_object.get((t, p), base))
                objects.setdefault(obj, {})[base] = data
                mine.setdefault(obj, []).append(data)
        if alone and shared_objs:
            for other in self.txns.values():  # the others still prepared in shared objects
                if other.plan is None or not other.state.is_prepare:
                    continue
                for t, p, b in other.plan.get("shared", []):
                    if (t, p, b) in shared_objs:
                        for ot, op, base, ms in other.plan["markers"]:
                            if (ot, op) == (t, p):
                                objects[(t, p, b)][base] = _marker_bytes(other.plan, base, ms)
        for (t, p, base), parts in objects.items():
            data = b"".join(parts[b] for b in sorted(parts))
            jobs.append(markers(t, p, base, mine[(t, p, base)], data))
        await asyncio.gather(*jobs)
        return len(jobs)

    # =================================================================== streaming
    async def begin_batch(self, tid: str, batch_id: int, timeout_ms: int = 60_000
                          ) -> dict[str, Any]:
        """Begin (or join) the transaction of streaming batch ``batch_id`` (DESIGN 6.3)."""
        if not isinstance(batch_id, int) or batch_id < 0:
            raise InvalidRequestError(f"batch_id must be an int >= 0, got {batch_id!r}")
        while True:
            txn = self.txns.get(tid)
            if txn is None:
                await self.init_producer_id(tid, timeout_ms)
                continue
            if txn.last_committed_batch is not None and batch_id <= txn.last_committed_batch:
                await self.log.sync()  # type: ignore[union-attr]
                return {"state": "committed"}
            if txn.completing:
                await self._completion(txn)
                continue
            if txn.batch_id is not None and batch_id < txn.batch_id:
                raise ProducerFencedError(
                    f"{tid!r} already runs batch {txn.batch_id}; batch {batch_id} is older "
                    "(another copy of the query?)")
            if txn.batch_id == batch_id:
                await self.log.sync()  # type: ignore[union-attr]
                if txn.batch_id == batch_id and not txn.state.is_prepare:
                    return {"producer_id": txn.pid, "epoch": txn.epoch}
                continue
            if txn.state is TxnState.ONGOING:
                log.info("%r: batch %d begins while batch %s is open: aborting it", tid,
                         batch_id, txn.batch_id)
                await self._end(txn, commit=False, committed=set(), reason="fenced")
                continue
            await self._commit([LogRecord("batch", {"id": tid, "tid": tid,
                                                    "batch_id": batch_id})])
            return {"producer_id": txn.pid, "epoch": txn.epoch}

    # ==================================================================== topics
    async def create_topic(self, name: str, partitions: int,
                           config: dict[str, Any] | None = None, exist_ok: bool = False
                           ) -> dict[str, Any]:
        try:
            layout.validate_topic(name)
        except FormatInvalidTopicError as exc:
            raise InvalidTopicError(str(exc)) from None
        if isinstance(partitions, bool) or not isinstance(partitions, int) \
                or not 1 <= partitions <= topics.MAX_PARTITIONS:
            raise InvalidPartitionsError(f"partitions must be in [1, {topics.MAX_PARTITIONS}]")
        cfg = {str(k): str(v) for k, v in (config or {}).items()}
        meta = await self._storage(topics.create_topic, self.storage, name, partitions, cfg)
        if (meta.partitions != partitions or dict(meta.config) != cfg) and not exist_ok:
            raise TopicAlreadyExistsError(
                f"topic {name!r} exists with {meta.partitions} partitions and config "
                f"{dict(meta.config)}")
        if name not in self.topics:
            await self._commit([LogRecord("topic", {"id": name, "name": name,
                                                    "partitions": meta.partitions,
                                                    "config": dict(meta.config)})])
        else:
            await self.log.sync()  # type: ignore[union-attr]
        await self.request_stable()
        return await self.describe_topic(name)

    async def describe_topic(self, name: str) -> dict[str, Any]:
        n = await self._partition_count(name)
        view = self.hw_lso()
        parts = []
        for p in range(n):
            st = self.partitions.get(pkey(name, p), PartitionState())
            hw, lso = view.get(pkey(name, p), (st.hw(), st.lso()))
            parts.append({"partition": p, "leo": st.leo, "hw": hw, "lso": lso})
        return {"name": name, "partitions": n, "config": self.topics[name]["config"],
                "offsets": parts}

    async def list_topics(self) -> list[str]:
        names = set(await self._storage(topics.list_topics, self.storage)) | set(self.topics)
        return sorted(names)

    def describe_txn(self, tid: str) -> dict[str, Any]:
        txn = self._txn(tid)
        return {"transactional_id": tid, "producer_id": txn.pid, "epoch": txn.epoch,
                "state": txn.state.kafka_name, "members": txn.members,
                "partitions": sorted(txn.partitions), "batch_id": txn.batch_id,
                "last_committed_batch": txn.last_committed_batch, "timeout_ms": txn.timeout_ms}

    # ============================================================ stable snapshots
    def hw_lso(self) -> dict[str, tuple[int, int]]:
        """Every partition's (HW, LSO) as readers may trust them.

        Below the first offset of any transaction not yet Complete (Kafka's LSO), and held
        back further by completed transactions:
        - an aborted one holds a partition at its first offset there until the HW has passed
          its ABORT marker (Kafka keeps such a transaction "unreplicated" for the same
          reason): readers ignore objects at or above the HW, so until then they cannot see
          the marker and the .txnindex entry that hide its records;
        - a committed one not yet wholly below the LSO in some partition holds every one of
          its partitions at its first offset there, to the greatest fixpoint, so a reader
          sees it in all partitions or in none (per-partition LSOs alone would tear it when
          it lies behind another producer's open transaction in one partition).
        Published LSOs never go backwards: while a transaction was open, each of its
        partitions' LSO was already at or below its first offset there, and a held
        transaction is released only once nothing can hold it again.
        """
        out = {}
        for name, meta in self.topics.items():
            for p in range(int(meta["partitions"])):
                st = self.partitions.get(pkey(name, p))
                out[pkey(name, p)] = (st.hw(), st.lso()) if st else (0, 0)
        self._hold_back(out)
        self._apply_floor(out)
        return out

    def _apply_floor(self, out: dict[str, tuple[int, int]]) -> None:
        """Never publish less than the previous coordinator did.

        A stable snapshot is written in parallel with the Complete records it reflects (that
        is what keeps a commit at 3 round trips), and confirms are applied before they are
        durable. So a coordinator that dies there has published HW/LSOs its log does not
        show yet, and its successor, until it has rolled those transactions forward (their
        Prepare is durable: same outcome, same markers) and the writers have confirmed
        again, computes lower ones. Everything below a published HW exists in storage
        (markers and data are written before what resolves them is applied) and every
        transaction below a published LSO is decided, so until this coordinator's own
        values catch up, it republishes those.
        """
        for key, (fhw, flso) in list(self._floor.items()):
            cur = out.get(key)
            if cur is None:
                continue
            if cur[0] >= fhw and cur[1] >= flso:
                del self._floor[key]
            else:
                out[key] = (max(cur[0], fhw), max(cur[1], flso))

    def _hold_back(self, out: dict[str, tuple[int, int]]) -> None:
        def holds(entry: dict[str, Any]) -> list[str]:
            """Partitions the entry must hold at its first offset under ``out``."""
            parts = entry["parts"]
            # Records below the LSO but their markers at or above the HW: readers may not
            # have seen the .txnindex that hides aborted records (of an aborted transaction,
            # or of the members a commit left out), so hold those partitions.
            held = [k for k, (_f, _d, marker_end) in parts.items()
                    if out.get(k, (0, 0))[0] < marker_end]
            # A commit whose records are not all below the LSO somewhere holds everywhere.
            if entry["commit"] and any(out.get(k, (0, 0))[1] < data_end
                                       for k, (_f, data_end, _m) in parts.items()):
                return list(parts)
            return held

        pending = list(self.held)
        while pending:
            lowered: set[str] = set()
            for entry in pending:
                for key in holds(entry):
                    first = entry["parts"][key][0]
                    hw, lso = out.get(key, (0, 0))
                    if lso > first:
                        out[key] = (hw, first)
                        lowered.add(key)
            # Only entries in a partition whose LSO just moved can change their answer.
            pending = [e for e in self.held if lowered & e["parts"].keys()]
        self.held = [e for e in self.held if holds(e)]

    def request_stable(self) -> asyncio.Future[int]:
        """A future that resolves once a stable snapshot taken after now is written."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._stable_waiters.append(fut)
        assert self._stable_wake is not None
        self._stable_wake.set()
        return fut

    async def _stable_loop(self) -> None:
        assert self._stable_wake is not None
        written = 0
        while True:
            await self._stable_wake.wait()
            self._stable_wake.clear()
            if not self._stable_waiters:
                continue
            waiters, self._stable_waiters = self._stable_waiters, []
            self.stable_seq += 1
            snap = stable.make_snapshot(self.coordinator_epoch, self.stable_seq, self.hw_lso())
            for attempt in range(1000):
                try:
                    ok = await asyncio.get_running_loop().run_in_executor(
                        self._stable_io, stable.write_stable, self.storage, snap)
                    break
                except StorageError as exc:
                    self._metric_inc("storage_errors")
                    log.warning("stable snapshot %s failed (attempt %d): %s", snap.path,
                                attempt + 1, exc)
                    await asyncio.sleep(min(5.0, 0.1 * 2 ** attempt))
            if not ok:
                log.critical("stable snapshot %s holds other bytes", snap.path)
            self.stable_written = snap
            for w in waiters:
                if not w.done():
                    w.set_result(snap.seq)
            self._object_written("stable")
            written += 1
            if written % 20 == 0 and (self._prune_task is None or self._prune_task.done()):
                # In the background: a LIST + DELETEs must not delay the next snapshot.
                self._prune_task = asyncio.get_running_loop().create_task(self._prune_stable())

    async def _prune_stable(self) -> None:
        with contextlib.suppress(StorageError):
            await self._run_io(stable.prune_stable, self.storage, self.stable_keep)

    # ===================================================================== timers
    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            try:
                await self._check_timers()
            except CoordinatorError as exc:
                log.warning("timer check failed: %s", exc)

    async def _check_timers(self) -> None:
        now = time.monotonic()
        wall = now_ms()
        for txn in list(self.txns.values()):
            if txn.state is TxnState.ONGOING and \
                    (now - txn.last_heartbeat) * 1000 > txn.timeout_ms and \
                    not (txn.tid in self._completions and not self._completions[txn.tid].done()):
                log.info("%r: no heartbeat for %d ms (timeout %d): aborting with an epoch bump",
                         txn.tid, (now - txn.last_heartbeat) * 1000, txn.timeout_ms)
                task = asyncio.get_running_loop().create_task(
                    self._end(txn, commit=False, committed=set(), reason="timeout"))
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
            elif txn.state.is_idle and wall - txn.last_update_ms > self.expiration_ms:
                log.info("%r: idle for %d ms: transactional id expires", txn.tid,
                         wall - txn.last_update_ms)
                await self._commit([LogRecord("txn", {"tid": txn.tid, "tombstone": True})])
        stale = [r for r in self.reservations.values()
                 if r.tid is None and not r.confirmed
                 and (now - r.created) * 1000 > self.reservation_timeout_ms]
        if stale:
            await self._fence_stale(stale)

    async def _fence_stale(self, stale: Iterable[Reservation]) -> None:
        """Idempotent reservations never confirmed: close them so the HW can move on."""
        parts = []
        for r in stale:
            path = layout.segment_path(r.topic, r.partition, r.base)
            await self._storage(self.storage.put_if_absent, path, b"")
            parts.append([r.topic, r.partition, r.base])
        log.info("fenced %d unconfirmed idempotent reservations", len(parts))
        await self._commit([LogRecord("fence", {"id": "", "parts": parts})])
        await self.request_stable()

    # =============================================================== observability
    def open_transactions(self) -> int:
        return sum(1 for t in self.txns.values() if not t.state.is_idle)
