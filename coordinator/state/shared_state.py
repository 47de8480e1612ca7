"""What the log says about shared objects: each partition's tail, and what may be deleted.

A flush writes one shared object for every partition it touches
(``log_format.segments.shared_object``); its confirm names, per partition, the run's offsets
and where it lies (object, byte position, size). That run is then part of the partition's
*tail*: the confirmed runs above its merged end M, which the stable heads publish so that a
reader finds them without listing anything (``log_format.stable.TailEntry``).

- A confirm adds a run to its partition's tail (``add``).
- A merge that moved M past runs drops them (``drop_below``); once no partition's tail names
  a shared object any more it is garbage, due after the same grace period as the small
  objects that merge replaced (readers in flight may still hold a head naming it).
- A topic's deletion drops its partitions' tails (``drop_partition``).
- ``shared_cleaned`` records what was deleted.

How many runs name each object is derived (``refs``), never logged: replay and snapshots
rebuild it from the tails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from txnlog.log_format.stable import TailEntry, aborted_entries


def _row(e: TailEntry) -> list[Any]:
    """A run as the snapshot stores it: five fields, a sixth only for aborted transactions
    (so snapshots of roots without them keep their bytes)."""
    row: list[Any] = [e.base, e.end, e.path, e.position, e.size]
    return [*row, [list(a) for a in e.aborted]] if e.aborted else row


@dataclass
class SharedObjects:
    """The tails of every partition and the shared objects waiting to be deleted."""

    tails: dict[str, list[TailEntry]] = field(default_factory=dict)  # "t-p" -> ascending
    refs: dict[str, int] = field(default_factory=dict)  # path -> runs naming it
    garbage: dict[str, int] = field(default_factory=dict)  # path -> due (epoch ms)

    def tail(self, key: str) -> list[TailEntry]:
        return self.tails.get(key, [])

    def add(self, key: str, entry: TailEntry) -> None:
        """A confirmed run (a retried confirm adds nothing: the same base is there)."""
        tail = self.tails.setdefault(key, [])
        if any(e.base == entry.base for e in tail):
            return
        tail.append(entry)
        if len(tail) > 1 and tail[-2].base > entry.base:
            tail.sort()
        self.refs[entry.path] = self.refs.get(entry.path, 0) + 1
        self.garbage.pop(entry.path, None)

    def _release(self, entries: list[TailEntry], due_ms: int) -> None:
        for e in entries:
            n = self.refs.get(e.path, 0) - 1
            if n > 0:
                self.refs[e.path] = n
            else:
                self.refs.pop(e.path, None)
                self.garbage[e.path] = max(due_ms, self.garbage.get(e.path, 0))

    def drop_below(self, key: str, offset: int, due_ms: int) -> None:
        """Runs starting below ``offset`` were merged: readers use segments there now."""
        tail = self.tails.get(key)
        if not tail:
            return
        gone = [e for e in tail if e.base < offset]
        if not gone:
            return
        rest = [e for e in tail if e.base >= offset]
        if rest:
            self.tails[key] = rest
        else:
            del self.tails[key]
        self._release(gone, due_ms)

    def drop_partition(self, key: str, due_ms: int) -> None:
        """The partition's topic was deleted: its runs are no one's any more."""
        gone = self.tails.pop(key, None)
        if gone:
            self._release(gone, due_ms)

    def due(self, now_ms: int) -> list[str]:
        """Shared objects no tail names whose grace period is over."""
        return sorted(p for p, due in self.garbage.items() if due <= now_ms)

    def cleaned(self, paths: list[str]) -> None:
        for p in paths:
            if self.refs.get(p, 0) == 0:
                self.garbage.pop(p, None)

    def to_json(self) -> dict[str, Any]:
        """The snapshot's part (only when there is something, so older snapshots' bytes
        stay as they were)."""
        out: dict[str, Any] = {}
        if self.tails:
            out["tails"] = {k: [_row(e) for e in v] for k, v in self.tails.items()}
        if self.garbage:
            out["shared_garbage"] = self.garbage
        return out

    @classmethod
    def from_json(cls, s: dict[str, Any]) -> SharedObjects:
        out = cls()
        for k, rows in s.get("tails", {}).items():
            for r in rows:
                out.add(k, TailEntry(int(r[0]), int(r[1]), str(r[2]), int(r[3]), int(r[4]),
                                     aborted_entries(r[5]) if len(r) > 5 else ()))
        out.garbage.update({str(p): int(d) for p, d in s.get("shared_garbage", {}).items()})
        return out
