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
from typing import Any, NamedTuple

from txnlog.log_format import layout
from txnlog.log_format.codec.control import ControlType, Marker, encode_markers
from txnlog.log_format.segments import shared_object

from .partition_state import PartitionOffset


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
    ``next_pid``/``next_epoch``: the producer id and epoch after the bump;
    ``marker_object``: the one shared object holding this plan's markers of every partition
    (``_wal/…``; None in plans logged before markers shared an object: one object per
    partition, at its base offset).
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
    marker_object: str | None = None
    # [position, size] of each row of ``markers`` in ``marker_object``
    marker_runs: list[list[int]] = field(default_factory=list)

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
        if self.marker_object is not None:
            d["marker_object"] = self.marker_object
            d["marker_runs"] = self.marker_runs
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
            shared=[PartitionOffset(*s) for s in d.get("shared", [])],
            marker_object=d.get("marker_object"),
            marker_runs=[[int(a), int(b)] for a, b in d.get("marker_runs", [])])

    def marker_bytes(self, row: MarkerRow) -> bytes:
        """The control batches of this plan's markers in one partition (deterministic: a
        restart rebuilds the same bytes from the Prepare record)."""
        return encode_markers([Marker(_CONTROL[m.commit], m.pid, m.epoch,
                                      self.coordinator_epoch, self.ts)
                               for m in row.markers], base_offset=row.base)


    def in_one_object(self, path: str) -> None:
        """Put every partition's markers of this plan in the shared object ``path``."""
        self.marker_object = path
        _data, entries = self.marker_object_bytes()
        self.marker_runs = [[e.position, e.size] for e in entries]

    def marker_object_bytes(self) -> tuple[bytes, list[shared_object.SharedEntry]]:
        """The marker object's bytes (every partition's control batches, in plan order,
        and the footer naming the producer its name carries) and where each partition's
        run lies in it: deterministic, so a restart writes the same bytes to the same
        name."""
        assert self.marker_object is not None
        producer_id, epoch = layout.shared_object_writer(self.marker_object)
        return shared_object.build(
            [shared_object.RunToWrite(r.topic, r.partition, r.base, r.base + len(r.markers),
                                      self.marker_bytes(r)) for r in self.markers],
            producer_id, epoch)


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
        if plan.marker_object is not None:
            continue  # its markers are in an object of its own, every partition's
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
