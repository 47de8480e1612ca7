"""The coordinator's state and the one function that changes it: ``apply(record)``.

Kafka's TransactionStateManager keeps the metadata cache and loads it from
``__transaction_state``; here every change of every kind (producer ids, transactions,
members, reservations, topics, offsets) is a LogRecord, and ``CoordinatorState.apply`` is
the only code that changes the state. The request layer applies a record and queues it for
the log in one synchronous step (``runtime.Commits.commit``), and recovery applies the same
records after the snapshot, so live and replayed state are the same by construction.

Pure and synchronous: no asyncio, no storage. Reading the state to *build* records (pid
allocation, transitions, plans) never changes it; only ``apply`` does. The one exception,
named as such, is ``release_unreplicated``: it forgets completed transactions that can no
longer hold an LSO back, which changes no answer (see partition_state.visible_offsets).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from txnlog.log_format.stable import TailEntry

from ..errors import (
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTxnStateError,
    KafkaStorageError,
    ProducerFencedError,
)
from ..topic_config import effective_config
from .clean_state import PartitionCleaning, apply_compact, apply_compacted
from .completion_plan import CompletionPlan
from .merge_state import SMALL, PartitionMerges, apply_cleaned, apply_merge, apply_merged
from .partition_state import (
    PartitionOffset,
    PartitionState,
    ProducerState,
    Reservation,
    SeqEntry,
    UnreplicatedRange,
    UnreplicatedTxn,
    WrittenRun,
    partition_key,
)
from .retention_state import (
    RetainPlan,
    apply_log_start,
    apply_retain,
    apply_retained,
    restore_retention,
    retention_snapshot,
)
from .shared_state import SharedObjects
from .states import TxnState
from .txn_log_records import LogRecord
from .txn_metadata import Txn

PID_BLOCK = 1000
# How long an idempotent reservation the coordinator fenced is remembered, so that its
# writer's late confirm is refused (ProducerFenced) instead of taken for a retry of one that
# succeeded: an hour, far beyond any client's request timeout and retries.
FENCE_MEMORY_MS = 3600 * 1000
SNAPSHOT_VERSION = 1


@dataclass
class CoordinatorState:
    """Everything the coordinator's log describes (what a snapshot holds)."""

    coordinator_epoch: int = -1
    takeover_offsets: list[int] = field(default_factory=list)
    next_pid: int = 0
    pid_limit: int = 0
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    partitions: dict[str, PartitionState] = field(default_factory=dict)
    producers: dict[int, ProducerState] = field(default_factory=dict)
    txns: dict[str, Txn] = field(default_factory=dict)
    reservations: dict[PartitionOffset, Reservation] = field(default_factory=dict)
    group_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    # {group: {"t-p": [metadata, leader epoch]}} of committed offsets that carry either
    group_offset_meta: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    # {group: protocol type} of groups whose members committed offsets ("consumer"): what
    # ListGroups answers for the group once it is Empty, as Kafka keeps it
    group_protocols: dict[str, str] = field(default_factory=dict)
    # Completed transactions that may still hold LSOs back (Kafka's unreplicatedTxns; the
    # snapshot calls them "held"): see partition_state.visible_offsets.
    unreplicated: list[UnreplicatedTxn] = field(default_factory=list)
    # Per partition key: its merged objects, the merge under way, garbage (merge_state.py).
    merges: dict[str, PartitionMerges] = field(default_factory=dict)
    # Every partition was looked at for merging once (roots written before merging existed
    # convert by that sweep; a root that has it needs no sweep at start).
    merge_swept: bool = False
    # Kafka clients' transactional ids: tid -> [producer id, the epoch InitProducerId gave
    # the client (it keeps it across EndTxn), the coordinator epoch at the client's last
    # acknowledged transaction end] (kafka_txn.py; record kind kafka_client)
    kafka_clients: dict[str, list[int]] = field(default_factory=dict)
    # Per partition key of a compacted topic: its cleaner checkpoint and the compaction
    # under way (clean_state.py).
    cleanings: dict[str, PartitionCleaning] = field(default_factory=dict)
    # Retention and DeleteRecords (log_retention.py): log start offsets DeleteRecords asked
    # for, per partition key, and log start changes logged but not yet published.
    log_start_wanted: dict[str, int] = field(default_factory=dict)
    retain_planned: dict[str, RetainPlan] = field(default_factory=dict)
    # Topics deleted whose objects are not all deleted yet: name -> partitions.
    topics_deleting: dict[str, int] = field(default_factory=dict)
    # Each partition's confirmed runs in shared objects above M, and shared objects no run
    # names any more (shared_state.py).
    shared: SharedObjects = field(default_factory=SharedObjects)
    # Idempotent reservations the coordinator fenced (never confirmed in time), with the
    # fence's time: a late confirm of one must fail (its writer's put into its own shared
    # object cannot meet the fence, as a put into the partition's name did), so it is
    # remembered for FENCE_MEMORY_MS.
    fenced: dict[PartitionOffset, int] = field(default_factory=dict)
    # Told of every record just before it is applied (the stable publisher's change
    # journal, stable_changes.py): not state, never in a snapshot, kept across ``restore``.
    observers: list[Callable[[CoordinatorState, LogRecord], None]] = field(
        default_factory=list, compare=False, repr=False)

    # ================================================================== reading
    def txn(self, tid: str) -> Txn:
        """The transactional id's metadata, or InvalidProducerIdMapping."""
        txn = self.txns.get(tid)
        if txn is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} is unknown: call init_producer_id first")
        return txn

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's effective configs: what it sets (at creation or altered since) over
        Kafka's defaults — what merging, retention and compaction act on."""
        meta = self.topics.get(topic)
        return effective_config(meta.get("config") or {} if meta else {})

    def partition(self, key: str) -> PartitionState:
        """A partition's state (an empty one for a partition nothing was reserved in)."""
        return self.partitions.get(key) or PartitionState()

    def alloc_pids(self, n: int) -> tuple[list[int], list[LogRecord]]:
        """``n`` producer ids, and the ``pid_block`` records to apply with their use.

        Changes nothing: the ids are taken by applying the records that use them (producer,
        member, txn, or a Prepare whose plan moves to a new producer id), each of which moves
        ``next_pid`` past its id. So apply them before allocating again.
        """
        out: list[int] = []
        records: list[LogRecord] = []
        nxt, limit = self.next_pid, self.pid_limit
        for _ in range(n):
            if nxt >= limit:
                records.append(LogRecord("pid_block", {"id": "", "start": limit,
                                                       "limit": limit + PID_BLOCK}))
                nxt, limit = max(nxt, limit), limit + PID_BLOCK
            out.append(nxt)
            nxt += 1
        return out, records

    def bumped(self, txn: Txn) -> tuple[int, int, list[LogRecord]]:
        """The (pid, epoch) after a bump — epoch + 1, or a new producer id when the epoch
        is exhausted — and the pid_block records that id needs."""
        if txn.epoch_exhausted():
            (pid,), records = self.alloc_pids(1)
            return pid, 0, records
        return txn.pid, txn.epoch + 1, []

    def unconfirmed(self, txn: Txn, committed: set[int], verified: list[PartitionOffset]
                    ) -> list[PartitionOffset]:
        """Reservations of ``committed`` producers in ``txn`` not confirmed nor verified."""
        return [r for r in txn.reservations
                if (res := self.reservations.get(r)) is not None and not res.confirmed
                and res.pid in committed and r not in verified]

    def check_not_fenced(self, parts: list[WrittenRun], pid: int) -> None:
        """ProducerFenced if any of ``parts`` is an idempotent range fenced before its
        confirm (the writer's object landed, but nothing may name it now)."""
        fenced = [r for r in parts
                  if PartitionOffset(r.topic, r.partition, r.base) in self.fenced]
        if fenced:
            raise ProducerFencedError(
                f"producer {pid}: the offsets reserved at "
                f"{', '.join(f'{r.topic}-{r.partition}@{r.base}' for r in fenced)} were "
                "fenced before they were confirmed (not confirmed within the reservation "
                "timeout): they are not written")

    def to_confirm(self, parts: list[WrittenRun], pids: set[int], whose: str
                   ) -> dict[int, list[list[Any]]]:
        """The confirm record rows of the reservations among ``parts`` still to confirm,
        by producer; one reserved by a producer outside ``pids`` is refused (Confirm and
        EndTxn's ``written``). A row is ``[topic, p, base]`` for a range written as its own
        object, ``[topic, p, base, end, object, position, size]`` for a run in a shared
        object (its size is checked against nothing here: the writer's own bytes)."""
        todo: dict[int, list[list[Any]]] = {}
        for run in parts:
            key = PartitionOffset(run.topic, run.partition, run.base)
            res = self.reservations.get(key)
            if res is None:
                part = self.partitions.get(partition_key(run.topic, run.partition))
                if part is None or run.base >= part.leo:
                    # Never reserved here: a lazy reservation (a Spark task's) that a lost
                    # coordinator answered but never made durable. Skipping it would commit
                    # without its records.
                    raise InvalidTxnStateError(
                        f"offset {run.base} of {run.topic}-{run.partition} was never reserved "
                        f"on this coordinator ({whose}): its reservation was lost with the "
                        "coordinator before it was durable; abort and write again")
                continue  # resolved before (a retry): nothing to move
            if res.pid not in pids:
                raise InvalidRequestError(
                    f"offset {key.base} of {key.topic}-{key.partition} was reserved by "
                    f"producer {res.pid}, not {whose}")
            if not res.confirmed:
                row: list[Any] = [run.topic, run.partition, run.base]
                if run.path is not None:
                    row += [run.base + res.count, run.path, run.position, run.size]
                todo.setdefault(res.pid, []).append(row)
        return todo

    # ==================================================================== apply
    def apply(self, rec: LogRecord) -> None:
        """Make the change ``rec`` describes (live, and again on replay)."""
        for observe in self.observers:
            observe(self, rec)
        getattr(self, f"_apply_{rec.kind}")(rec.data)

    def apply_all(self, records: list[LogRecord]) -> None:
        for rec in records:
            self.apply(rec)

    def _apply_merge(self, d: dict[str, Any]) -> None:
        apply_merge(self.merges, d)

    def _apply_merged(self, d: dict[str, Any]) -> None:
        pm = self.merges.get(d["id"])
        plan = pm.planned if pm is not None else None
        apply_merged(self.merges, d)
        if plan is not None and pm is not None and pm.planned is None:
            small = [i.end_offset for i in plan.inputs if i.level == SMALL]
            if small:
                self.shared.drop_below(d["id"], max(small),
                                       int(d["ms"]) + max(plan.grace_ms, pm.grace_ms))

    def _apply_shared_cleaned(self, d: dict[str, Any]) -> None:
        """Shared objects no tail named, deleted after their grace period."""
        self.shared.cleaned([str(p) for p in d["paths"]])

    def _apply_cleaned(self, d: dict[str, Any]) -> None:
        apply_cleaned(self.merges, d)

    def _apply_compact(self, d: dict[str, Any]) -> None:
        apply_compact(self.cleanings, d)

    def _apply_compacted(self, d: dict[str, Any]) -> None:
        apply_compacted(self.cleanings, self.merges, d)

    def _apply_swept(self, d: dict[str, Any]) -> None:
        self.merge_swept = True

    def _apply_log_start(self, d: dict[str, Any]) -> None:
        apply_log_start(self.log_start_wanted, d)

    def _apply_retain(self, d: dict[str, Any]) -> None:
        apply_retain(self.retain_planned, d)

    def _apply_retained(self, d: dict[str, Any]) -> None:
        apply_retained(self.retain_planned, self.merges, d)

    def _apply_topic_delete(self, d: dict[str, Any]) -> None:
        """DeleteTopics (``done`` false): the topic is gone for every request at once; its
        partitions keep their log end offsets, and each partition's next manifest starts and
        has its log start there, so a topic re-created under the name continues after its
        predecessor's offsets: no offset, object name or reader's listing of the predecessor
        can be taken for the new topic's. ``done``: its objects are deleted and the new
        manifests written (``maintenance.log_retention``'s ``finish_deletes``)."""
        name = d["name"]
        if d.get("done"):
            # the manifests written at the delete carry seq + 1: the new topic plans from there
            for p in range(int(d["partitions"])):
                pm = self.merges.get(partition_key(name, p))
                if pm is not None and pm.start_offset > 0:
                    pm.seq += 1
            self.topics_deleting.pop(name, None)
            return
        meta = self.topics.pop(name, None)
        n = int(d.get("partitions") or (meta or {}).get("partitions", 0))
        self.topics_deleting[name] = max(n, self.topics_deleting.get(name, 0))
        for p in range(n):
            key = partition_key(name, p)
            leo = self.partition(key).leo
            old = self.merges.get(key)
            self.merges[key] = PartitionMerges(seq=old.seq if old else 0, start_offset=leo,
                                               log_start=leo)
            self.log_start_wanted.pop(key, None)
            self.retain_planned.pop(key, None)
            self.shared.drop_partition(key, int(d.get("ms", 0)))

    def _apply_topic_config(self, d: dict[str, Any]) -> None:
        """IncrementalAlterConfigs: the topic's whole config after the change."""
        self.topics[d["name"]]["config"] = dict(d["config"])

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
            self.partitions.setdefault(partition_key(d["name"], p), PartitionState())

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
        for topic, p, seq, count, base in d["parts"]:  # ReservedBatch rows
            key = partition_key(topic, p)
            part = self.partitions.setdefault(key, PartitionState())
            part.reserve(base, base + count)
            ps.record_batch(key, SeqEntry(epoch, seq, count, base))
            where = PartitionOffset(topic, p, base)
            self.reservations[where] = Reservation(topic, p, base, count, pid, tid)
            if txn is not None:
                txn.partitions[key] = [topic, p]
                txn.reservations.append(where)
                part.open_first.setdefault(pid, base)
        if txn is not None:
            txn.last_heartbeat = time.monotonic()

    def _resolve(self, topic: str, p: int, base: int) -> None:
        self.partitions[partition_key(topic, p)].unresolved.pop(base, None)
        where = PartitionOffset(topic, p, base)
        res = self.reservations.get(where)
        if res is not None:
            res.confirmed = True
            if res.tid is None:
                del self.reservations[where]

    def _apply_confirm(self, d: dict[str, Any]) -> None:
        """Reserved ranges were written (``confirm``) or closed by a 0-byte object
        (``fence``): either way they are resolved."""
        for row in d["parts"]:
            topic, p, base = row[0], row[1], row[2]
            self._resolve(topic, p, base)
            if len(row) == 7:  # a run in a shared object: part of the tail from now on
                self.shared.add(partition_key(topic, p),
                                TailEntry(base, row[3], row[4], row[5], row[6]))

    def _apply_fence(self, d: dict[str, Any]) -> None:
        """Reserved ranges closed by a 0-byte object (never written): resolved, and
        remembered so their writer's late confirm is refused (``ms``: idempotent fences,
        logged by the reservation timer; a transaction's fences are in its Prepare)."""
        for row in d["parts"]:
            self._resolve(row[0], row[1], row[2])
        if "ms" in d:
            ms = int(d["ms"])
            for row in d["parts"]:
                self.fenced[PartitionOffset(row[0], int(row[1]), int(row[2]))] = ms
            for k in [k for k, at in self.fenced.items() if at < ms - FENCE_MEMORY_MS]:
                del self.fenced[k]

    def _apply_offsets(self, d: dict[str, Any]) -> None:
        entry = {"group": d["group"], "offsets": d["offsets"]}
        if d.get("protocol_type"):
            entry["protocol_type"] = d["protocol_type"]
        self.txns[d["tid"]].offsets.append(entry)

    def _apply_group_delete(self, d: dict[str, Any]) -> None:
        """DeleteGroups / OffsetDelete (admin_ops): the group's committed offsets are
        forgotten, all of them or those of ``partitions``."""
        parts = d.get("partitions")
        group = self.group_offsets.get(d["group"], {})
        meta = self.group_offset_meta.get(d["group"], {})
        for topic, p in parts if parts is not None else []:
            group.pop(partition_key(topic, p), None)
            meta.pop(partition_key(topic, p), None)
        if parts is None or not group:
            self.group_offsets.pop(d["group"], None)
        if parts is None or not meta:
            self.group_offset_meta.pop(d["group"], None)
        if d["group"] not in self.group_offsets:
            self.group_protocols.pop(d["group"], None)

    def _offset_meta(self, group: str, key: str, extra: list[Any]) -> None:
        """A committed offset's [metadata, leader epoch] (none: "", -1)."""
        if extra:
            self.group_offset_meta.setdefault(group, {})[key] = list(extra)
        else:
            meta = self.group_offset_meta.get(group)
            if meta is not None:
                meta.pop(key, None)
                if not meta:
                    del self.group_offset_meta[group]

    def _apply_kafka_client(self, d: dict[str, Any]) -> None:
        # [pid, client epoch, coordinator epoch the client knows its transaction ended in]
        # (the third: -1 in roots written before it; kafka_txn.KafkaClients.translate)
        self.kafka_clients[d["tid"]] = [d["pid"], d["epoch"], d.get("acked", -1)]

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
            txn = self.txns[tid] = Txn(tid, d["pid"], d["epoch"], d["timeout_ms"],
                                       one_shot=bool(ext.get("one_shot")))
        txn.released = bool(ext.get("released"))
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
            self._apply_prepare(txn, CompletionPlan.from_json(ext["plan"]))
        elif state.is_complete:
            self._apply_complete(txn, state)
        txn.state = state

    def _apply_prepare(self, txn: Txn, plan: CompletionPlan) -> None:
        txn.plan = plan
        for topic, p, base in plan.verified:
            self._resolve(topic, p, base)
        for row in plan.markers:
            part = self.partitions.setdefault(partition_key(row.topic, row.partition),
                                              PartitionState())
            part.reserve(row.base, row.base + len(row.markers))
        if plan.next_pid is not None:  # a new producer id for after the bump is taken
            self.next_pid = max(self.next_pid, plan.next_pid + 1)

    def _apply_complete(self, txn: Txn, state: TxnState) -> None:
        plan = txn.plan
        commit = state is TxnState.COMPLETE_COMMIT
        self._add_unreplicated(txn, plan, commit)
        for row in plan.markers if plan is not None else []:
            self.partitions[partition_key(row.topic, row.partition)].unresolved.pop(row.base,
                                                                                   None)
        if plan is not None and plan.marker_object is not None:
            # the markers are written (Complete follows them): part of the tails now, with
            # the .txnindex entries of the transactions they abort (no object of their own)
            aborted = {(r.topic, r.partition, r.base): tuple(tuple(e) for e in r.entries)
                       for r in plan.txnindex}
            for row, (pos, size) in zip(plan.markers, plan.marker_runs, strict=True):
                self.shared.add(partition_key(row.topic, row.partition),
                                TailEntry(row.base, row.base + len(row.markers),
                                          plan.marker_object, pos, size,
                                          aborted.get((row.topic, row.partition, row.base),
                                                      ())))
        pids = txn.producer_pids()
        for where in txn.reservations:
            self._resolve(*where)
            self.reservations.pop(where, None)
        for key in txn.partitions:
            part = self.partitions[key]
            for pid in pids:
                part.open_first.pop(pid, None)
        if commit:
            for entry in txn.offsets:
                group = self.group_offsets.setdefault(entry["group"], {})
                for topic, p, offset, *extra in entry["offsets"]:
                    group[partition_key(topic, p)] = offset
                    self._offset_meta(entry["group"], partition_key(topic, p), extra)
                if entry.get("protocol_type"):
                    self.group_protocols[entry["group"]] = entry["protocol_type"]
            if plan is not None and plan.batch_id is not None:
                txn.last_committed_batch = plan.batch_id
        for pid in txn.member_pids():
            self.producers.pop(pid, None)
        txn.members.clear()
        txn.partitions.clear()
        txn.reservations.clear()
        txn.offsets.clear()
        txn.last = {"pid": txn.pid, "epoch": txn.epoch,
                    "outcome": "commit" if commit else "abort",
                    "reason": plan.reason if plan is not None else "client"}
        if plan is not None and plan.next_pid is not None and plan.next_pid != txn.pid:
            self.producers.pop(txn.pid, None)
            txn.pid = plan.next_pid
            self.producers[txn.pid] = ProducerState(txn.pid, 0, txn.tid)
        if plan is not None and plan.next_epoch is not None:
            txn.epoch = plan.next_epoch
        self.producers[txn.pid].epoch = txn.epoch
        txn.plan = None

    def _add_unreplicated(self, txn: Txn, plan: CompletionPlan | None, commit: bool) -> None:
        """Remember, per partition where a completed transaction has records, its first
        offset, the end of its records and the end of its markers, for as long as it holds
        LSOs back (see partition_state.visible_offsets)."""
        ranges: dict[str, UnreplicatedRange] = {}
        for where in txn.reservations:
            t, p, b = where
            res = self.reservations.get(where)
            end = b + (res.count if res is not None else 1)
            key = partition_key(t, p)
            first, data_end, _ = ranges.get(key, (b, end, end))
            ranges[key] = UnreplicatedRange(min(first, b), max(data_end, end),
                                            max(data_end, end))
        for row in plan.markers if plan is not None else []:
            key = partition_key(row.topic, row.partition)
            rng = ranges.get(key)
            if rng is not None:  # markers where it wrote nothing hide nothing
                ranges[key] = rng._replace(
                    marker_end=max(rng.marker_end, row.base + len(row.markers)))
        if ranges:
            self.unreplicated.append(UnreplicatedTxn(commit, ranges))

    def release_unreplicated(self, still: list[UnreplicatedTxn]) -> None:
        """Forget the completed transactions that no longer hold anything back (``still``
        is what ``visible_offsets`` found still holding). Changes no view: a released
        transaction can never hold again. The stable publisher calls this as it publishes."""
        self.unreplicated = still

    # ================================================================ snapshots
    def to_snapshot(self) -> dict[str, Any]:
        """The full state as JSON-able data (what ``from_snapshot`` restores).

        Typed rows (NamedTuples) serialise as the JSON lists they replaced, so the bytes
        are those of snapshots written before they were typed.
        """
        return {
            "version": SNAPSHOT_VERSION,
            "coordinator_epoch": self.coordinator_epoch,
            "takeover_offsets": self.takeover_offsets,
            "next_pid": self.next_pid, "pid_limit": self.pid_limit,
            "topics": self.topics,
            # Only partitions something was ever reserved in: the rest are a topic's
            # partitions in their initial state, which ``from_snapshot`` makes again from
            # ``topics``. A snapshot is serialized on the event loop, so its cost is what a
            # commit pays for the root's breadth: 20,001 partitions of which one
            # is written, 15 ms -> 2 ms per snapshot. Most written partitions have nothing
            # unresolved or open: no sort for them.
            "partitions": {k: [v.leo,
                               sorted(v.unresolved.items()) if v.unresolved else [],
                               sorted(v.open_first.items()) if v.open_first else []]
                           for k, v in self.partitions.items()
                           if v.leo or v.unresolved or v.open_first},
            "producers": [[p.pid, p.epoch, p.tid, p.member, p.seqs]
                          for p in self.producers.values()],
            "reservations": [[r.topic, r.partition, r.base, r.count, r.pid, r.tid, r.confirmed]
                             for r in self.reservations.values()],
            "txns": [{"tid": t.tid, "pid": t.pid, "epoch": t.epoch, "timeout_ms": t.timeout_ms,
                      "state": int(t.state), "start_ms": t.start_ms,
                      "last_update_ms": t.last_update_ms, "members": t.members,
                      "partitions": t.partitions, "reservations": t.reservations,
                      "offsets": t.offsets,
                      "plan": t.plan.to_json() if t.plan is not None else None,
                      "batch_id": t.batch_id,
                      "last_committed_batch": t.last_committed_batch, "last": t.last,
                      # only when set, so snapshots of reusable ids keep their old bytes
                      **({"one_shot": True} if t.one_shot else {}),
                      **({"released": True} if t.released else {})}
                     for t in self.txns.values()],
            "group_offsets": self.group_offsets,
            **({"group_offset_meta": self.group_offset_meta} if self.group_offset_meta
               else {}),
            **({"group_protocols": self.group_protocols} if self.group_protocols else {}),
            "held": [e.to_json() for e in self.unreplicated],
            # only when something was merged, so snapshots of unmerged roots keep their bytes
            **({"merges": {k: v.to_json() for k, v in self.merges.items()}}
               if self.merges else {}),
            **({"merge_swept": True} if self.merge_swept else {}),
            **({"kafka_clients": self.kafka_clients} if self.kafka_clients else {}),
            **({"cleanings": {k: v.to_json() for k, v in self.cleanings.items()}}
               if self.cleanings else {}),
            **retention_snapshot(self.log_start_wanted, self.retain_planned,
                                 self.topics_deleting),
            **self.shared.to_json(),
            **({"fenced": [[*k, ms] for k, ms in self.fenced.items()]} if self.fenced else {}),
        }

    @classmethod
    def from_snapshot(cls, s: dict[str, Any]) -> CoordinatorState:
        """The state a snapshot (``to_snapshot``, as JSON) describes."""
        if s.get("version") != SNAPSHOT_VERSION:
            raise KafkaStorageError(f"unknown coordinator snapshot version {s.get('version')}")
        st = cls(coordinator_epoch=s["coordinator_epoch"],
                 takeover_offsets=list(s["takeover_offsets"]),
                 next_pid=s["next_pid"], pid_limit=s["pid_limit"], topics=s["topics"],
                 group_offsets=s["group_offsets"],
                 group_offset_meta=s.get("group_offset_meta", {}),
                 group_protocols=s.get("group_protocols", {}))
        st.partitions = {k: PartitionState(v[0], {int(a): b for a, b in v[1]},
                                           {int(a): b for a, b in v[2]})
                         for k, v in s["partitions"].items()}
        for name, meta in st.topics.items():  # the partitions a snapshot leaves out
            for p in range(int(meta["partitions"])):
                st.partitions.setdefault(partition_key(name, p), PartitionState())
        st.producers = {p[0]: ProducerState(p[0], p[1], p[2], p[3],
                                            {k: [SeqEntry(*h) for h in hist]
                                             for k, hist in p[4].items()})
                        for p in s["producers"]}
        st.reservations = {PartitionOffset(r[0], r[1], r[2]):
                           Reservation(r[0], r[1], r[2], r[3], r[4], r[5], r[6])
                           for r in s["reservations"]}
        for t in s["txns"]:
            txn = Txn(t["tid"], t["pid"], t["epoch"], t["timeout_ms"], TxnState(t["state"]),
                      t["start_ms"], t["last_update_ms"], dict(t["members"]),
                      dict(t["partitions"]), [PartitionOffset(*r) for r in t["reservations"]],
                      list(t["offsets"]),
                      CompletionPlan.from_json(t["plan"]) if t["plan"] is not None else None,
                      t["batch_id"], t["last_committed_batch"], t["last"],
                      one_shot=bool(t.get("one_shot")), released=bool(t.get("released")))
            st.txns[txn.tid] = txn
        st.unreplicated = [UnreplicatedTxn.from_json(e) for e in s.get("held", [])]
        st.merges = {k: PartitionMerges.from_json(v) for k, v in s.get("merges", {}).items()}
        st.merge_swept = bool(s.get("merge_swept"))
        st.kafka_clients = {k: [*v, -1][:3] for k, v in s.get("kafka_clients", {}).items()}
        st.cleanings = {k: PartitionCleaning.from_json(v)
                        for k, v in s.get("cleanings", {}).items()}
        st.log_start_wanted, st.retain_planned, st.topics_deleting = restore_retention(s)
        st.shared = SharedObjects.from_json(s)
        st.fenced = {PartitionOffset(r[0], int(r[1]), int(r[2])): int(r[3])
                     for r in s.get("fenced", [])}
        return st

    def restore(self, s: dict[str, Any]) -> None:
        """Replace this state by a snapshot's, in place (the coordinator keeps one object)."""
        other = CoordinatorState.from_snapshot(s)
        other.observers = self.observers
        self.__dict__.update(other.__dict__)

    def load(self, snapshot: dict[str, Any] | None, records: list[LogRecord]) -> None:
        """Recovery: the snapshot, then the records after it."""
        if snapshot is not None:
            self.restore(snapshot)
        self.apply_all(records)
