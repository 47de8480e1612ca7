"""Ending a transaction: Prepare (a durable plan) -> markers -> Complete, grouped commits.

Kafka's TransactionMarkerChannelManager sends the markers and appends Complete* once every
partition has them; here the coordinator writes the marker objects itself (DESIGN 5.3):

1. (commit) named members' unconfirmed reservations are checked in storage;
2. Prepare{Commit,Abort} is logged with the whole plan (``CompletionPlan``): marker
   offsets, timestamp, coordinator epoch, fences, .txnindex entries — so a restarted
   coordinator rewrites the same bytes;
3. the markers of every partition (one shared object, ``CompletionPlan.marker_object``) and
   fences are written in parallel; the .txnindex entries of an abort are published with
   the markers' runs in the tails (plans logged before markers shared an object write one
   marker object and one .txnindex object per partition, as they did);
4. Complete* is logged and, in parallel, a stable snapshot is published; then the reply.

A transaction in Prepare* is only ever rolled forward: its objects are retried without limit
(``ROLL_FORWARD_RETRY``). Commits that arrive while a log write is in flight are planned
together at the next one (``PendingCommit``): their markers get consecutive offsets, so one
object per partition holds them all, and one append holds their Complete records.

Why a stable snapshot may be written while the Complete record is still in flight: every
change that can raise an HW or LSO is either already durable (Prepare, reservations), true
in storage (confirms follow a successful write; markers/fences are written before
Complete), or replayed identically after a crash (Prepare -> roll forward).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.codec.indexes import AbortedTxn, encode_txn_index
from txnlog.log_format.retry import RetryPolicy, retry_async

from .. import faults
from ..errors import ConcurrentTransactionsError, InvalidTxnStateError, KafkaStorageError
from ..state.completion_plan import (
    CompletionPlan,
    MarkerEntry,
    MarkerRow,
    TxnIndexRow,
    share_markers,
)
from ..state.coordinator_state import CoordinatorState
from ..state.partition_state import PartitionOffset, partition_key
from ..state.runtime import Commits, CommitTrace, Observer, StorageIO, spawn
from ..state.states import TxnState
from ..state.txn_log_records import LogRecord
from ..state.txn_metadata import Txn, now_ms

log = logging.getLogger("txnlog.coordinator.transaction.completion")

# A prepared transaction is never given up on: retry its objects until storage answers
# (waits 0.2, 0.4, ... up to 5 s, no jitter: one task per transaction).
ROLL_FORWARD_RETRY = RetryPolicy(max_attempts=None, base_delay_s=0.2, max_delay_s=5.0,
                                 jitter=False)

Reply = dict[str, Any]


@dataclass
class PendingCommit:
    """An EndTxn(commit) waiting to be planned with the others at the next log write."""

    txn: Txn
    committed: set[int]
    reason: str
    batch_id: int | None
    verified: list[PartitionOffset]
    trace: CommitTrace
    future: asyncio.Future[Reply] | None = None

    def fail(self, exc: BaseException) -> None:
        """Answer the caller with ``exc`` (retrieved: the caller may be gone)."""
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)
            self.future.exception()


class Completer:
    """Every transaction's end, from the durable plan to the reply."""

    def __init__(self, state: CoordinatorState, commits: Commits, io: StorageIO,
                 observer: Observer, request_stable: Callable[[], asyncio.Future[int]]
                 ) -> None:
        self.state = state
        self.commits = commits
        self.io = io
        self.observer = observer
        self.request_stable = request_stable
        self._in_flight: dict[str, asyncio.Future[Reply]] = {}  # tid -> its completion
        self._forming: list[PendingCommit] | None = None  # commits for the next log write
        self._groups: set[asyncio.Task[None]] = set()  # prepared groups being completed

    # ============================================================== entry points
    def in_flight(self, tid: str) -> asyncio.Future[Reply] | None:
        """The completion of ``tid`` under way or last run (None: none since start)."""
        return self._in_flight.get(tid)

    def forget(self, tid: str) -> None:
        """``tid`` is being dropped (expired): its last completion is no longer asked for."""
        fut = self._in_flight.get(tid)
        if fut is not None and fut.done():
            del self._in_flight[tid]

    def busy(self, tid: str) -> bool:
        """A completion of ``tid`` is under way."""
        fut = self._in_flight.get(tid)
        return fut is not None and not fut.done()

    async def completion(self, txn: Txn) -> Reply:
        """Wait for ``txn``'s completion under way, rolling it forward if none is."""
        task = self._in_flight.get(txn.tid)
        if task is None or (task.done() and txn.state.is_prepare):
            task = self.roll_forward(txn)
        return await asyncio.shield(task)

    def roll_forward(self, txn: Txn) -> asyncio.Task[Reply]:
        """Complete a prepared ``txn`` from its durable plan (recovery, a retry)."""
        task = spawn(self._complete(txn), name=f"complete-{txn.tid}")
        self._in_flight[txn.tid] = task
        return task

    async def end(self, txn: Txn, *, commit: bool, committed: set[int], reason: str,
                  batch_id: int | None = None) -> Reply:
        """Prepare (durable plan) then complete: the only way a transaction ends.

        ``committed``: the producers whose records a commit includes (the others' are
        aborted by their markers); ``reason``: client, fenced or timeout, which a late
        retry of the same EndTxn is answered by.
        """
        t0 = time.monotonic()
        trace = CommitTrace()
        verified: list[PartitionOffset] = []
        while commit and (missing := self.state.unconfirmed(txn, committed, verified)):
            verified += await self._verify_written(txn, missing)
            trace.add("verify", len(missing))
            if txn.state is not TxnState.ONGOING:
                raise ConcurrentTransactionsError(f"{txn.tid!r} changed state; retry")
        faults.point("before_prepare")
        task: asyncio.Future[Reply]
        if commit:
            task = self._join_commit(PendingCommit(txn, committed, reason, batch_id, verified,
                                                   trace))
        else:
            records = self._prepare_records(txn, False, committed, reason, batch_id,
                                            verified, now_ms())
            fut = self.commits.commit(records)
            task = self._complete_after(txn, fut, trace)
            plan = txn.plan
            assert plan is not None
            log.debug("PrepareAbort %r pid %d epoch %d: %d marker objects, %d fences",
                      txn.tid, txn.pid, txn.epoch, len(plan.markers), len(plan.fences))
        result = await asyncio.shield(task)
        self.observer.end_txn_answered(commit, t0, trace)
        return result

    # ============================================================ grouped commits
    def _join_commit(self, pending: PendingCommit) -> asyncio.Future[Reply]:
        """Queue a commit to be prepared just before the next log object is cut.

        Commits that arrive while a log write is in flight would wait for the next write
        anyway; planning them together there gives their markers consecutive offsets in
        each partition, so one object holds the markers of all of them (one put instead of
        one per transaction) and one append holds their Complete records. Nothing waits
        longer than before: the group is sealed when the log is ready to write.
        """
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        pending.txn.ending = pending.future = fut
        self._in_flight[pending.txn.tid] = fut
        if self._forming is None:
            self._forming = []
            try:
                self.commits.before_next_write(self._seal_commits)
            except BaseException:
                self._forming = None
                pending.txn.ending = None
                self._in_flight.pop(pending.txn.tid, None)
                raise
        self._forming.append(pending)
        return fut

    def _seal_commits(self) -> None:
        """Plan every waiting commit, in arrival order, and queue their Prepare records in
        one append (durable together: the log never splits an append)."""
        group, self._forming = self._forming or [], None
        try:
            self._seal(group)
        except BaseException as exc:  # a bug: no caller may wait forever for its answer
            for pending in group:
                pending.txn.ending = None
                pending.fail(exc)
            raise

    def _seal(self, group: list[PendingCommit]) -> None:
        records: list[LogRecord] = []
        prepares: list[LogRecord] = []
        sealed: list[PendingCommit] = []
        ts = now_ms()
        for pending in group:
            pending.txn.ending = None
            try:
                recs = self._prepare_records(pending.txn, True, pending.committed,
                                             pending.reason, pending.batch_id,
                                             pending.verified, ts)
            except Exception as exc:  # this commit fails, not the group
                pending.fail(exc)
                continue
            # Applied one by one: each plan takes its marker offsets where the last ended.
            self.state.apply_all(recs)
            records += recs
            prepares.append(recs[-1])
            sealed.append(pending)
        if not sealed:
            return
        plans = [p.txn.plan for p in sealed]
        share_markers(plans)  # type: ignore[arg-type]
        # Sharing is part of the same step: the queued Prepare records carry it too.
        for rec, plan in zip(prepares, plans, strict=True):
            rec.data["ext"]["plan"] = plan.to_json()  # type: ignore[union-attr]
        try:
            prepared = self.commits.append_applied(records)
        except Exception as exc:  # the log failed: the process stops
            for pending in sealed:
                pending.fail(exc)
            return
        log.debug("PrepareCommit of %d transactions", len(sealed))
        task = spawn(self._complete_group(sealed, prepared), name=f"commit-{sealed[0].txn.tid}")
        self._groups.add(task)
        task.add_done_callback(self._groups.discard)

    async def _complete_group(self, group: list[PendingCommit],
                              prepared: asyncio.Future[None]) -> None:
        """Markers (shared objects), then all Complete records in one append, one stable
        snapshot, then every reply."""
        try:
            await prepared
            for pending in group:
                pending.trace.add("prepare", 1)
            faults.point("after_prepare")
            plans = [p.txn.plan for p in group]
            calls = await self._write_plans(plans, None)  # type: ignore[arg-type]
            for pending in group:
                pending.trace.add("markers", calls)
            records = [p.txn.transition_record(TxnState.COMPLETE_COMMIT) for p in group]
            fut = self.commits.commit(records)
            await asyncio.gather(fut, self.request_stable())
            for pending in group:
                pending.trace.add("complete+stable", 2)
                self.observer.transaction_ended("commit")
            faults.point("after_complete_before_reply")
        except BaseException as exc:
            for pending in group:
                pending.fail(exc)
            raise
        for pending in group:
            if pending.future is not None and not pending.future.done():
                pending.future.set_result({"outcome": "commit", "producer_id": pending.txn.pid,
                                           "epoch": pending.txn.epoch})

    def _complete_after(self, txn: Txn, prepared: asyncio.Future[None],
                        trace: CommitTrace | None = None) -> asyncio.Task[Reply]:
        async def run() -> Reply:
            await prepared
            if trace is not None:
                trace.add("prepare", 1)  # the log object holding Prepare (group-committed)
            faults.point("after_prepare")
            return await self._complete(txn, trace)
        task = spawn(run(), name=f"end-{txn.tid}")
        self._in_flight[txn.tid] = task
        return task

    # ===================================================================== plan
    async def _verify_written(self, txn: Txn, missing: list[PartitionOffset]
                              ) -> list[PartitionOffset]:
        """A commit never includes a reservation that is not written: check storage."""
        sizes = await asyncio.gather(*(self.io.call(self.io.size_or_none,
                                                    layout.segment_path(*m))
                                       for m in missing))
        absent = [tuple(m) for m, s in zip(missing, sizes, strict=True) if not s]
        if absent:
            raise InvalidTxnStateError(
                f"cannot commit {txn.tid!r}: reserved offsets were never written "
                f"(topic, partition, offset): {absent}; abort the transaction")
        return list(missing)

    def _prepare_records(self, txn: Txn, commit: bool, committed: set[int], reason: str,
                         batch_id: int | None, verified: list[PartitionOffset], ts: int
                         ) -> list[LogRecord]:
        """The records of ``txn``'s Prepare: any pid block the bump needs, then the txn
        record carrying the plan. Nothing changes until they are applied."""
        plan, records = plan_completion(self.state, txn, commit, committed, reason,
                                        batch_id, verified, ts)
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        records.append(txn.transition_record(state, plan=plan))
        return records

    # ============================================================ write, complete
    async def _complete(self, txn: Txn, trace: CommitTrace | None = None) -> Reply:
        """Write every planned object (idempotent), then Complete* + stable snapshot."""
        plan = txn.plan
        assert plan is not None and txn.state.is_prepare, (txn.tid, txn.state)
        commit = txn.state is TxnState.PREPARE_COMMIT
        calls = await self._write_plans([plan], txn.tid)
        if trace is not None:
            trace.add("markers", calls)
        state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        fut = self.commits.commit([txn.transition_record(state)])
        await asyncio.gather(fut, self.request_stable())
        if trace is not None:
            trace.add("complete+stable", 2)  # in parallel: one round trip
        self.observer.transaction_ended(plan.outcome)
        log.debug("%s %r -> pid %d epoch %d", state.kafka_name, txn.tid, txn.pid, txn.epoch)
        faults.point("after_complete_before_reply")
        return {"outcome": plan.outcome, "producer_id": txn.pid, "epoch": txn.epoch}

    async def _write_plans(self, plans: list[CompletionPlan], alone: str | None) -> int:
        """Write every object of ``plans``, retrying storage errors until it succeeds (a
        prepared transaction is only ever rolled forward); returns the call count.

        ``alone``: the transactional id when one transaction completes by itself (recovery,
        a retry): objects it shares with others then hold the markers of every transaction
        still prepared; None when ``plans`` is a whole group (see _seal_commits).
        """
        def failed(attempt: int, exc: BaseException, _wait: float) -> None:
            log.warning("completing %s: storage error (attempt %d): %s",
                        repr(alone) if alone else "a group of commits", attempt, exc)

        return await retry_async(lambda: self._write_plans_once(plans, alone is not None),
                                 ROLL_FORWARD_RETRY, KafkaStorageError, failed)

    async def _write_plans_once(self, plans: list[CompletionPlan], alone: bool) -> int:
        """Fences, markers and .txnindex objects, all in parallel.

        Fences need not precede markers (docs/coordinator.md, "Fences in parallel with
        markers"): a zombie write that beats its fence lands *below* the ABORT marker of its
        producer id, inside the aborted range, and nothing is visible before Complete* is
        applied, which only happens after every one of these puts has succeeded.
        """
        io, storage = self.io, self.io.storage

        async def fence(t: str, p: int, b: int) -> None:
            # False = the data object is there (a late writer); its ABORT marker covers it.
            if await io.call(storage.put_if_absent, layout.segment_path(t, p, b), b""):
                self.observer.object_written("fence")

        async def markers(obj: PartitionOffset, mine: list[bytes], data: bytes) -> None:
            path = layout.segment_path(*obj)
            if not await io.call(storage.put_if_absent, path, data):
                # A shared object written before some of its transactions completed alone
                # (after a restart) holds more markers than are still prepared: ours must
                # be in it, byte for byte (their offsets are in the bytes).
                found = b"" if obj not in shared_objs else await io.call(storage.get, path)
                if not found or not all(m in found for m in mine):
                    log.critical("marker object %s holds other bytes: offset reused?", path)
                    raise KafkaStorageError(f"marker object {path} holds other bytes")
            self.observer.object_written("marker")
            faults.point("after_marker")

        async def index(row: TxnIndexRow) -> None:
            data = encode_txn_index([AbortedTxn(*e) for e in row.entries])
            path = layout.segment_path(row.topic, row.partition, row.base,
                                       layout.TXNINDEX_SUFFIX)
            if not await io.call(storage.put_if_absent, path, data):
                raise KafkaStorageError(f"txnindex object {path} holds other bytes")
            self.observer.object_written("txnindex")

        async def marker_object(plan: CompletionPlan) -> None:
            # every partition's markers of one transaction: one object, one PUT
            assert plan.marker_object is not None
            data, _ = plan.marker_object_bytes()
            if not await io.call(storage.put_if_absent, plan.marker_object, data):
                found = await io.call(storage.get, plan.marker_object)
                if found != data:  # a restart rewrites the same bytes; anything else is not ours
                    log.critical("marker object %s holds other bytes", plan.marker_object)
                    raise KafkaStorageError(f"marker object {plan.marker_object} holds "
                                            "other bytes")
            self.observer.object_written("marker")
            faults.point("after_marker")

        jobs = []
        objects: dict[PartitionOffset, dict[int, bytes]] = {}  # object -> base -> bytes
        mine: dict[PartitionOffset, list[bytes]] = {}
        shared_objs: set[PartitionOffset] = set()
        for plan in plans:
            jobs += [fence(*f) for f in plan.fences]
            if plan.marker_object is not None:
                # its .txnindex entries are published with the markers' runs (the tails)
                jobs.append(marker_object(plan))
                continue
            jobs += [index(row) for row in plan.txnindex]
            in_object = {(s.topic, s.partition): s.base for s in plan.shared}
            shared_objs.update(plan.shared)
            for row in plan.markers:
                data = plan.marker_bytes(row)
                obj = PartitionOffset(row.topic, row.partition,
                                      in_object.get((row.topic, row.partition), row.base))
                objects.setdefault(obj, {})[row.base] = data
                mine.setdefault(obj, []).append(data)
        if alone and shared_objs:
            for other in self.state.txns.values():  # the others still prepared in shared ones
                if other.plan is None or not other.state.is_prepare:
                    continue
                for obj in other.plan.shared:
                    if obj in shared_objs:
                        for row in other.plan.markers:
                            if (row.topic, row.partition) == (obj.topic, obj.partition):
                                objects[obj][row.base] = other.plan.marker_bytes(row)
        for obj, parts in objects.items():
            data = b"".join(parts[b] for b in sorted(parts))
            jobs.append(markers(obj, mine[obj], data))
        await asyncio.gather(*jobs)
        return len(jobs)

    # ==================================================================== stop
    async def drain(self, timeout: float = 30) -> None:
        """Graceful stop: let running completions finish their durable steps."""
        pending = [t for t in self._in_flight.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def halt(self) -> None:
        """Cancel every completion at once, with no graceful step (a crash, for tests)."""
        tasks = [*self._in_flight.values(), *self._groups]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def plan_completion(state: CoordinatorState, txn: Txn, commit: bool, committed: set[int],
                    reason: str, batch_id: int | None, verified: list[PartitionOffset],
                    ts: int) -> tuple[CompletionPlan, list[LogRecord]]:
    """Every object ending ``txn`` writes, fixed before any is written, and the pid_block
    records the epoch bump needs. Reads ``state``, changes nothing.

    Markers go at each partition's log end, one per producer of the transaction there
    (``committed`` producers get COMMIT when ``commit``, the rest ABORT, with a .txnindex
    entry); unconfirmed reservations that are not committed get a fence.
    """
    pids_in: dict[str, dict[int, int]] = {}  # "t-p" -> pid -> first offset
    for where in txn.reservations:
        t, p, b = where
        firsts = pids_in.setdefault(partition_key(t, p), {})
        res = state.reservations.get(where)
        if res is not None:
            firsts[res.pid] = min(firsts.get(res.pid, b), b)
    txn_pids = txn.producer_pids()
    markers: list[MarkerRow] = []
    txnindex: list[TxnIndexRow] = []
    fences: list[PartitionOffset] = []
    for key, (topic, p) in sorted(txn.partitions.items()):
        part = state.partitions[key]
        firsts = pids_in.get(key, {})
        if not firsts:
            continue
        base = part.leo
        ms: list[MarkerEntry] = []
        entries: list[list[int]] = []
        others = [f for pid, f in part.open_first.items() if pid not in txn_pids]
        for i, pid in enumerate(sorted(firsts)):
            ok = commit and pid in committed
            ep = txn.epoch if pid == txn.pid else 0
            ms.append(MarkerEntry(pid, ep, 1 if ok else 0))
            if not ok:
                lso = min([*others, base + i + 1])
                entries.append([pid, firsts[pid], base + i, lso])
        markers.append(MarkerRow(topic, p, base, ms))
        if entries:
            txnindex.append(TxnIndexRow(topic, p, base, entries))
    for where in txn.reservations:
        res = state.reservations.get(where)
        if res is None or res.confirmed or where in verified:
            continue
        if not (commit and res.pid in committed):
            fences.append(where)
    next_pid, next_epoch, records = state.bumped(txn)
    plan = CompletionPlan(
        outcome="commit" if commit else "abort", ts=ts,
        coordinator_epoch=state.coordinator_epoch, markers=markers, txnindex=txnindex,
        fences=fences, verified=list(verified), reason=reason,
        batch_id=batch_id if batch_id is not None else txn.batch_id,
        next_pid=next_pid, next_epoch=next_epoch)
    if markers:  # every partition's markers in one shared object (named in the plan)
        plan.in_one_object(layout.shared_object_path(layout.shared_object_name(
            txn.pid, txn.epoch, secrets.token_hex(8))))
    return plan, records
