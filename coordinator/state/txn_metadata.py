"""One transactional id's metadata and the transitions of its transaction.

Kafka's TransactionMetadata: the producer id and epoch, the state (``states.TxnState``),
members, partitions, reservations and offsets of the open transaction. Kafka prepares a
transition (``prepareXxx`` -> ``TxnTransitMetadata``) and completes it after the log append;
here ``transition_record`` is the prepare step (it checks the table and builds the record)
and ``CoordinatorState.apply`` of that record is the completion, run live and on replay
alike. Synchronous and free of storage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from txnlog.log_format.planted_bugs import enabled as unsafe

from ..errors import InvalidProducerEpochError, InvalidTxnStateError, ProducerFencedError
from .completion_plan import CompletionPlan
from .partition_state import PartitionOffset
from .states import TxnState, check_transition
from .txn_log_records import LogRecord

if TYPE_CHECKING:
    import asyncio

MAX_EPOCH = 32767 - 1  # Kafka: an epoch at Short.MAX_VALUE - 1 is exhausted


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Txn:
    """Kafka's TransactionMetadata for one transactional id."""

    tid: str
    pid: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    start_ms: int = -1
    last_update_ms: int = 0
    members: dict[str, int] = field(default_factory=dict)  # member_key -> member pid
    partitions: dict[str, list[Any]] = field(default_factory=dict)  # "t-p" -> [topic, p]
    reservations: list[PartitionOffset] = field(default_factory=list)
    offsets: list[dict[str, Any]] = field(default_factory=list)
    plan: CompletionPlan | None = None
    batch_id: int | None = None
    last_committed_batch: int | None = None
    last: dict[str, Any] | None = None  # the previous transaction: pid, epoch, outcome, reason
    # Declared at creation (InitProducerId's ``one_shot``): nobody will begin another
    # transaction under this id (a batch write's own ``txnlog-write-<uuid>``), so once its
    # transaction is decided it is kept only for ``--one-shot-id-retention-ms``.
    one_shot: bool = False
    # An EndTxn(abort) of a one-shot id that never opened a transaction (a write of zero
    # partitions, or a job that failed before any task joined): it is as done as Complete*.
    released: bool = False
    last_heartbeat: float = field(default_factory=time.monotonic)
    # Set while an EndTxn(commit) waits for the next log write to be planned with the
    # others that arrived meanwhile (completion.Completer); the reply resolves it. Not
    # state: never logged, never in a snapshot.
    ending: asyncio.Future[dict[str, Any]] | None = field(default=None, repr=False,
                                                          compare=False)

    def member_pids(self) -> set[int]:
        return set(self.members.values())

    def producer_pids(self) -> set[int]:
        """The transaction's own producer id and its members'."""
        return {self.pid, *self.members.values()}

    @property
    def completing(self) -> bool:
        """Prepared, or its commit waits to be prepared: nothing may join or change it."""
        return self.state.is_prepare or self.ending is not None

    @property
    def spark_write(self) -> bool:
        """A Spark write's transaction (a batch write's one-shot id, a stream's micro-batch):
        its tasks' memberships and reservations are lazy log records, made durable by the
        driver's EndTxn, which refuses what a lost coordinator never made durable."""
        return self.one_shot or self.batch_id is not None

    def one_shot_done_ms(self) -> int | None:
        """When a one-shot id's transaction was decided (its Complete*, or the release of an
        id that never opened one): the wall-clock ms its retention period runs from. None
        for a reusable id, or while anything may still happen to it."""
        if not self.one_shot:
            return None
        if self.state.is_complete or (self.state is TxnState.EMPTY and self.released):
            return self.last_update_ms
        return None

    def check_epoch(self, pid: int, epoch: int) -> None:
        """Raise unless (pid, epoch) is the current producer of this transactional id."""
        if pid != self.pid:
            raise ProducerFencedError(
                f"producer id {pid} is not the current producer of {self.tid!r} "
                f"(now {self.pid}): fenced by a newer instance")
        if epoch < self.epoch and not unsafe("no_epoch_check"):  # planted-bug switch
            raise ProducerFencedError(
                f"epoch {epoch} of {self.tid!r} was fenced: the current epoch is {self.epoch}")
        if epoch > self.epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of {self.tid!r} is ahead of the coordinator's {self.epoch}")

    def epoch_exhausted(self) -> bool:
        """The next bump needs a new producer id (Kafka: epoch at Short.MAX_VALUE - 1)."""
        return self.epoch + 1 >= MAX_EPOCH

    def transition_record(self, state: TxnState, **ext: Any) -> LogRecord:
        """Kafka's TransactionLogValue for entering ``state`` (ext: our extras; ``pid``,
        ``epoch`` and ``timeout_ms`` there override the current ones). Checks the
        transition table; applying the record makes the change."""
        check_transition(self.tid, self.state, state)
        start = self.start_ms
        if state is TxnState.ONGOING and self.state is not TxnState.ONGOING:
            start = now_ms()
        elif state is TxnState.EMPTY:
            start = -1
        parts = None
        if state is not TxnState.EMPTY:
            by_topic: dict[str, list[int]] = {}
            for topic, p in self.partitions.values():
                by_topic.setdefault(topic, []).append(p)
            parts = [[t, sorted(ps)] for t, ps in sorted(by_topic.items())]
            if state.is_complete:
                parts = []
        if isinstance(ext.get("plan"), CompletionPlan):
            ext["plan"] = ext["plan"].to_json()
        return LogRecord("txn", {
            "tid": self.tid, "pid": ext.pop("pid", self.pid),
            "epoch": ext.pop("epoch", self.epoch),
            "timeout_ms": ext.pop("timeout_ms", self.timeout_ms), "state": int(state),
            "partitions": parts, "last_update_ms": now_ms(), "start_ms": start, "ext": ext})

    def late_end(self, want: str, last: dict[str, Any], *, lenient: bool = False) -> None:
        """A retry of an EndTxn(``want``) whose transaction already completed as ``last``:
        return if that is the answer it got, else raise the error it must now get.

        ``lenient``: the planted ``abort_after_prepare`` bug answers any retried client end
        with what it asked for.
        """
        if last["reason"] == "client" and (last["outcome"] == want or lenient):
            return
        if last["reason"] == "timeout":
            raise InvalidProducerEpochError(
                f"the transaction of {self.tid!r} at epoch {last['epoch']} was aborted after "
                "transaction.timeout.ms without heartbeat; init the producer again")
        if last["reason"] == "fenced":
            raise ProducerFencedError(
                f"{self.tid!r} epoch {last['epoch']} was fenced by a newer instance")
        raise InvalidTxnStateError(
            f"the transaction of {self.tid!r} at epoch {last['epoch']} already ended with "
            f"{last['outcome']}, not {want}")
