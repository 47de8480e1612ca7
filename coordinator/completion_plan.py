"""The completion plan: every object ending one transaction writes, fixed before any is.

Kafka's coordinator decides the outcome in PrepareCommit/PrepareAbort and leaves the markers
to the partition leaders. Here the coordinator writes the markers itself, so the Prepare
record carries the whole plan — marker offsets, timestamp, coordinator epoch, fences,
.txnindex entries — and a restarted coordinator rewrites the same bytes (DESIGN 5.3).

The plan is typed here and stored in the Prepare record's ``ext.plan`` as the JSON object
it always was (``to_json``/``from_json`` keep its keys, their order and the positional rows),
so logs and snapshots written before it was typed recover unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from txnlog.log_format.control import ControlType, Marker, encode_markers

from .partition_state import PartitionOffset, partition_key

if TYPE_CHECKING:  # both import this module: the plan is part of their records
    from .state import CoordinatorState
    from .txn_log_records import LogRecord
    from .txn_metadata import Txn


class MarkerEntry(NamedTuple):
    """One producer's marker in a partition: ``[pid, epoch, 1 commit / 0 abort]``."""

    pid: int
    epoch: int
    commit: int


class MarkerRow(NamedTuple):
    """The markers of one transaction in one partition, at consecutive offsets from
    ``base``: ``[topic, partition, base, [[pid, epoch, commit], ...]]``."""

    topic: str
    partition: int
    base: int
    markers: list[MarkerEntry]


class TxnIndexRow(NamedTuple):
    """The .txnindex entries (AbortedTxn ``[pid, first, last, lso]``) named by the marker
    object at ``base``: ``[topic, partition, base, [[pid, first, last, lso], ...]]``."""

    topic: str
    partition: int
    base: int
    entries: list[list[int]]


_CONTROL = {1: ControlType.COMMIT, 0: ControlType.ABORT}


@dataclass
class CompletionPlan:
    """Kafka's PendingCompleteTxn, with what the markers need to be rebuilt byte for byte.

    ``verified``: reservations checked in storage before Prepare (a commit never includes an
    unwritten one); ``fences``: reservations closed by 0-byte objects; ``shared``: marker
    objects this plan shares with others planned in the same group, by their base offset;
    ``next_pid``/``next_epoch``: the producer id and epoch after the bump.
    """

    outcome: str  # "commit" | "abort"
    ts: int
    coordinator_epoch: int
    markers: list[MarkerRow]
    txnindex: list[TxnIndexRow]
    fences: list[PartitionOffset]
    verified: list[PartitionOffset]
    reason: str
    batch_id: int | None
    next_pid: int | None
    next_epoch: int | None
    shared: list[PartitionOffset] = field(default_factory=list)

    @property
    def commit(self) -> bool:
        return self.outcome == "commit"

    def to_json(self) -> dict[str, Any]:
        """The plan as the Prepare record and the snapshot store it (keys in their old order;
        ``shared`` only when there is some, as before)."""
        d: dict[str, Any] = {
            "outcome": self.outcome, "ts": self.ts, "cepoch": self.coordinator_epoch,
            "markers": self.markers, "txnindex": self.txnindex, "fences": self.fences,
            "verified": self.verified, "reason": self.reason, "batch_id": self.batch_id,
            "next_pid": self.next_pid, "next_epoch": self.next_epoch}
        if self.shared:
            d["shared"] = self.shared
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompletionPlan:
        return cls(
            outcome=d["outcome"], ts=d["ts"], coordinator_epoch=d["cepoch"],
            markers=[MarkerRow(t, p, b, [MarkerEntry(*m) for m in ms])
                     for t, p, b, ms in d["markers"]],
            txnindex=[TxnIndexRow(t, p, b, [list(e) for e in es])
                      for t, p, b, es in d["txnindex"]],
            fences=[PartitionOffset(*f) for f in d["fences"]],
            verified=[PartitionOffset(*v) for v in d["verified"]],
            reason=d.get("reason", "client"), batch_id=d.get("batch_id"),
            next_pid=d.get("next_pid"), next_epoch=d.get("next_epoch"),
            shared=[PartitionOffset(*s) for s in d.get("shared", [])])

    def marker_bytes(self, row: MarkerRow) -> bytes:
        """The control batches of this plan's markers in one partition (deterministic: a
        restart rebuilds the same bytes from the Prepare record)."""
        return encode_markers([Marker(_CONTROL[m.commit], m.pid, m.epoch,
                                      self.coordinator_epoch, self.ts)
                               for m in row.markers], base_offset=row.base)


def share_markers(plans: list[CompletionPlan]) -> None:
    """Mark runs of markers at consecutive offsets of one partition, from transactions
    planned together, as one object: each plan's ``shared`` gets ``(topic, p, object base)``.

    Only commit markers with no .txnindex entry in that partition share (an aborted
    member's range is indexed by its own marker object's name). The plans are in the
    Prepare records, so a restarted coordinator writes the same objects.
    """
    # (t, p) -> [object base, end, [plans]]
    runs: dict[tuple[str, int], list[Any]] = {}
    done: list[tuple[str, int, list[Any]]] = []
    for plan in plans:
        indexed = {(row.topic, row.partition) for row in plan.txnindex}
        for t, p, base, ms in plan.markers:
            if (t, p) in indexed:
                continue
            run = runs.get((t, p))
            if run is not None and run[1] == base:
                run[1] += len(ms)
                run[2].append(plan)
                continue
            if run is not None:
                done.append((t, p, run))
            runs[(t, p)] = [base, base + len(ms), [plan]]
    done += [(t, p, run) for (t, p), run in runs.items()]
    for t, p, (base, _end, members) in done:
        if len(members) > 1:
            for plan in members:
                plan.shared.append(PartitionOffset(t, p, base))


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
    return plan, records
