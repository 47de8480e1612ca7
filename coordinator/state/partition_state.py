"""Per-partition producer state: offsets, reservations, sequences, and what readers may see.

Kafka's ProducerStateManager / ProducerStateEntry / BatchMetadata, for a log whose offsets are
handed out by the coordinator before the data is written (a reservation) instead of assigned
by a leader on append:

- ``PartitionState``: the log end offset handed out, the reservations not yet resolved
  (written, fenced or marked) and the first offset of each open transaction — so HW and LSO
  follow from it alone;
- ``ProducerState`` / ``SeqEntry``: the last ``SEQ_HISTORY`` batches per producer and
  partition, for Kafka's idempotence rules (``check_sequence``);
- ``UnreplicatedTxn``: a completed transaction whose markers readers may not see yet (Kafka's
  ``unreplicatedTxns``), which holds LSOs back (``visible_offsets``).

Everything here is synchronous and free of storage; ``visible_offsets`` is a pure function
and the caller decides when to drop what no longer holds (``Visibility``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from txnlog.log_format import layout

from ..errors import DuplicateSequenceError, OutOfOrderSequenceError

SEQ_HISTORY = 5  # Kafka keeps the last 5 batches per producer for duplicate detection


@lru_cache(maxsize=1 << 16)
def partition_key(topic: str, partition: int) -> str:
    """The key of a partition in the state: its log dir name, ``<topic>-<partition>``
    (cached: the visibility scan asks for every partition on every stable snapshot)."""
    return layout.partition_dir(topic, partition)


class PartitionOffset(NamedTuple):
    """One object of a partition, named by its base offset (a reservation, a fence)."""

    topic: str
    partition: int
    base: int


class WrittenRun(NamedTuple):
    """A reserved range its producer wrote, as Confirm and EndTxn's ``written`` name it: at
    its own ``<topic>-<p>/<base>.log`` (``path`` None), or as the run of bytes
    ``[position, position + size)`` of shared object ``path``."""

    topic: str
    partition: int
    base: int
    path: str | None = None
    position: int = 0
    size: int = 0


class ReservedBatch(NamedTuple):
    """One partition of a ``reserve`` record: ``[topic, partition, base_seq, count, base]``."""

    topic: str
    partition: int
    base_seq: int
    count: int
    base_offset: int


class SeqEntry(NamedTuple):
    """Kafka's BatchMetadata: one reserved batch of a producer in a partition.

    Serialises as the JSON list ``[epoch, base_seq, count, base_offset]``.
    """

    epoch: int
    base_seq: int
    count: int
    base_offset: int

    @property
    def next_seq(self) -> int:
        """The sequence the producer's next batch in this partition must start at."""
        return self.base_seq + self.count


class UnreplicatedRange(NamedTuple):
    """Where a completed transaction lies in one partition.

    Serialises as ``[first, data_end, marker_end]``: its first offset, the end of its records
    and the end of its markers (exclusive).
    """

    first: int
    data_end: int
    marker_end: int


@dataclass
class UnreplicatedTxn:
    """A completed transaction that may still hold LSOs back (see ``visible_offsets``).

    Serialises as ``{"commit": bool, "parts": {"t-p": [first, data_end, marker_end]}}`` (the
    ``held`` list of the coordinator snapshot).
    """

    commit: bool
    parts: dict[str, UnreplicatedRange]

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "parts": self.parts}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> UnreplicatedTxn:
        return cls(bool(d["commit"]),
                   {k: UnreplicatedRange(*v) for k, v in d["parts"].items()})


@dataclass
class PartitionState:
    """Offsets handed out in one partition and which of them are not yet resolved."""

    leo: int = 0
    unresolved: dict[int, int] = field(default_factory=dict)  # base -> end (exclusive)
    open_first: dict[int, int] = field(default_factory=dict)  # pid -> first offset (open txn)

    def hw(self) -> int:
        """Every offset below is resolved: written, fenced or a marker."""
        return min(self.unresolved) if self.unresolved else self.leo

    def lso(self) -> int:
        """Below the HW and the first offset of every open transaction."""
        hw = self.hw()
        return min(hw, min(self.open_first.values())) if self.open_first else hw

    def reserve(self, base: int, end: int) -> None:
        """Offsets ``[base, end)`` are handed out and unresolved until written or marked."""
        self.leo = max(self.leo, end)
        self.unresolved[base] = end


@dataclass
class Reservation:
    """Offsets handed to a producer, until its transaction completes (or, idempotent, until
    they are confirmed or fenced)."""

    topic: str
    partition: int
    base: int
    count: int
    pid: int
    tid: str | None
    confirmed: bool = False
    created: float = field(default_factory=time.monotonic)

    @property
    def where(self) -> PartitionOffset:
        return PartitionOffset(self.topic, self.partition, self.base)


@dataclass
class ProducerState:
    """Kafka's ProducerStateEntry: a producer id, its epoch, and its recent batches."""

    pid: int
    epoch: int
    tid: str | None  # owning transactional id (None: idempotent producer)
    member: bool = False
    # "topic-p" -> the last SEQ_HISTORY batches (SeqEntry serialises as a JSON list)
    seqs: dict[str, list[SeqEntry]] = field(default_factory=dict)

    def history(self, key: str, epoch: int) -> list[SeqEntry]:
        """The remembered batches in partition ``key`` at ``epoch`` (older epochs reset)."""
        return [h for h in self.seqs.get(key, []) if h.epoch == epoch]

    def expected_sequence(self, key: str, epoch: int) -> int:
        """The base sequence the next batch in ``key`` must carry at ``epoch``."""
        hist = self.history(key, epoch)
        return hist[-1].next_seq if hist else 0

    def record_batch(self, key: str, entry: SeqEntry) -> None:
        """Remember a reserved batch (a new epoch starts the history again)."""
        hist = self.seqs.setdefault(key, [])
        if hist and hist[-1].epoch != entry.epoch:
            hist.clear()
        hist.append(entry)
        del hist[:-SEQ_HISTORY]


def check_sequence(ps: ProducerState, key: str, epoch: int, seq: int, count: int
                   ) -> int | None:
    """Kafka's idempotence check for a batch of ``count`` at ``seq`` in partition ``key``.

    Returns None for the next batch in order (reserve new offsets), or the base offset of an
    identical batch already reserved (a retry: answer it again). Raises
    DuplicateSequenceError for a remembered sequence with another count, and
    OutOfOrderSequenceError for a gap (or a sequence older than what is remembered).
    Only batches of the caller's epoch count: the epoch is checked before this.
    """
    hist = ps.history(key, epoch)
    expected = hist[-1].next_seq if hist else 0
    if seq == expected:
        return None
    dup = next((h for h in hist if h.base_seq == seq and h.count == count), None)
    if dup is not None:
        return dup.base_offset
    if hist and seq < expected:
        raise DuplicateSequenceError(
            f"producer {ps.pid} partition {key}: sequence {seq} was already reserved "
            f"(next expected {expected}) with a different count")
    raise OutOfOrderSequenceError(
        f"producer {ps.pid} epoch {epoch} partition {key}: sequence {seq}, "
        f"expected {expected}")


# ------------------------------------------------------------------ HW/LSO visibility

Offsets = dict[str, tuple[int, int]]  # "t-p" -> (HW, LSO)


class Visibility(NamedTuple):
    """What ``visible_offsets`` found: the view, and the bookkeeping it still needs.

    ``unreplicated``: the completed transactions that still hold something back (the others
    can never hold again); ``predecessor_floor``: the partitions whose own values have not
    caught up with what the previous coordinator published. Only the stable publisher
    stores these back (``CoordinatorState.release_unreplicated``): a read-only view
    (describe_topic) leaves the state as it was.
    """

    offsets: Offsets
    unreplicated: list[UnreplicatedTxn]
    predecessor_floor: Offsets


def visible_offsets(topics: dict[str, dict[str, Any]], partitions: dict[str, PartitionState],
                    unreplicated: list[UnreplicatedTxn], predecessor_floor: Offsets,
                    only: Iterable[str] | None = None) -> Visibility:
    """Every partition's (HW, LSO) as readers may trust them. Pure: changes nothing.

    ``only``: compute just these partitions (the stable publisher's delta: the partitions
    records changed since its last snapshot). The answer for each is the one the full scan
    gives, because the held-back and floor partitions are added to them: holding back and
    the floor read and write only the partitions of ``unreplicated`` entries and of the
    floor, and every other partition's value follows from its own state alone.

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
    out: Offsets = {}
    if only is None:
        for name, meta in topics.items():
            for p in range(int(meta["partitions"])):
                key = partition_key(name, p)
                st = partitions.get(key)
                out[key] = (st.hw(), st.lso()) if st else (0, 0)
    else:
        keys = set(only).union(predecessor_floor, *(e.parts for e in unreplicated))
        for key in keys:
            st = partitions.get(key)
            if st is not None:  # a topic's partitions are all in the state once created
                out[key] = (st.hw(), st.lso())
    still = _hold_back_unreplicated(out, unreplicated)
    floor = _apply_predecessor_floor(out, predecessor_floor)
    return Visibility(out, still, floor)


def _holds(entry: UnreplicatedTxn, out: Offsets) -> list[str]:
    """Partitions ``entry`` must hold at its first offset under ``out``."""
    parts = entry.parts
    # Records below the LSO but their markers at or above the HW: readers may not
    # have seen the .txnindex that hides aborted records (of an aborted transaction,
    # or of the members a commit left out), so hold those partitions.
    held = [k for k, r in parts.items() if out.get(k, (0, 0))[0] < r.marker_end]
    # A commit whose records are not all below the LSO somewhere holds everywhere.
    if entry.commit and any(out.get(k, (0, 0))[1] < r.data_end for k, r in parts.items()):
        return list(parts)
    return held


def _hold_back_unreplicated(out: Offsets, unreplicated: list[UnreplicatedTxn]
                            ) -> list[UnreplicatedTxn]:
    """Lower LSOs in ``out`` for completed transactions readers may not see whole yet;
    returns those that still hold (the rest are released for good)."""
    pending = list(unreplicated)
    while pending:
        lowered: set[str] = set()
        for entry in pending:
            for key in _holds(entry, out):
                first = entry.parts[key].first
                hw, lso = out.get(key, (0, 0))
                if lso > first:
                    out[key] = (hw, first)
                    lowered.add(key)
        # Only entries in a partition whose LSO just moved can change their answer.
        pending = [e for e in unreplicated if lowered & e.parts.keys()]
    return [e for e in unreplicated if _holds(e, out)]


def _apply_predecessor_floor(out: Offsets, floor: Offsets) -> Offsets:
    """Never publish less than the previous coordinator did; returns the floor still needed.

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
    still: Offsets = {}
    for key, (fhw, flso) in floor.items():
        cur = out.get(key)
        if cur is None:
            still[key] = (fhw, flso)
            continue
        if cur[0] < fhw or cur[1] < flso:
            out[key] = (max(cur[0], fhw), max(cur[1], flso))
            still[key] = (fhw, flso)
    return still
