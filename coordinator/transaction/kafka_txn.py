"""Kafka's transactional producers (before EndTxn v5) on txnlog's transaction coordinator.

A Kafka client keeps the epoch InitProducerId gave it for every transaction and continues
its sequence numbers across transactions; txnlog's coordinator bumps the epoch at every
EndTxn and starts sequences at 0 in each epoch (KIP-890's rules, which Spark's writers
use). This role translates, so any gateway (they are stateless) maps a client's requests the
same way:

- **epochs**: InitProducerId through a gateway records the (producer id, epoch) handed to
  the client (record ``kafka_client``, kind 1030, in the snapshot too). A later request is
  the client's own only if it carries exactly that pair; an older epoch is a fenced
  instance (ProducerFenced), a newer one was never handed out. The request then acts with
  the coordinator's current epoch of that id.
- **sequences**: in each coordinator epoch, a partition's first batch fixes the client
  sequence that coordinator sequence 0 stands for; later batches are offset by it, so
  Kafka's duplicate and gap checks stay the coordinator's. That base lives in memory: after
  a coordinator restart, a partition that already has batches in the open transaction
  answers OutOfOrderSequence, which a Kafka client treats as abortable — it aborts and
  retries the transaction, so exactly-once holds.

Stored batches keep the client's epoch (verbatim); markers carry the coordinator's, which is
never lower — as in Kafka after a bump. Readers match aborted ranges by producer id only.

A transaction the coordinator aborts by itself (``transaction.timeout.ms`` passed) also
bumps the epoch, which the client does not see. Mapping its next requests to the current
epoch would put the rest of its transaction in a new one: a commit would then make only
that tail visible, and a retried batch would be stored twice. So, as Kafka answers a
producer whose transaction the coordinator timed out, its requests get
InvalidProducerEpoch until it acknowledges the abort — with EndTxn(abort), answered with
success, or with InitProducerId (KIP-360's bump). The acknowledgement is logged (the third
field of ``kafka_client``), so it survives a restart.

**Late requests of an ended transaction.** A gateway may still be working on a Produce
(retrying its Reserve while the coordinator restarts) after the client gave up on it, ended
the transaction and moved on. Mapped to the current epoch, that late batch would join the
client's *next* transaction. (A chaos run stored an aborted batch twice this way: the late
Reserve came between the client's EndTxn(abort) and its epoch bump.) As Kafka's brokers
verify a Produce against the transaction (KIP-890 part 1), two checks refuse it:

- AddPartitionsToTxn and AddOffsetsToTxn open the client's transaction (Ongoing, logged,
  as Kafka's coordinator does), and a Reserve or TxnOffsetCommit needs it open:
  between an EndTxn and the next AddPartitionsToTxn, they get InvalidTxnState;
- a partition's first batch in a new transaction may not carry a sequence the same client
  instance already used there (its sequences only go forward until an epoch bump): a late
  batch arriving after the next AddPartitionsToTxn gets OutOfOrderSequence. (This one is
  in memory; after a restart only the first check stands.)
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)
from ..state.partition_state import partition_key
from ..state.states import TxnState
from ..state.txn_log_records import LogRecord

if TYPE_CHECKING:
    from .transaction_coordinator import TransactionCoordinator


class KafkaClients:
    """Epoch and sequence translation for Kafka clients' transactional ids."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.e = coordinator
        # (producer id, coordinator epoch, "t-p") -> the client sequence of coordinator seq 0
        self.seq_base: dict[tuple[int, int, str], int] = {}
        # (producer id, client epoch, "t-p") -> the end of the client sequences written there
        self.seq_end: dict[tuple[int, int, str], int] = {}

    @property
    def clients(self) -> dict[str, list[int]]:
        return self.e.state.kafka_clients

    async def init(self, tid: str, timeout_ms: int, pid: int, epoch: int) -> dict[str, Any]:
        """InitProducerId of a Kafka client (``pid``/``epoch`` >= 0: KIP-360's bump by the
        instance itself, which must be the current one)."""
        if pid >= 0:
            have = self.clients.get(tid)
            if have is None or have[:2] != [pid, epoch]:
                raise ProducerFencedError(
                    f"{tid!r}: producer {pid} epoch {epoch} is not the current instance")
        r = await self.e.init_producer_id(tid, timeout_ms)
        await self._record(tid, r["producer_id"], r["epoch"])
        for slot in [s for s in self.seq_end if s[0] in (pid, r["producer_id"])]:
            del self.seq_end[slot]  # a new instance or epoch: its sequences start again
        return r

    async def _record(self, tid: str, pid: int, epoch: int) -> None:
        """Log the client's (pid, epoch) and that it knows of every transaction end so far."""
        txn = self.e.state.txns[tid]
        await self.e.commits.commit([LogRecord("kafka_client", {
            "id": tid, "tid": tid, "pid": pid, "epoch": epoch, "acked": txn.epoch})])

    def timed_out(self, tid: str, pid: int) -> bool:
        """Whether the coordinator aborted the client's transaction on its own (a timeout)
        and the client has not acknowledged it yet (see the module doc)."""
        txn = self.e.state.txns.get(tid)
        have = self.clients.get(tid)
        last = txn.last if txn is not None else None
        return (txn is not None and have is not None and last is not None
                and txn.state.is_complete and last.get("reason") == "timeout"
                and last.get("pid") == pid and have[2] != txn.epoch)

    def translate(self, tid: str, pid: int, epoch: int) -> int:
        """The coordinator's epoch for a request of the client holding (pid, epoch)."""
        coord_epoch = self._current_instance(tid, pid, epoch)
        if self.timed_out(tid, pid):
            raise InvalidProducerEpochError(
                f"the transaction of {tid!r} was aborted after transaction.timeout.ms "
                "without progress; abort it (or initialize again) before writing on")
        return coord_epoch

    def _current_instance(self, tid: str, pid: int, epoch: int) -> int:
        """Check (pid, epoch) is the client instance InitProducerId handed out last; the
        coordinator's current epoch of its id."""
        have = self.clients.get(tid)
        txn = self.e.state.txns.get(tid)
        if have is None or txn is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} has no producer id from InitProducerId")
        if have[0] != pid:
            raise InvalidProducerIdMappingError(
                f"{tid!r} has producer id {have[0]}, not {pid}")
        if epoch < have[1]:
            raise ProducerFencedError(
                f"{tid!r}: epoch {epoch} was fenced by a newer instance (epoch {have[1]})")
        if epoch > have[1]:
            raise InvalidProducerEpochError(f"{tid!r}: epoch {epoch} was never handed out")
        if txn.pid != pid:
            raise ProducerFencedError(
                f"{tid!r}: its producer id changed (epochs exhausted); initialize again")
        return txn.epoch

    async def check(self, tid: str, pid: int, epoch: int) -> dict[str, Any]:
        """AddPartitionsToTxn / AddOffsetsToTxn: the client may write into its transaction
        (the partitions join it at their Reserve)."""
        coord_epoch = self.translate(tid, pid, epoch)
        await self._open(tid)
        await self.e.heartbeat(tid, pid, coord_epoch)
        return {"epoch": coord_epoch}

    async def _open(self, tid: str) -> None:
        """Open the client's transaction (Kafka's AddPartitionsToTxn moves it to Ongoing)."""
        txn = self.e.state.txns[tid]
        if txn.state is TxnState.ONGOING:
            await self.e.commits.sync()
            return
        if txn.completing or txn.state.is_prepare:
            raise ConcurrentTransactionsError(f"{tid!r} is completing its transaction")
        await self.e.commits.commit([txn.transition_record(TxnState.ONGOING)])

    def _require_open(self, tid: str, what: str) -> None:
        """A Reserve or TxnOffsetCommit only joins a transaction the client opened (see the
        module doc: otherwise it is a late request of one that has ended)."""
        if self.e.state.txns[tid].state is not TxnState.ONGOING:
            raise InvalidTxnStateError(
                f"{tid!r} has no open transaction: {what} must follow AddPartitionsToTxn / "
                "AddOffsetsToTxn (a late retry of an ended transaction is refused)")

    async def reserve(self, tid: str, pid: int, epoch: int,
                      parts: list[dict[str, Any]]) -> dict[str, Any]:
        coord_epoch = self.translate(tid, pid, epoch)
        self._require_open(tid, "a Produce")
        client_epoch = self.clients[tid][1]
        ps = self.e.state.producers.get(pid)
        mapped = []
        for part in parts:
            key = partition_key(part["topic"], part["partition"])
            slot = (pid, coord_epoch, key)
            base = self.seq_base.get(slot)
            if base is None:
                if ps is not None and ps.history(key, coord_epoch):
                    raise OutOfOrderSequenceError(
                        f"{tid!r} partition {key}: the coordinator restarted during this "
                        "transaction; abort it and retry")
                used = self.seq_end.get((pid, client_epoch, key), 0)
                if part["base_sequence"] < used:
                    raise OutOfOrderSequenceError(
                        f"{tid!r} partition {key}: sequence {part['base_sequence']} belongs "
                        f"to an earlier transaction (this producer has written up to {used})")
                base = part["base_sequence"]
            seq = part["base_sequence"] - base
            if seq < 0:
                raise OutOfOrderSequenceError(
                    f"{tid!r} partition {key}: sequence {part['base_sequence']} is before this "
                    f"transaction's first ({base})")
            mapped.append({**part, "base_sequence": seq})
            self.seq_base.setdefault(slot, base)
        out = await self.e.reserve(pid, coord_epoch, mapped)
        for part in parts:
            slot2 = (pid, client_epoch, partition_key(part["topic"], part["partition"]))
            self.seq_end[slot2] = max(self.seq_end.get(slot2, 0),
                                      part["base_sequence"] + part["count"])
        return {"partitions": out, "epoch": coord_epoch}

    async def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str,
                          offsets: list[dict[str, Any]]) -> dict[str, Any]:
        coord_epoch = self.translate(tid, pid, epoch)
        self._require_open(tid, "a TxnOffsetCommit")
        return await self.e.add_offsets(tid, pid, coord_epoch, group_id, offsets)

    async def end(self, tid: str, pid: int, epoch: int, commit: bool) -> dict[str, Any]:
        if not commit and self.timed_out(tid, pid):
            # The client aborts the transaction the coordinator already aborted: that is
            # its answer (Kafka's too), and from now on it writes in the current epoch.
            self._current_instance(tid, pid, epoch)
            await self._record(tid, pid, epoch)
            return {"outcome": "abort"}
        coord_epoch = self.translate(tid, pid, epoch)
        txn = self.e.state.txns.get(tid)
        last = txn.last if txn is not None else None
        if commit and txn is not None and last is not None and last["pid"] == pid and \
                last["epoch"] < coord_epoch and txn.state is TxnState.COMPLETE_COMMIT:
            # A retried EndTxn(commit) whose answer was lost (a gateway killed while it
            # waited): the client's epoch never changes, so the translation points at the
            # epoch after the bump, and the transaction it committed is ``last`` (nothing
            # was written since: CompleteCommit, not Ongoing). Kafka answers such a retry
            # with success; INVALID_TXN_STATE is fatal to librdkafka. (An abort here is the
            # abort of a new transaction that wrote nothing, and is answered as before:
            # success.)
            await self.e.commits.sync()
            txn.late_end("commit", last)
            return {"outcome": "commit"}
        r = await self.e.end_txn(tid, pid, coord_epoch, commit)
        for slot in [s for s in self.seq_base if s[0] == pid and s[1] <= coord_epoch]:
            del self.seq_base[slot]
        return {"outcome": r.get("outcome")}


_ROLE: weakref.WeakKeyDictionary[Any, KafkaClients] = weakref.WeakKeyDictionary()


def kafka_clients(e: TransactionCoordinator) -> KafkaClients:
    got = _ROLE.get(e)
    if got is None:
        got = _ROLE[e] = KafkaClients(e)
    return got


def _parts(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"topic": i["topic"], "partition": i["partition"],
             "base_sequence": i["base_sequence"], "count": i["count"]} for i in items]


async def _init(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await kafka_clients(e).init(b["transactional_id"], b["transaction_timeout_ms"],
                                       b["producer_id"], b["epoch"])


async def _check(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await kafka_clients(e).check(b["transactional_id"], b["producer_id"], b["epoch"])


async def _reserve(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await kafka_clients(e).reserve(b["transactional_id"], b["producer_id"],
                                          b["epoch"], _parts(b["partitions"]))


async def _add_offsets(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await kafka_clients(e).add_offsets(
        b["transactional_id"], b["producer_id"], b["epoch"], b["group_id"], b["offsets"])


async def _end(e: TransactionCoordinator, b: dict[str, Any]) -> Any:
    return await kafka_clients(e).end(b["transactional_id"], b["producer_id"], b["epoch"],
                                      b["commit"])


KAFKA_TXN_OPERATIONS = {
    "kafka_init_producer_id": _init, "kafka_txn_check": _check, "kafka_reserve": _reserve,
    "kafka_add_offsets": _add_offsets, "kafka_end_txn": _end,
}

__all__ = ["KAFKA_TXN_OPERATIONS", "KafkaClients", "kafka_clients"]
