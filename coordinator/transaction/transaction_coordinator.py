"""The transaction coordinator: the requests, checked and wired to the roles that do them.

Kafka's TransactionCoordinator handles InitProducerId, AddPartitionsToTxn, EndTxn and friends
and delegates to the state manager, the metadata and the marker channel; this one does the
same for txnlog's protocol (DESIGN 5), with these roles beside it:

- ``state.CoordinatorState``: all state and ``apply(record)``, pure (Kafka's
  TransactionStateManager cache and load);
- ``txn_metadata.Txn``: one transactional id and its transitions (TransactionMetadata);
- ``partition_state``: offsets, reservations, sequences, HW/LSO (ProducerStateManager);
- ``completion.Completer``: Prepare -> markers -> Complete, grouped commits
  (TransactionMarkerChannelManager);
- ``stable_publisher.StablePublisher``: the stable snapshots readers trust;
- ``group_offsets.GroupOffsets``: transactional consumer-group offsets;
- ``runtime``: the commit step, storage I/O and the metrics observer.

One asyncio loop owns it all. Every change is a LogRecord *applied* to the state and
*queued* for the log in one synchronous step (``runtime.Commits.commit``), then the request
awaits durability before answering. Replaying the log through the same ``apply`` rebuilds
the state, so memory and log cannot disagree. Because the log is sequential, an answer that
depends on an earlier change is only sent after that change is durable too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from txnlog.log_format import stable, topics
from txnlog.log_format.layout import txn_state_log_path
from txnlog.log_format.planted_bugs import enabled as unsafe
from txnlog.log_format.storage import Storage

from .. import faults
from ..errors import (
    ConcurrentTransactionsError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    validate_topic_name,
)
from ..group.group_offsets import GroupOffsets
from ..maintenance.log_cleaner import LogCleaner
from ..maintenance.log_merger import LogMerger
from ..maintenance.log_retention import DEFAULT_CHECK_INTERVAL_MS, LogRetention
from ..maintenance.merge_policy import MergeSettings
from ..state.coordinator_state import CoordinatorState
from ..state.partition_state import (
    Offsets,
    ProducerState,
    ReservedBatch,
    WrittenRun,
    check_sequence,
    partition_key,
)
from ..state.runtime import Commits, Observer, StorageIO
from ..state.states import TxnState
from ..state.txn_log import TxnLog
from ..state.txn_log_records import LogRecord
from ..state.txn_metadata import Txn, now_ms
from ..topic_config import validate_topic_config
from .completion import Completer
from .stable_publisher import StablePublisher
from .timers import TransactionTimers

log = logging.getLogger("txnlog.coordinator.transaction.transaction_coordinator")

Reply = dict[str, Any]
# How long a one-shot id (a batch write's own) is kept after its transaction was decided, so
# a retried EndTxn still gets the same answer: 10 minutes, well past the Spark writer's EndTxn
# retry window (datasource/batch_writer.COMMIT_RETRY_S, 120 s, plus the client's own retries).
ONE_SHOT_ID_RETENTION_MS = 10 * 60 * 1000
LogFactory = Callable[["TransactionCoordinator", Any], TxnLog]


def _offsets(parts: list[dict[str, Any]]) -> list[WrittenRun]:
    return [WrittenRun(p["topic"], p["partition"], p["base_offset"], p.get("object"),
                       p.get("position", 0), p.get("size", 0)) for p in parts]


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Done callback of a publish nobody awaits: its failure is the publisher's to report
    (a failed publisher stops the process), not an unretrieved-exception warning."""
    if not fut.cancelled():
        fut.exception()


class TransactionCoordinator:
    """The coordinator's operations (one asyncio loop owns it and all its state)."""

    def __init__(self, storage: Storage, *, max_transaction_timeout_ms: int = 900_000,
                 transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000,
                 reservation_timeout_ms: int = 60_000, stable_keep: int = 10,
                 io_threads: int = 64, observer: Observer | None = None,
                 one_shot_id_retention_ms: int = ONE_SHOT_ID_RETENTION_MS,
                 merge_settings: MergeSettings | None = None, merging: bool = True,
                 retention_check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS) -> None:
        self.storage = storage
        self.max_timeout_ms = max_transaction_timeout_ms
        self.state = CoordinatorState()
        # _meta/topics rewrites one at a time, each from the state of its turn
        self.topic_meta_lock = asyncio.Lock()
        self.observer = observer if observer is not None else Observer()
        self.io = StorageIO(storage, self.observer, io_threads)
        self.commits = Commits(self.state)
        self.publisher = StablePublisher(self.io, self.state, self.observer, stable_keep)
        self.completer = Completer(self.state, self.commits, self.io, self.observer,
                                   self.request_stable)
        self.offsets = GroupOffsets(
            self.state, self.commits, self.io, self.reserve,
            lambda name, n, cfg: self.create_topic(name, n, cfg, exist_ok=True))
        self.timers = TransactionTimers(
            self.state, self.commits, self.completer, self.io, self.request_stable,
            expiration_ms=transactional_id_expiration_ms,
            one_shot_retention_ms=one_shot_id_retention_ms,
            reservation_timeout_ms=reservation_timeout_ms)
        self.merger = LogMerger(self.state, self.commits, self.io, self._published_lso,
                                lambda: self.publisher.written is not None, self.observer,
                                merge_settings, merging)
        self.merger.on_merged = lambda: self.request_stable().add_done_callback(_retrieve)
        self.cleaner = LogCleaner(self.state, self.commits, self.io, self.merger,
                                  self._published_lso, self.observer, merging)
        self.retention = LogRetention(self.state, self.commits, self.io, self.observer,
                                      self._published_hw, self.merger.kick,
                                      retention_check_interval_ms)
        self.merger.hooks.append(self.retention.tick)

    # ========================================================== state, for callers
    @property
    def log(self) -> TxnLog | None:
        """The coordinator's log, once ``start`` took it over."""
        return self.commits.log

    @property
    def metrics(self) -> Any:
        """The metrics the observer reports into (None: not bound)."""
        return self.observer.metrics

    @metrics.setter
    def metrics(self, metrics: Any) -> None:
        """The server's prometheus objects; the observer reports into them."""
        self.observer.bind(metrics)

    @property
    def coordinator_epoch(self) -> int:
        """This coordinator's epoch (its takeover record's), in every marker it writes."""
        return self.state.coordinator_epoch

    @property
    def takeover_offsets(self) -> list[int]:
        """Log offsets of every takeover (the log never prunes them: they keep fencing)."""
        return self.state.takeover_offsets

    @property
    def txns(self) -> dict[str, Txn]:
        """Every transactional id's metadata (read it; only records change it)."""
        return self.state.txns

    @property
    def stable_written(self) -> stable.StableSnapshot | None:
        """The newest stable snapshot this coordinator wrote."""
        return self.publisher.written

    def to_snapshot(self) -> dict[str, Any]:
        """The full state as JSON-able data (the log's snapshots)."""
        return self.state.to_snapshot()

    def hw_lso(self) -> Offsets:
        """Every partition's (HW, LSO) as readers may trust them now. Read-only."""
        return self.publisher.view()

    def request_stable(self) -> asyncio.Future[int]:
        """A future that resolves once a stable snapshot taken after now is written."""
        return self.publisher.request()

    def _published_lso(self, topic: str, partition: int) -> int:
        """The LSO of the newest stable head written: merging stays below it."""
        written = self.publisher.written
        return 0 if written is None else written.lso(topic, partition)

    def _published_hw(self, topic: str, partition: int) -> int:
        """The HW of the newest stable head written: DeleteRecords may go up to it."""
        written = self.publisher.written
        return 0 if written is None else written.hw(topic, partition)

    def open_transactions(self) -> int:
        """Transactions not Empty/Complete* (a gauge, and the idle-exit check)."""
        return sum(1 for t in self.state.txns.values() if not t.state.is_idle)

    # ================================================================= lifecycle
    def load(self, recovered: Any) -> None:
        """The state recovery found: the snapshot, then the records after it."""
        self.state.load(recovered.snapshot, recovered.records)

    async def start(self, log_factory: LogFactory, recovered: Any) -> None:
        """Load snapshot + records, take the log over, roll Prepare* transactions forward."""
        self.load(recovered)
        txn_log = self.commits.log = log_factory(self, recovered)

        def takeover(offset: int) -> LogRecord:
            return LogRecord("takeover", {
                "id": "", "epoch": self.state.coordinator_epoch + 1, "log_offset": offset,
                "ms": now_ms(), "pid": os.getpid()})

        await txn_log.take_over(takeover, self.state.apply_all, self.state.apply)
        txn_log.start()
        self.publisher.on_fatal = txn_log.stop_fatally
        await self.publisher.start()
        for pid, rows in self.publisher.adoptable().items():
            log.info("adopting %d published runs of producer %d", len(rows), pid)
            await self.commits.commit([LogRecord("confirm", {"id": str(pid), "pid": pid,
                                                             "parts": rows})])
        self.timers.start()
        self.merger.start()
        for txn in list(self.state.txns.values()):
            txn.last_heartbeat = time.monotonic()
            if txn.state.is_prepare:
                log.info("rolling forward %s of %r", txn.state.kafka_name, txn.tid)
                self.completer.roll_forward(txn)
        await self.request_stable()

    async def stop(self) -> None:
        """Graceful: let running completions finish their durable steps, then stop loops."""
        await self.completer.drain()
        if self.commits.log is not None:
            await self.commits.log.close()
        await self.merger.stop()
        await self.timers.stop()
        await self.publisher.stop()
        self.io.shutdown()

    def background_tasks(self) -> dict[str, asyncio.Task[Any] | None]:
        """The loops that must run as long as the process serves (the process watches
        them: one that ends by an exception stops it, never leaving it half alive)."""
        return {"txn-log": self.commits.log._task if self.commits.log else None,
                "timers": self.timers._task, "stable": self.publisher._task,
                "merger": self.merger._task}

    async def halt(self) -> None:
        """Stop every task at once, with no graceful step: what SIGKILL leaves (what is
        durable stays, nothing else runs). Tests stand in for a crash with this."""
        await self.merger.stop()
        await self.timers.stop()
        await self.publisher.halt()
        await self.completer.halt()
        if self.commits.log is not None:
            await self.commits.log.halt()

    # ============================================================== producer ids
    async def init_producer_id(self, tid: str | None, timeout_ms: int = 60_000,
                               one_shot: bool = False) -> Reply:
        """InitProducerId: a producer id and epoch for ``tid`` (None: an idempotent
        producer), fencing any earlier instance — its open transaction is aborted.

        ``one_shot``: the caller will never begin a second transaction under ``tid`` (a
        batch write's own id), so the id is dropped ``one_shot_retention_ms`` (timers) after its
        transaction is decided instead of living ``transactional.id.expiration.ms``. It is
        declared when the id is created and stays with it; declaring it for an id that
        exists as a reusable one is refused (nothing may drop an id someone reuses).
        """
        self._check_timeout(timeout_ms)
        if not isinstance(one_shot, bool):
            raise InvalidRequestError(f"one_shot must be true or false, got {one_shot!r}")
        if tid is None:
            if one_shot:
                raise InvalidRequestError("one_shot needs a transactional_id (an idempotent "
                                          "producer has none to drop)")
            (pid,), records = self.state.alloc_pids(1)
            records.append(LogRecord("producer", {"id": str(pid), "pid": pid, "epoch": 0}))
            await self.commits.commit(records)
            return {"producer_id": pid, "epoch": 0}
        if not isinstance(tid, str) or not tid:
            raise InvalidRequestError("transactional_id must be a non-empty string")
        while True:
            txn = self.state.txns.get(tid)
            if txn is None or txn.state is TxnState.DEAD:
                (pid,), records = self.state.alloc_pids(1)
                fresh = Txn(tid, pid, 0, timeout_ms)
                ext: dict[str, Any] = {"one_shot": True} if one_shot else {}
                records.append(fresh.transition_record(TxnState.EMPTY, pid=pid, epoch=0,
                                                       **ext))
                # a new one-shot id (a batch write's) is lazy: its EndTxn makes it durable
                await self.commits.commit_or_queue(records, lazy=one_shot and len(records) == 1)
                log.debug("init_producer_id %r -> pid %d epoch 0%s", tid, pid,
                          " (one-shot)" if one_shot else "")
                return {"producer_id": pid, "epoch": 0}
            if one_shot and not txn.one_shot:
                raise InvalidRequestError(
                    f"transactional id {tid!r} exists as a reusable id; one_shot can only be "
                    "declared by the call that creates an id")
            if txn.completing:
                await self.completer.completion(txn)
                continue
            if txn.state is TxnState.ONGOING:
                # Fence the previous instance: abort with the epoch bumped (Kafka's
                # PrepareEpochFence + PrepareAbort, in one durable record).
                await self.completer.end(txn, commit=False, committed=set(), reason="fenced")
                continue
            pid, epoch, records = self.state.bumped(txn)
            records.append(txn.transition_record(
                TxnState.EMPTY, pid=pid, epoch=epoch, timeout_ms=timeout_ms,
                last={"pid": txn.pid, "epoch": txn.epoch, "outcome": "abort",
                      "reason": "fenced"}))
            await self.commits.commit(records)
            log.debug("init_producer_id %r -> pid %d epoch %d", tid, pid, epoch)
            return {"producer_id": pid, "epoch": epoch}

    # =================================================================== members
    async def add_member(self, tid: str, pid: int, epoch: int, member_key: str) -> Reply:
        """A member producer id (epoch 0) writing into ``tid``'s open transaction, opening it
        if needed; the same ``member_key`` gets the same id (a retry)."""
        txn = self.state.txn(tid)
        txn.check_epoch(pid, epoch)
        if not isinstance(member_key, str) or not member_key:
            raise InvalidRequestError("member_key must be a non-empty string")
        if member_key in txn.members:
            await self.commits.sync()
            txn.check_epoch(pid, epoch)
            return {"producer_id": txn.members[member_key], "epoch": 0}
        if txn.completing:
            raise ConcurrentTransactionsError(
                f"{tid!r} is completing its transaction; members cannot join it")
        records: list[LogRecord] = []
        if txn.state is not TxnState.ONGOING:
            records.append(txn.transition_record(TxnState.ONGOING))
        (mpid,), blocks = self.state.alloc_pids(1)
        records += blocks
        records.append(LogRecord("member", {"id": tid, "tid": tid, "key": member_key,
                                            "pid": mpid}))
        # a Spark write's member (a one-shot id's, a micro-batch's) is lazy unless it needs a
        # pid block (TxnLog doc)
        await self.commits.commit_or_queue(records, lazy=txn.spark_write and not blocks)
        log.debug("add_member %r key %s -> pid %d", tid, member_key, mpid)
        return {"producer_id": mpid, "epoch": 0}

    def _check_writer(self, pid: int, epoch: int) -> tuple[ProducerState, Txn | None]:
        """The producer state for a write by (pid, epoch) and its transaction, checked."""
        st = self.state
        ps = st.producers.get(pid)
        if ps is None:
            if 0 <= pid < st.next_pid:
                raise ProducerFencedError(
                    f"producer id {pid} was handed out, but its transaction has ended (a "
                    "member of a finished transaction, or a replaced producer id): fenced")
            raise InvalidProducerIdMappingError(f"producer id {pid} was never handed out")
        if ps.tid is None:
            if epoch != ps.epoch:
                raise InvalidProducerEpochError(f"producer {pid} has epoch {ps.epoch}, "
                                                f"not {epoch}")
            return ps, None
        txn = st.txns.get(ps.tid)
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
        txn.check_epoch(pid, epoch)
        if txn.completing:
            raise ConcurrentTransactionsError(
                f"{ps.tid!r} is completing its transaction; begin the next one after it")
        return ps, txn

    def _check_timeout(self, timeout_ms: int) -> int:
        if not isinstance(timeout_ms, int) or not 1 <= timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {timeout_ms} must be in [1, {self.max_timeout_ms}] "
                "(--max-transaction-timeout-ms)")
        return timeout_ms

    # ================================================================== reserve
    async def _partition_count(self, topic: str) -> int:
        meta = self.state.topics.get(topic)
        if meta is not None:
            return int(meta["partitions"])
        validate_topic_name(topic)
        try:
            tm = await self.io.run(topics.read_topic, self.storage, topic)
        except topics.UnknownTopicError as exc:
            raise UnknownTopicOrPartitionError(str(exc)) from None
        if topic not in self.state.topics:
            await self.commits.commit([LogRecord("topic", {"id": topic, "name": topic,
                                                           "partitions": tm.partitions,
                                                           "config": dict(tm.config)})])
        return tm.partitions

    async def reserve(self, pid: int, epoch: int, parts: list[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
        """Offsets for a batch of ``count`` records at ``base_sequence`` in each partition
        (Kafka's produce, before the write): new ones for the next batch in sequence, the
        same ones for a retried batch; opens the producer's transaction if needed."""
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
        ps, txn = self._check_writer(pid, epoch)
        out: list[dict[str, Any]] = []
        new: list[tuple[str, int, int, int]] = []
        seen: set[str] = set()
        for part in parts:
            topic, p, seq, count = part["topic"], part["partition"], part["base_sequence"], \
                part["count"]
            key = partition_key(topic, p)
            if key in seen:
                raise InvalidRequestError(f"partition {key} named twice in one reserve")
            seen.add(key)
            dup_base = check_sequence(ps, key, epoch, seq, count)
            if dup_base is None:
                new.append((topic, p, seq, count))
            out.append({"topic": topic, "partition": p, "base_offset": dup_base})
        if not new:
            await self.commits.sync()
            return out
        records: list[LogRecord] = []
        if txn is not None and not ps.member and txn.state is not TxnState.ONGOING:
            records.append(txn.transition_record(TxnState.ONGOING))
        assigned = [ReservedBatch(topic, p, seq, count,
                                  self.state.partition(partition_key(topic, p)).leo)
                    for topic, p, seq, count in new]
        records.append(LogRecord("reserve", {"id": str(pid), "pid": pid, "epoch": epoch,
                                             "tid": ps.tid, "parts": assigned}))
        it = iter(assigned)
        for item in out:
            if item["base_offset"] is None:
                item["base_offset"] = next(it).base_offset
        self.observer.reserved()
        # a Spark write task's reservation is lazy: the driver's EndTxn confirms it
        await self.commits.commit_or_queue(
            records, lazy=ps.member and txn is not None and txn.spark_write)
        faults.point("after_reserve")
        log.debug("reserve pid %d epoch %d -> %s", pid, epoch, assigned)
        return out

    async def confirm(self, pid: int, epoch: int, parts: list[dict[str, Any]],
                      wait_stable: bool = False) -> Reply:
        """The producer wrote these reserved ranges (idempotent); ``wait_stable``: answer
        once a stable snapshot reflecting them is out."""
        runs = _offsets(parts)
        self.state.check_not_fenced(runs, pid)
        todo = self.state.to_confirm(runs, {pid}, str(pid)).get(pid)
        if todo:
            await self.commits.commit([LogRecord("confirm", {"id": str(pid), "pid": pid,
                                                             "parts": todo})])
        else:
            await self.commits.sync()
        ps = self.state.producers.get(pid)
        txn = self.state.txns.get(ps.tid or "") if ps is not None else None
        if txn is not None:
            txn.last_heartbeat = time.monotonic()
        # Confirmed ranges move the HW: publish it whether or not this caller waits (a
        # broker's HW moves by itself).
        published = self.request_stable()
        if wait_stable:
            await published
        else:
            published.add_done_callback(_retrieve)
        return {}

    async def heartbeat(self, tid: str, pid: int, epoch: int) -> Reply:
        """Keep ``tid``'s open transaction from timing out; answers its state."""
        txn = self.state.txn(tid)
        if pid == txn.pid:
            txn.check_epoch(pid, epoch)
        elif pid not in txn.member_pids() or txn.state is not TxnState.ONGOING:
            raise ProducerFencedError(
                f"producer {pid} is not a member of the open transaction of {tid!r}")
        txn.last_heartbeat = time.monotonic()
        return {"state": txn.state.kafka_name}

    # ========================================================== consumer offsets
    async def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str,
                          offsets: list[dict[str, Any]]) -> Reply:
        """AddOffsetsToTxn + TxnOffsetCommit: the group's offsets commit with ``tid``'s
        open transaction."""
        return await self.offsets.add_offsets(tid, pid, epoch, group_id, offsets)

    async def committed_offsets(self, group_id: str) -> dict[str, int]:
        """OffsetFetch: the group's committed offsets, ``{"t-p": offset}``."""
        return await self.offsets.committed(group_id)

    # =================================================================== end txn
    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool,
                      members: list[int] | None = None, batch_id: int | None = None,
                      written: list[dict[str, Any]] | None = None) -> Reply:
        """EndTxn: commit or abort ``tid``'s open transaction (``members``: the member
        producers whose records a commit includes, default all). ``written``: runs of its
        producers to confirm, queued right before the Prepare, in its append (a producer's
        last flush; every run of a Spark write, whose tasks confirm nothing themselves).
        """
        if tid not in self.state.txns:
            await self._check_still_coordinator(tid)
        txn = self.state.txn(tid)
        want = "commit" if commit else "abort"
        if batch_id is not None and txn.last_committed_batch is not None \
                and batch_id <= txn.last_committed_batch:
            await self.commits.sync()
            return {"outcome": "commit", "producer_id": txn.pid, "epoch": txn.epoch,
                    "batch_committed": True}
        last = txn.last
        if last is not None and last["pid"] == pid and last["epoch"] == epoch and \
                (pid, epoch) != (txn.pid, txn.epoch):
            await self.commits.sync()
            txn.late_end(want, last, lenient=unsafe("abort_after_prepare"))
            return {"outcome": want, "producer_id": txn.pid, "epoch": txn.epoch}
        txn.check_epoch(pid, epoch)
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
            reply = await self.completer.completion(txn)
            last = txn.last
            if last is not None and (last["pid"], last["epoch"]) == (pid, epoch):
                # Ended for the coordinator's own reason (a timeout): the answer every
                # retry gets (late_end), not the client's success it only joined (a
                # one-shot id's retry was answered otherwise: chaos, coordinator-pause)
                txn.late_end(want, last)
            return reply
        if txn.state is not TxnState.ONGOING:
            if commit:
                raise InvalidTxnStateError(
                    f"{tid!r} has no open transaction to commit (state "
                    f"{txn.state.kafka_name}): begin one and send or add members first")
            if txn.one_shot and txn.state is TxnState.EMPTY and not txn.released:
                # A one-shot id that never opened a transaction is done: its retention
                # period starts now (Empty -> Empty, Kafka-valid, carrying the release).
                await self.commits.commit([txn.transition_record(TxnState.EMPTY,
                                                                 released=True)])
            else:
                await self.commits.sync()
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
        return await self.completer.end(txn, commit=commit,
                                        committed=committed if commit else set(),
                                        reason="client", batch_id=batch_id)

    async def _check_still_coordinator(self, tid: str) -> None:
        """Before answering that ``tid`` is unknown, make sure no successor took the log
        over: a coordinator paused and resumed has not seen the ids created meanwhile, and a
        batch writer reads "unknown" as "dropped after its retention period" (and, on its
        first EndTxn, as "did not commit"). A successor's takeover lands at this log's next
        offset, so one existence check there settles it (only on this rare answer)."""
        await self.commits.sync()
        assert self.commits.log is not None
        path = txn_state_log_path(self.commits.log.next_offset)
        if await self.io.call(self.io.size_or_none, path) is not None:
            raise NotCoordinatorError(
                f"another coordinator has written {path}: this one is stale and cannot tell "
                f"whether {tid!r} exists")

    def _confirm_in_end(self, txn: Txn, written: list[dict[str, Any]]) -> None:
        """Apply and queue a confirm of reservations of ``txn``'s producers (not awaited:
        the Prepare queued after it is, and the log is sequential)."""
        todo = self.state.to_confirm(_offsets(written), txn.producer_pids(),
                                     f"by a producer of {txn.tid!r}")
        for rpid, parts in todo.items():
            self.commits.commit([LogRecord("confirm", {"id": str(rpid), "pid": rpid,
                                                       "parts": parts})])

    # ================================================================= streaming
    async def begin_batch(self, tid: str, batch_id: int, timeout_ms: int = 60_000) -> Reply:
        """Begin (or join) the transaction of streaming batch ``batch_id`` (DESIGN 6.3)."""
        if not isinstance(batch_id, int) or batch_id < 0:
            raise InvalidRequestError(f"batch_id must be an int >= 0, got {batch_id!r}")
        while True:
            txn = self.state.txns.get(tid)
            if txn is None:
                await self.init_producer_id(tid, timeout_ms)
                continue
            if txn.last_committed_batch is not None and batch_id <= txn.last_committed_batch:
                await self.commits.sync()
                return {"state": "committed"}
            if txn.completing:
                await self.completer.completion(txn)
                continue
            if txn.batch_id is not None and batch_id < txn.batch_id:
                raise ProducerFencedError(
                    f"{tid!r} already runs batch {txn.batch_id}; batch {batch_id} is older "
                    "(another copy of the query?)")
            if txn.batch_id == batch_id:
                if not txn.state.is_prepare:  # lazy: a lost record fails the EndTxn
                    return {"producer_id": txn.pid, "epoch": txn.epoch}
                await self.commits.sync()
                continue
            if txn.state is TxnState.ONGOING:
                log.info("%r: batch %d begins while batch %s is open: aborting it", tid,
                         batch_id, txn.batch_id)
                await self.completer.end(txn, commit=False, committed=set(), reason="fenced")
                continue
            await self.commits.commit_or_queue([LogRecord("batch", {
                "id": tid, "tid": tid, "batch_id": batch_id})], lazy=True)
            return {"producer_id": txn.pid, "epoch": txn.epoch}

    # ==================================================================== topics
    async def create_topic(self, name: str, partitions: int,
                           config: dict[str, Any] | None = None, exist_ok: bool = False
                           ) -> Reply:
        """CreateTopics; answers as describe_topic. Without ``exist_ok`` a topic that this
        call did not create is TopicAlreadyExists, as Kafka answers (of two creations of one
        name at once, one succeeds); with it, an existing topic of any shape is no error."""
        validate_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int) \
                or not 1 <= partitions <= topics.MAX_PARTITIONS:
            raise InvalidPartitionsError(f"partitions must be in [1, {topics.MAX_PARTITIONS}]")
        cfg = validate_topic_config({str(k): str(v) for k, v in (config or {}).items()})
        if name in self.state.topics_deleting:
            raise TopicAlreadyExistsError(f"topic {name!r} is marked for deletion")
        meta, created = await self.io.call(topics.create_topic_if_absent, self.storage, name,
                                           partitions, cfg)
        logged = name not in self.state.topics
        if logged:
            # logged even when another call created it (or a coordinator died between its
            # put and its log record): the log knows every topic in storage
            await self.commits.commit([LogRecord("topic", {"id": name, "name": name,
                                                           "partitions": meta.partitions,
                                                           "config": dict(meta.config)})])
        else:
            await self.commits.sync()
        if not created and not exist_ok:
            raise TopicAlreadyExistsError(
                f"Topic '{name}' already exists (with {meta.partitions} partitions and "
                f"config {dict(meta.config)})")
        if logged:  # a topic the log knew already needs no new head (a writer's exist_ok)
            await self.request_stable()
        return await self.describe_topic(name)

    async def describe_topic(self, name: str) -> Reply:
        """The topic's partition count, config, and each partition's LEO, HW and LSO as
        readers may trust them (changes nothing)."""
        n = await self._partition_count(name)
        view = self.publisher.view()
        parts = []
        for p in range(n):
            key = partition_key(name, p)
            st = self.state.partition(key)
            hw, lso = view.get(key, (st.hw(), st.lso()))
            parts.append({"partition": p, "leo": st.leo, "hw": hw, "lso": lso})
        return {"name": name, "partitions": n, "config": self.state.topics[name]["config"],
                "offsets": parts}

    async def list_topics(self) -> list[str]:
        """Every topic in storage or known to the coordinator, sorted."""
        names = set(await self.io.call(topics.list_topics, self.storage)) | \
            set(self.state.topics)
        return sorted(names)

    def describe_txn(self, tid: str) -> Reply:
        """DescribeTransactions: ``tid``'s producer, epoch, state, members, partitions."""
        txn = self.state.txn(tid)
        return {"transactional_id": tid, "producer_id": txn.pid, "epoch": txn.epoch,
                "state": txn.state.kafka_name, "members": txn.members,
                "partitions": sorted(txn.partitions), "batch_id": txn.batch_id,
                "last_committed_batch": txn.last_committed_batch, "timeout_ms": txn.timeout_ms}
