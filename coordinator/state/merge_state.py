"""What the coordinator's log says about merged objects, one partition at a time.

Merging (``log_merger``) is planned in the coordinator's log, so a restarted coordinator
finishes a merge with the same bytes, and what may be deleted is known from the log alone:

- ``merge`` (planned): the inputs (small objects and/or merged objects, each with its size
  and CRC32C, read before the record was written) and the output (level, range, size) — a
  merge is deterministic in its inputs, so this fixes the bytes;
- ``merged``: the output and the next manifest are durable; the manifest's objects replace
  the inputs, the merged end M moves, and the replaced objects become garbage, deletable
  once the grace period (``file.delete.delay.ms``) has passed;
- ``cleaned``: the first ``n`` garbage entries are gone.

Pure and synchronous, like ``state``: ``apply_*`` are called by ``CoordinatorState.apply``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.manifest import MergedObject, PartitionManifest, new_manifest
from txnlog.log_format.stable import aborted_entries

SMALL = -1  # the "level" of a small object in a plan's inputs


@dataclass(frozen=True)
class MergeInput:
    """One input of a planned merge: a small object (level SMALL) or a merged object."""

    level: int
    base_offset: int
    end_offset: int
    size: int
    crc: int  # CRC32C of the object's bytes, checked when a restart reads them again
    has_txnindex: bool
    # a run in a shared object: (object path, byte position); its bytes are ``size`` from
    # there. None: the small object ``<topic>-<p>/<base>.log``
    location: tuple[str, int] | None = None
    # a run of abort markers in a shared object: the .txnindex entries the tail published
    # with it (its .txnindex is made of them; there is no object of the partition's own)
    aborted: tuple[tuple[int, int, int, int], ...] = ()

    def to_json(self) -> list[Any]:
        row: list[Any] = [self.level, self.base_offset, self.end_offset, self.size, self.crc,
                          int(self.has_txnindex)]
        if self.location is not None:
            row += list(self.location)
            if self.aborted:
                row.append([list(a) for a in self.aborted])
        return row

    @classmethod
    def from_json(cls, row: list[Any]) -> MergeInput:
        loc = (str(row[6]), int(row[7])) if len(row) > 6 else None
        return cls(int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4]),
                   bool(row[5]), loc, aborted_entries(row[8]) if len(row) > 8 else ())

    def paths(self, topic: str, partition: int) -> list[str]:
        """Every object of the partition it stands for (log and indexes), as garbage once
        merged away (a shared object is the tails', ``shared_state``)."""
        if self.level == SMALL:
            # a run in a shared object: only its .txnindex (an aborted transaction's
            # markers) is the partition's
            out = [] if self.location is not None else [
                layout.segment_path(topic, partition, self.base_offset)]
            if self.has_txnindex and not self.aborted:
                out.append(layout.segment_path(topic, partition, self.base_offset,
                                               layout.TXNINDEX_SUFFIX))
            return out
        return self.as_merged().paths(topic, partition)

    def as_merged(self) -> MergedObject:
        return MergedObject(self.level, self.base_offset, self.end_offset, self.size,
                            self.has_txnindex)


@dataclass(frozen=True)
class MergePlan:
    """A planned merge, as its ``merge`` record carries it."""

    topic: str
    partition: int
    seq: int  # the manifest seq it leads to
    inputs: tuple[MergeInput, ...]
    output: MergedObject
    open_since_ms: int  # of the manifest it leads to
    grace_ms: int
    ms: int  # when it was planned: the manifest's written_ms

    def to_record(self) -> dict[str, Any]:
        return {"id": layout.partition_dir(self.topic, self.partition), "topic": self.topic,
                "p": self.partition, "seq": self.seq,
                "inputs": [i.to_json() for i in self.inputs],
                "output": self.output.to_json(), "open_since_ms": self.open_since_ms,
                "grace_ms": self.grace_ms, "ms": self.ms}

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> MergePlan:
        return cls(d["topic"], int(d["p"]), int(d["seq"]),
                   tuple(MergeInput.from_json(r) for r in d["inputs"]),
                   MergedObject.from_json(d["output"]), int(d["open_since_ms"]),
                   int(d["grace_ms"]), int(d["ms"]))


GARBAGE_COALESCE_MS = 1_000  # merges whose garbage falls due within this share one row


@dataclass
class Garbage:
    """What merges replaced, deletable at ``due_ms``: every small object (and its txnindex)
    below ``small_below``, the manifests ``[manifest_lo, manifest_hi)``, and these merged
    objects. Ranges, not names: a partition's state stays small however fast it commits
    (at most one row per GARBAGE_COALESCE_MS of grace period), and deleting everything below
    ``small_below`` also takes whatever a zombie wrote into a freed name."""

    due_ms: int
    small_below: int
    manifest_lo: int
    manifest_hi: int
    merged: list[MergedObject] = field(default_factory=list)

    def to_json(self) -> list[Any]:
        return [self.due_ms, self.small_below, self.manifest_lo, self.manifest_hi,
                [o.to_json() for o in self.merged]]

    @classmethod
    def from_json(cls, row: list[Any]) -> Garbage:
        return cls(int(row[0]), int(row[1]), int(row[2]), int(row[3]),
                   [MergedObject.from_json(o) for o in row[4]])


@dataclass
class PartitionMerges:
    """One partition's merged objects (what its newest manifest names), the merge under
    way, and the garbage waiting for its grace period."""

    seq: int = 0
    start_offset: int = 0
    objects: list[MergedObject] = field(default_factory=list)
    open_since_ms: int = 0
    grace_ms: int = 0
    planned: MergePlan | None = None
    garbage: list[Garbage] = field(default_factory=list)
    # the log start offset the newest manifest carries (retention_state, log_retention)
    log_start: int = 0

    @property
    def merged_end(self) -> int:
        """M: below it readers use merged objects only."""
        return self.objects[-1].end_offset if self.objects else self.start_offset

    def open_runs(self) -> list[MergedObject]:
        """The runs of the open segment (levels >= 1), ascending."""
        return [o for o in self.objects if o.level > 0]

    def manifest_after(self, plan: MergePlan) -> PartitionManifest:
        """The manifest ``plan`` leads to: its inputs replaced by its output."""
        replaced = {(i.level, i.base_offset) for i in plan.inputs if i.level != SMALL}
        objects = [o for o in self.objects if (o.level, o.base_offset) not in replaced]
        objects.append(plan.output)
        objects.sort(key=lambda o: o.base_offset)
        start = objects[0].base_offset if not self.objects else self.start_offset
        return new_manifest(plan.topic, plan.partition, plan.seq, objects, start,
                            plan.open_since_ms, plan.grace_ms, plan.ms, self.log_start)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "start": self.start_offset,
                "objects": [o.to_json() for o in self.objects],
                "open_since_ms": self.open_since_ms, "grace_ms": self.grace_ms,
                "planned": self.planned.to_record() if self.planned is not None else None,
                "garbage": [g.to_json() for g in self.garbage],
                **({"log_start": self.log_start} if self.log_start else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionMerges:
        return cls(int(d["seq"]), int(d["start"]),
                   [MergedObject.from_json(r) for r in d["objects"]],
                   int(d["open_since_ms"]), int(d["grace_ms"]),
                   MergePlan.from_record(d["planned"]) if d.get("planned") else None,
                   [Garbage.from_json(g) for g in d["garbage"]],
                   int(d.get("log_start", 0)))


def apply_merge(merges: dict[str, PartitionMerges], d: dict[str, Any]) -> None:
    """A merge was planned (its inputs read and checked, its output computed)."""
    pm = merges.setdefault(d["id"], PartitionMerges())
    pm.planned = MergePlan.from_record(d)


def apply_merged(merges: dict[str, PartitionMerges], d: dict[str, Any]) -> None:
    """The planned merge's output and manifest are durable: readers use them from now on;
    what they replaced (and the previous manifest) is garbage after the grace period —
    the longer of this manifest's and the previous one's, since readers of either may be
    in flight."""
    pm = merges[d["id"]]
    plan = pm.planned
    if plan is None and pm.seq < int(d["seq"]) and pm.start_offset > 0 and not pm.objects:
        # a merge that was in flight when DeleteTopics reset the partition (its plan
        # dropped, its next manifest starting at the old log end): nothing to apply, and
        # the delete's sweep removes what it wrote (a log written before the merger checked
        # for this may still hold such a record)
        return
    if plan is None or plan.seq != int(d["seq"]):
        raise ValueError(f"merged record for {d['id']} #{d['seq']} without its plan")
    man = pm.manifest_after(plan)
    due = int(d["ms"]) + max(plan.grace_ms, pm.grace_ms)
    small = [i.end_offset for i in plan.inputs if i.level == SMALL]
    # the manifest's own rows (they know which runs were written without indexes)
    current = {(o.level, o.base_offset): o for o in pm.objects}
    merged = [current.get((i.level, i.base_offset)) or i.as_merged()
              for i in plan.inputs if i.level != SMALL]
    retire(pm, due, small, merged)
    pm.seq, pm.start_offset, pm.objects = plan.seq, man.start_offset, list(man.objects)
    pm.open_since_ms, pm.grace_ms, pm.planned = plan.open_since_ms, plan.grace_ms, None


def retire(pm: PartitionMerges, due: int, small_ends: list[int],
           merged: list[MergedObject]) -> None:
    """Make what a new manifest replaced garbage due at ``due``: the small objects below
    the largest of ``small_ends``, the ``merged`` objects, and the manifest now current
    (call before ``pm.seq`` moves). Merges and compactions (``clean_state``) both retire."""
    last = pm.garbage[-1] if pm.garbage else None
    if last is not None and due - last.due_ms < GARBAGE_COALESCE_MS:
        last.due_ms = max(last.due_ms, due)
        last.small_below = max([last.small_below, *small_ends])
        last.manifest_hi = max(last.manifest_hi, pm.seq + 1 if pm.seq else 0)
        last.merged.extend(merged)
    else:
        below = max([last.small_below if last else 0, *small_ends])
        lo = last.manifest_hi if last else (pm.seq if pm.seq else 0)
        pm.garbage.append(Garbage(due, below, lo, pm.seq + 1 if pm.seq else lo, merged))


def apply_cleaned(merges: dict[str, PartitionMerges], d: dict[str, Any]) -> None:
    """The first ``n`` garbage rows of a partition are deleted."""
    pm = merges[d["id"]]
    del pm.garbage[:int(d["n"])]
