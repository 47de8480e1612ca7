"""What the checker allows on compacted topics: only superseded values vanish.

A compacted topic keeps the latest record per key, so a committed value may disappear
from later reads once a later committed record of the same key in the same partition
exists — and nothing else may. "Later" must be sound without knowing every offset:

- both records were read somewhere, and the superseding one sits at a larger offset;
- or they belong to one transaction and the superseding one was sent after it (one
  producer's sends to a partition keep their order);
- or the superseding record was sent after the superseded one's transaction was
  acknowledged committed (its offset was reserved after the other's data was written).

Superseding records are those of committed transactions, and of unknown ones the final
read shows (they did commit). Aborted data is removed by the cleaner too: a
read_uncommitted read may stop showing it (``gone_uncommitted``); read_committed never
showed it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .history import tp_key


def removable(ops: list[dict[str, Any]], txns: dict[str, Any],
              where: dict[int, tuple[str, int]], final: dict[str, Any] | None
              ) -> tuple[set[int], set[int]]:
    """(values superseded, values of transactions that did not commit)."""
    visible = set()
    if final is not None:
        for recs in (final.get("reads") or {}).values():
            visible.update(v for _, v in recs)
    committed_at: dict[str, float] = {}
    for op in ops:
        if op["f"] == "commit" and op.get("outcome") == "ok":
            committed_at.setdefault(op["txn"], float(op.get("t1", op.get("t0", 0.0))))
    landed = {tid for tid, t in txns.items()
              if t.status == "committed" or (t.status == "unknown" and t.values & visible)}
    groups: dict[tuple[str, str], list[tuple[str, int, float, int]]] = defaultdict(list)
    for tid, t in txns.items():
        for i, s in enumerate(t.sends):
            if s.get("key") is None:
                continue
            groups[(tp_key(s["topic"], s["partition"]), s["key"])].append(
                (tid, s["value"], float(s.get("t0", s.get("t1", 0.0))), i))
    superseded: set[int] = set()
    for recs in groups.values():
        winners = [r for r in recs if r[0] in landed]
        if not winners:
            continue
        top_offset = max((where[v][1] for _, v, _, _ in winners if v in where), default=-1)
        last_send = max(t0 for _, _, t0, _ in winners)
        last_in_txn: dict[str, int] = defaultdict(lambda: -1)
        for tid, _, _, i in winners:
            last_in_txn[tid] = max(last_in_txn[tid], i)
        for tid, value, _, i in recs:
            later_offset = value in where and where[value][1] < top_offset
            later_in_txn = tid in landed and i < last_in_txn[tid]
            sent_after_commit = tid in committed_at and committed_at[tid] < last_send
            if later_offset or later_in_txn or sent_after_commit:
                superseded.add(value)
    uncommitted = {v for tid, t in txns.items() if tid not in landed for v in t.values}
    return superseded, uncommitted
