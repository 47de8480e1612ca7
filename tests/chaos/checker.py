"""Jepsen-style checker over a txnlog history (pure functions; see history.py for the format).

Vocabulary from Jepsen's Kafka workload, sharpened by what txnlog promises (atomic
visibility across partitions and topics through one stable snapshot):

- ``lost-write``: a committed transaction's record is missing from the final read.
- ``aborted-read`` (G1a): a record of a definitely aborted/failed transaction was read
  under read_committed; or of a transaction of unknown outcome that the final read shows
  none of (it aborted: nothing of it was ever committed, so no read_committed read may
  have returned it; retention and compaction excepted).
- ``torn-transaction``: a read saw part of a transaction but not the rest: in a full read
  (scan/final/spark) some records missing; in an incremental poll another record of it lies
  at or above that snapshot's LSO; in the final read an ``unknown`` transaction is neither
  all visible nor all invisible.
- ``duplicate``: one value at two offsets (or twice in one read). An offset that holds
  aborted data (read under read_uncommitted, covered by a read_committed read that skipped
  it, never returned under read_committed) does not count: Kafka shows aborted batches to
  read_uncommitted readers, such as a retried Spark task attempt's rows left out of its
  commit) when each copy of the value came from another producer id (the final
  read_uncommitted scan's ``producers``); two copies from one producer still count.
- ``inconsistent-offset``: one offset read with two values, or read as empty by a read that
  covered it and with a value by another (same isolation level).
- ``nonmonotonic-poll``: a consumer's offsets, snapshot or bounds went backwards;
  ``poll-skip``: its next poll did not start where the last one ended.
- ``read-past-lso`` / ``read-past-hw``: a read beyond its snapshot's bound.
- ``nonmonotonic-send``: one producer's later transaction landed before an earlier one in
  a partition.
- ``phantom-read``: a value no send produced.
- ``read-below-log-start``: a read returned a record below the log start offset of the
  listing it read with (retention or DeleteRecords had deleted it: Kafka's
  OffsetOutOfRange). Records below a read's log start are deleted, not lost: ``lost-write``,
  ``torn-transaction`` (full reads) and covered-but-empty offsets do not count them
  (``log_start`` of each read op; the final read's for lost writes).
- ``early-drop``: a retried EndTxn of a one-shot id (``retry`` op) was answered "unknown id"
  less than the retention period after the transaction's end was asked for: the
  coordinator dropped the id before a retry could no longer need it. Sound without clock
  reasoning beyond one machine: the Complete record is written after ``t0`` and the drop
  comes at least a retention period after it, so an answer received before
  ``t0 + retention`` cannot be "unknown" unless the id was dropped early.
- ``retry-changed``: such a retry, inside or after the retention period, was answered with
  another definite outcome than the first answer (an "unknown id" after the period is fine).
- ``unauthorized-visible``: a read (any isolation level, any mode) returned a value the
  intruder of an ``--acls`` run tried to write (``intrude`` ops): a principal without WRITE
  on the topic, or on the transactional id, got a record into the log.
- ``unauthorized-accepted``: one of the intruder's attempts was answered as committed
  (``intrude-end`` op with outcome ``accepted``) instead of refused.
- ``stream-lost`` / ``stream-duplicate`` / ``stream-phantom`` / ``stream-order``: the
  streaming pipeline's output (``stream-final`` op: ``out:<tp>:<offset>:<value>`` records)
  against the final read_committed read of its input: every committed input record exactly
  once, nothing else (no aborted or invented record), in input-offset order per output
  partition and input partition.

``check(ops)`` returns a ``Result``; each anomaly keeps a few examples for the report.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

ANOMALIES = ("lost-write", "aborted-read", "torn-transaction", "duplicate",
             "inconsistent-offset", "nonmonotonic-poll", "poll-skip", "read-past-lso",
             "read-past-hw", "nonmonotonic-send", "phantom-read", "stream-lost",
             "stream-duplicate", "stream-phantom", "stream-order", "early-drop",
             "retry-changed", "read-below-log-start", "unauthorized-visible",
             "unauthorized-accepted")
FULL_MODES = ("scan", "final", "spark")
MAX_EXAMPLES = 5


@dataclass
class Txn:
    """What the history says about one transaction."""

    id: str
    proc: str
    seq: int
    sends: list[dict[str, Any]] = field(default_factory=list)
    commit: str | None = None  # outcome of the commit op
    abort: str | None = None  # outcome of the abort op

    @property
    def status(self) -> str:
        """committed / aborted (definitely not) / unknown (may have gone either way)."""
        if self.commit == "ok":
            return "committed"
        if self.abort == "ok" or self.commit == "fail":
            return "aborted"
        if self.commit is None and self.abort is None and not self.sends:
            return "aborted"
        return "unknown"

    @property
    def values(self) -> set[int]:
        return {s["value"] for s in self.sends}


@dataclass
class Result:
    anomalies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.counts

    def add(self, kind: str, **example: Any) -> None:
        assert kind in ANOMALIES, kind
        self.counts[kind] = self.counts.get(kind, 0) + 1
        examples = self.anomalies.setdefault(kind, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(example)

    def summary(self) -> str:
        if self.valid:
            return f"valid: {self.stats}"
        lines = [f"INVALID: {self.counts}; {self.stats}"]
        for kind, examples in self.anomalies.items():
            for ex in examples:
                lines.append(f"  {kind}: {ex}")
        return "\n".join(lines)


def _txn_seq(txn_id: str) -> int:
    tail = txn_id.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


def build_txns(ops: list[dict[str, Any]]) -> dict[str, Txn]:
    txns: dict[str, Txn] = {}
    for op in ops:
        if op["f"] not in ("send", "commit", "abort"):
            continue
        tid = op["txn"]
        txn = txns.get(tid)
        if txn is None:
            txn = txns[tid] = Txn(tid, op["proc"], _txn_seq(tid))
        if op["f"] == "send":
            txn.sends.append(op)
        elif op["f"] == "commit":
            # a later definite answer wins over an earlier unknown one
            if txn.commit in (None, "unknown"):
                txn.commit = op["outcome"]
        elif txn.abort in (None, "unknown"):
            txn.abort = op["outcome"]
    return txns


def _reads(op: dict[str, Any]) -> Iterable[tuple[str, int, int]]:
    for tp, recs in (op.get("reads") or {}).items():
        for offset, value in recs:
            yield tp, offset, value


def check(ops_in: Iterable[dict[str, Any]], compacted: bool = False) -> Result:
    """Every check over one history. ``compacted``: the topics have
    ``cleanup.policy=compact``, so a value may disappear once it is superseded
    (see ``compaction.superseded``), and a read_uncommitted read may stop showing aborted
    data the cleaner removed; nothing else may."""
    ops = list(ops_in)
    res = Result()
    txns = build_txns(ops)
    by_value: dict[int, Txn] = {}
    for txn in txns.values():
        for s in txn.sends:
            by_value[s["value"]] = txn
    polls = [op for op in ops if op["f"] == "poll" and op.get("outcome", "ok") == "ok"]
    finals = [op for op in polls if op.get("mode") == "final"
              and op.get("isolation") == "read_committed"]
    # Where each value lives: from every read (the final one first), else from the send.
    where: dict[int, tuple[str, int]] = {}
    for op in finals + polls:
        for tp, offset, value in _reads(op):
            where.setdefault(value, (tp, offset))
    for op in ops:  # a send's own offset (known once flushed): where a value never read is
        if op["f"] == "send" and op.get("offset") is not None:
            where.setdefault(op["value"], (f"{op['topic']}-{op['partition']}", op["offset"]))
        elif op["f"] == "placed":  # the offsets of a committed transaction's records
            for value, tp, offset in op.get("at") or []:
                where.setdefault(value, (tp, offset))

    gone: set[int] = set()  # values compaction may have removed
    gone_uncommitted: set[int] = set()
    if compacted:
        from .compaction import removable
        gone, gone_uncommitted = removable(ops, txns, where, finals[-1] if finals else None)
        res.stats["superseded"] = len(gone)
    _check_retries(res, [op for op in ops if op["f"] == "retry"])
    intruder = _check_unauthorized(res, ops, polls)
    _check_values(res, polls, by_value,
                  _resolved_aborted(txns, finals[-1], where, gone | gone_uncommitted)
                  if finals else frozenset(), intruder)
    _check_offsets(res, polls, gone | gone_uncommitted)
    _check_bounds(res, polls)
    _check_consumers(res, polls)
    _check_torn(res, polls, txns, by_value, where, gone)
    _check_log_start(res, polls)
    if finals:
        _check_final(res, finals[-1], txns, gone, where)
        streams = [op for op in ops if op["f"] == "stream-final"]
        if streams:
            _check_stream(res, finals[-1], streams[-1])
    else:
        res.stats["warning"] = "no final read: lost writes and unknown outcomes not checked"
    statuses = defaultdict(int)
    for txn in txns.values():
        statuses[txn.status] += 1
    res.stats.update(
        txns=len(txns), committed=statuses["committed"], aborted=statuses["aborted"],
        unknown=statuses["unknown"],
        records=sum(len(t.sends) for t in txns.values()),
        committed_records=sum(len(t.sends) for t in txns.values()
                              if t.status == "committed"),
        polls=len(polls))
    return res


def _check_retries(res: Result, retries: list[dict[str, Any]]) -> None:
    """Retried EndTxns of one-shot ids: the same answer while the id must be kept."""
    same = 0
    for op in retries:
        answer = str(op.get("answer", ""))
        if answer == "same":
            same += 1
        elif answer == "unknown-id":
            if op["t1"] - op["t0"] < op["retention_ms"] / 1000:
                res.add("early-drop", txn=op["txn"], tid=op.get("tid"),
                        after_s=round(op["t1"] - op["t0"], 3),
                        retention_ms=op["retention_ms"])
        elif answer.startswith("other"):
            res.add("retry-changed", txn=op["txn"], end=op.get("end"), answer=answer)
    if retries:
        res.stats["one_shot_retries"] = len(retries)
        res.stats["one_shot_retries_same"] = same


def _resolved_aborted(txns: dict[str, Txn], final: dict[str, Any],
                      where: dict[int, tuple[str, int]], gone: AbstractSet[int]) -> set[str]:
    """Transactions of unknown outcome of which the final read shows nothing: aborted
    (all-or-nothing is checked by the final read; a record deleted by retention or one
    compaction may remove keeps its transaction out of this set)."""
    visible = {v for _, _, v in _reads(final)}
    return {t.id for t in txns.values()
            if t.status == "unknown" and t.sends and not t.values & visible
            and not t.values & gone and not any(_deleted(final, where.get(v))
                                                for v in t.values)}


def _aborted_copies(polls: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """Offsets that hold aborted data: read under read_uncommitted, inside the range of
    some read_committed read (above its log start) that returned nothing there, and never
    returned by any read_committed read. A record there belongs to an aborted batch: Kafka
    shows it under read_uncommitted (a retried Spark task attempt's rows left out of the
    commit, a producer's batch written again after an abort), never under read_committed,
    so a value seen there and at one committed offset is not a duplicate. A copy that some
    read_committed read returned, or that no read_committed read covered, still counts."""
    rc_returned: set[tuple[str, int]] = set()
    rc_ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    ru: set[tuple[str, int]] = set()
    for op in polls:
        if op.get("isolation") == "read_committed":
            rc_returned.update((tp, offset) for tp, offset, _ in _reads(op))
            start = op.get("log_start") or {}
            for tp, (lo, hi) in (op.get("ranges") or {}).items():
                lo = max(lo, start.get(tp, 0))
                if hi > lo:
                    rc_ranges[tp].append((lo, hi))
        else:
            ru.update((tp, offset) for tp, offset, _ in _reads(op))
    covered = {tp: _merged(spans) for tp, spans in rc_ranges.items()}
    return {(tp, offset) for tp, offset in ru - rc_returned
            if _inside(covered.get(tp, ()), offset)}


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open ranges as sorted, disjoint ones covering the same offsets."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _inside(spans: Any, offset: int) -> bool:
    """Whether sorted disjoint half-open ``spans`` hold ``offset`` (a bisect, not a scan of
    every read's range per offset: histories have tens of thousands of reads)."""
    i = bisect.bisect_right(spans, (offset, 1 << 62)) - 1
    return i >= 0 and spans[i][0] <= offset < spans[i][1]


def _check_unauthorized(res: Result, ops: list[dict[str, Any]],
                        polls: list[dict[str, Any]]) -> set[int]:
    """unauthorized-visible / -accepted: the intruder's values in any read, its attempts
    answered as committed. Returns its values (reported here, not as phantoms)."""
    attempts = [op for op in ops if op["f"] == "intrude"]
    if not attempts:
        return set()
    values = {int(v) for op in attempts for v in op.get("values") or []}
    txn_of = {int(v): op["txn"] for op in attempts for v in op.get("values") or []}
    for op in polls:
        for tp, offset, value in _reads(op):
            if value in values:
                res.add("unauthorized-visible", proc=op["proc"], mode=op.get("mode"),
                        isolation=op.get("isolation"), tp=tp, offset=offset, value=value,
                        txn=txn_of[value])
    refused: dict[str, int] = defaultdict(int)
    ends = [op for op in ops if op["f"] == "intrude-end"]
    for op in ends:
        if op.get("outcome") == "accepted":
            res.add("unauthorized-accepted", proc=op["proc"], txn=op["txn"],
                    attempt=op.get("kind"), tid=op.get("tid"))
        elif op.get("outcome") == "refused":
            refused[str(op.get("error", "")).partition(":")[0]] += 1
    res.stats["intruder_attempts"] = len(ends)
    res.stats["intruder_refused"] = sum(refused.values())
    res.stats["intruder_refusals"] = dict(refused)
    return values


def _check_values(res: Result, polls: list[dict[str, Any]], by_value: dict[int, Txn],
                  resolved_aborted: AbstractSet[str] = frozenset(),
                  intruder: AbstractSet[int] = frozenset()) -> None:
    """aborted-read, duplicate (across reads and within one), phantom-read.

    A copy of a value at an offset of aborted data (``_aborted_copies``) is not a
    duplicate when each copy of the value was written by another producer (a retried
    Spark task attempt is a producer of its own); two copies from one producer are (a
    Kafka client's batch written twice), and so is a copy whose producer is unknown.
    Exempt copies (values with another copy) are counted in the ``aborted_copies`` stat."""
    aborted_at = _aborted_copies(polls)
    seen_at: dict[int, tuple[str, int]] = {}
    copies: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for op in polls:
        rc = op.get("isolation") == "read_committed"
        in_this: set[int] = set()
        for tp, offset, value in _reads(op):
            txn = by_value.get(value)
            if txn is None:
                if value not in intruder:  # the intruder's: unauthorized-visible
                    res.add("phantom-read", proc=op["proc"], tp=tp, offset=offset,
                            value=value)
                continue
            if rc and (txn.status == "aborted" or txn.id in resolved_aborted):
                res.add("aborted-read", proc=op["proc"], mode=op.get("mode"), tp=tp,
                        offset=offset, value=value, txn=txn.id, commit=txn.commit,
                        abort=txn.abort, resolved_by_final=txn.status == "unknown")
            if (tp, offset) in aborted_at:
                copies[value].add((tp, offset))
                continue
            if value in in_this:
                res.add("duplicate", proc=op["proc"], value=value, tp=tp, offset=offset,
                        note="twice in one read")
            in_this.add(value)
            prev = seen_at.setdefault(value, (tp, offset))
            if prev != (tp, offset):
                res.add("duplicate", value=value, txn=txn.id, at=[prev, (tp, offset)],
                        proc=op["proc"])
                seen_at[value] = (tp, offset)
    producer_of = _producers([op for op in polls if op.get("producers")])
    exempt = 0
    for value, at in copies.items():
        kept = seen_at.get(value)
        where = sorted(at | ({kept} if kept else set()))
        if len(where) < 2:
            continue  # aborted data with no second copy: nothing to exempt
        pids = [producer_of(tp, offset) for tp, offset in where]
        if None in pids or len(set(pids)) < len(pids):
            res.add("duplicate", value=value, txn=by_value[value].id, at=where,
                    producers=pids, note="copies in aborted data from one producer "
                    "(or of unknown producer)")
        else:
            exempt += len(at)
    if exempt:
        res.stats["aborted_copies"] = exempt


def _producers(ops: list[dict[str, Any]]) -> Any:
    """``(tp, offset) -> producer id or None`` from the ``producers`` of scans."""
    spans: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for op in ops:
        for tp, rows in op["producers"].items():
            spans[tp].extend((int(a), int(b), int(pid)) for a, b, pid in rows)
    for rows in spans.values():
        rows.sort()

    def producer_of(tp: str, offset: int) -> int | None:
        rows = spans.get(tp, [])
        i = bisect.bisect_right(rows, (offset, 1 << 62, 1 << 62)) - 1
        if i >= 0 and rows[i][0] <= offset <= rows[i][1]:
            return rows[i][2]
        return None

    return producer_of


def _deleted(op: dict[str, Any], loc: tuple[str, int] | None) -> bool:
    """Whether a record at ``loc`` lies below the log start of the read ``op`` (deleted by
    retention or DeleteRecords before the read: not there to be read)."""
    return loc is not None and loc[1] < (op.get("log_start") or {}).get(loc[0], 0)


def _check_log_start(res: Result, polls: list[dict[str, Any]]) -> None:
    """read-below-log-start: a read returned a record its own listing says is deleted."""
    for op in polls:
        # the log start when the read began: records it returned below that were deleted
        # before it could read them (one deleted while it read was there to be read)
        begin = op.get("log_start_begin") or op.get("log_start") or {}
        for tp, offset, value in _reads(op):
            if offset < begin.get(tp, 0):
                res.add("read-below-log-start", proc=op["proc"], mode=op.get("mode"), tp=tp,
                        offset=offset, value=value, log_start=begin[tp])


def _check_offsets(res: Result, polls: list[dict[str, Any]],
                   gone: AbstractSet[int] = frozenset()) -> None:
    """inconsistent-offset: two values at one offset, or a covered offset read empty
    (unless its value is one compaction may remove: ``gone``)."""
    values: dict[tuple[str, str, int], int] = {}
    returned: dict[tuple[str, str], set[int]] = defaultdict(set)
    for op in polls:
        iso = op.get("isolation", "read_committed")
        for tp, offset, value in _reads(op):
            prev = values.setdefault((iso, tp, offset), value)
            if prev != value:
                res.add("inconsistent-offset", isolation=iso, tp=tp, offset=offset,
                        values=[prev, value], proc=op["proc"])
            returned[(iso, tp)].add(offset)
    sorted_offsets = {k: sorted(v) for k, v in returned.items()}
    for op in polls:
        iso = op.get("isolation", "read_committed")
        got: dict[str, set[int]] = defaultdict(set)
        for tp, offset, _ in _reads(op):
            got[tp].add(offset)
        for tp, (lo, hi) in (op.get("ranges") or {}).items():
            offsets = sorted_offsets.get((iso, tp))
            if not offsets or hi <= lo:
                continue
            i = bisect.bisect_left(offsets, lo)
            j = bisect.bisect_left(offsets, hi)
            missing = [o for o in offsets[i:j] if o not in got[tp]
                       and values.get((iso, tp, o)) not in gone
                       and not _deleted(op, (tp, o))]
            if missing:
                res.add("inconsistent-offset", isolation=iso, tp=tp, proc=op["proc"],
                        mode=op.get("mode"), range=[lo, hi], read_empty_here=missing[:10],
                        note="covered offsets returned nothing; another read saw values")


def _check_bounds(res: Result, polls: list[dict[str, Any]]) -> None:
    """read-past-lso / read-past-hw against the snapshot the read used."""
    for op in polls:
        bounds = op.get("bounds")
        if not bounds:
            continue
        rc = op.get("isolation") == "read_committed"
        kind = "read-past-lso" if rc else "read-past-hw"
        for tp, (lo, hi) in (op.get("ranges") or {}).items():
            hw, lso = bounds.get(tp, (0, 0))
            bound = lso if rc else hw
            if hi <= (op.get("log_start") or {}).get(tp, 0):
                continue  # reset to a log start past the bound (DeleteRecords up to the HW)
            if hi > bound and hi > lo:
                res.add(kind, proc=op["proc"], tp=tp, range=[lo, hi], hw=hw, lso=lso,
                        snapshot=op.get("snapshot"))
        for tp, offset, value in _reads(op):
            hw, lso = bounds.get(tp, (0, 0))
            if offset >= (lso if rc else hw):
                res.add(kind, proc=op["proc"], tp=tp, offset=offset, value=value, hw=hw,
                        lso=lso, snapshot=op.get("snapshot"))


def _check_consumers(res: Result, polls: list[dict[str, Any]]) -> None:
    """Per incremental consumer: offsets, snapshots and bounds only move forward."""
    state: dict[str, dict[str, Any]] = {}
    for op in sorted((p for p in polls if p.get("mode") == "poll"),
                     key=lambda p: (p["proc"], p.get("t0", p["t1"]))):
        st = state.setdefault(op["proc"], {"snap": None, "last": {}, "end": {}, "bounds": {}})
        snap = op.get("snapshot")
        if snap is not None and st["snap"] is not None and snap < st["snap"]:
            res.add("nonmonotonic-poll", proc=op["proc"], snapshot=snap, before=st["snap"])
        if snap is not None:
            st["snap"] = snap
        for tp, b in (op.get("bounds") or {}).items():
            prev = st["bounds"].get(tp)
            if prev is not None and (b[0] < prev[0] or b[1] < prev[1]):
                res.add("nonmonotonic-poll", proc=op["proc"], tp=tp, bounds=b, before=prev)
            st["bounds"][tp] = b
        for tp, (lo, hi) in (op.get("ranges") or {}).items():
            end = st["end"].get(tp)
            if end is not None and lo != end:
                res.add("poll-skip", proc=op["proc"], tp=tp, expected_from=end, got_from=lo)
            st["end"][tp] = max(hi, lo)
        for tp, offset, value in _reads(op):
            last = st["last"].get(tp)
            if last is not None and offset <= last:
                res.add("nonmonotonic-poll", proc=op["proc"], tp=tp, offset=offset,
                        after=last, value=value)
            st["last"][tp] = offset


def _check_torn(res: Result, polls: list[dict[str, Any]], txns: dict[str, Txn],
                by_value: dict[int, Txn], where: dict[int, tuple[str, int]],
                gone: AbstractSet[int] = frozenset()) -> None:
    """Atomic visibility: every read_committed read sees a transaction whole or not at all."""
    for op in polls:
        if op.get("isolation") != "read_committed" or op.get("mode") == "final":
            continue
        seen: dict[str, set[int]] = defaultdict(set)
        for _, _, value in _reads(op):
            txn = by_value.get(value)
            if txn is not None:
                seen[txn.id].add(value)
        full = op.get("mode") in FULL_MODES
        bounds = op.get("bounds") or {}
        for tid, vals in seen.items():
            txn = txns[tid]
            if full:
                missing = sorted(v for v in txn.values - vals - gone
                                 if not _deleted(op, where.get(v)))
            elif bounds:  # incremental: the rest must lie below this snapshot's LSO
                missing = [v for v in sorted(txn.values - vals - gone)
                           if (loc := where.get(v)) is None
                           or loc[1] >= bounds.get(loc[0], (0, 0))[1]]
            else:
                missing = []
            if missing:
                # the signature of one known cause: the rest exists, but at or above this
                # read's LSO in its partition (held back by another open transaction)
                hidden = bool(bounds) and all(
                    (loc := where.get(v)) is not None
                    and loc[1] >= bounds.get(loc[0], (0, 0))[1] for v in missing)
                if hidden:
                    res.stats["torn_above_lso"] = res.stats.get("torn_above_lso", 0) + 1
                res.add("torn-transaction", proc=op["proc"], mode=op.get("mode"), txn=tid,
                        status=txn.status, seen=sorted(vals)[:10], missing=missing[:10],
                        snapshot=op.get("snapshot"),
                        cause="held back by the LSO" if hidden else "missing")


def _check_final(res: Result, final: dict[str, Any], txns: dict[str, Txn],
                 gone: AbstractSet[int] = frozenset(),
                 where: dict[int, tuple[str, int]] | None = None) -> None:
    """Lost writes, unknown outcomes resolved, and per-producer order, on the final read
    (values compaction may remove, ``gone``, and records below its log start, deleted by
    retention, are not expected there)."""
    visible: dict[int, tuple[str, int]] = {v: (tp, o) for tp, o, v in _reads(final)}
    where = where or {}
    deleted = 0
    for txn in txns.values():
        retained_away = {v for v in txn.values
                         if v not in visible and _deleted(final, where.get(v))}
        deleted += len(retained_away) if txn.status == "committed" else 0
        vals = txn.values - gone - retained_away
        shown = {v for v in vals if v in visible}
        status = txn.status
        if status == "committed" and shown != vals:
            res.add("lost-write", txn=txn.id, missing=sorted(vals - shown)[:10],
                    of=len(vals))
        elif status == "unknown" and shown and shown != vals:
            res.add("torn-transaction", mode="final", txn=txn.id, status=status,
                    seen=sorted(shown)[:10], missing=sorted(vals - shown)[:10])
    if deleted:
        res.stats["deleted_by_retention"] = deleted
    # one producer's transactions land in order, partition by partition
    order: dict[tuple[str, str], list[tuple[int, int, str]]] = defaultdict(list)
    for txn in txns.values():
        for v in txn.values:
            if v in visible:
                tp, offset = visible[v]
                order[(txn.proc, tp)].append((offset, txn.seq, txn.id))
    for (proc, tp), items in order.items():
        items.sort()
        for (o1, s1, t1), (o2, s2, t2) in itertools.pairwise(items):
            if s2 < s1:
                res.add("nonmonotonic-send", proc=proc, tp=tp, earlier=[t2, o2],
                        later=[t1, o1])
                break


def _check_stream(res: Result, final: dict[str, Any], out: dict[str, Any]) -> None:
    """Exactly-once consume-transform-produce: output vs. the final committed input."""
    source = {(tp, offset): value for tp, offset, value in _reads(final)}
    seen: dict[tuple[str, int], tuple[str, int]] = {}
    last: dict[tuple[str, str], int] = {}
    records = 0
    for out_tp, out_offset, text in _reads(out):
        records += 1
        at = (out_tp, out_offset)
        try:
            tag, tp, offset_s, value_s = str(text).split(":")
            src, value = (tp, int(offset_s)), int(value_s)
            assert tag == "out"
        except (ValueError, AssertionError):
            res.add("stream-phantom", at=at, record=text, note="not an output record")
            continue
        if source.get(src) != value:
            res.add("stream-phantom", at=at, source=src, value=value,
                    committed_value=source.get(src))
        if src in seen:
            res.add("stream-duplicate", source=src, value=value, at=[seen[src], at])
        seen.setdefault(src, at)
        prev = last.get((out_tp, src[0]))
        if prev is not None and src[1] <= prev:
            res.add("stream-order", at=at, source=src, after=[src[0], prev])
        last[(out_tp, src[0])] = src[1]
    for src, value in source.items():
        if src not in seen:
            res.add("stream-lost", source=src, value=value)
    res.stats["stream_records"] = records
