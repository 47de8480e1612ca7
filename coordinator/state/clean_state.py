"""What the coordinator's log says about compaction, one partition at a time.

Compacting a partition (``log_cleaner``) is planned in the coordinator's log like a merge,
so a restarted coordinator finishes it with the same bytes:

- ``compact`` (planned): the closed segments cleaned (each with its CRC32C, read before the
  record was written), everything the cleaning depends on besides their bytes (the first
  dirty offset, the clock it used for delete horizons, ``delete.retention.ms``,
  ``segment.bytes``, the aborted transactions whose markers lie beyond them, the producers
  still active) and the cleaned segments it gives (ranges, sizes, CRC32C): a cleaning is
  deterministic in these, so this fixes the bytes;
- ``compacted``: the cleaned segments and the next manifest are durable; they replace the
  segments cleaned, which become garbage (deleted after ``file.delete.delay.ms`` by the
  merger's cleanup, as merged-away objects are), and the first dirty offset moves.

The manifest sequence is shared with merging: a compaction takes the next ``seq`` of the
partition's ``PartitionMerges``, and the two never run at once for one partition (the
cleaner runs inside the merger's loop, and a merge is not planned while a compaction is).

Pure and synchronous, like ``merge_state``: ``apply_*`` are called by
``CoordinatorState.apply``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.codec.indexes import AbortedTxn
from txnlog.log_format.manifest import MergedObject, PartitionManifest, new_manifest

from .merge_state import PartitionMerges, retire


@dataclass(frozen=True)
class CleanPlan:
    """A planned compaction, as its ``compact`` record carries it."""

    topic: str
    partition: int
    seq: int  # the manifest seq it leads to (and the cleaned segments' gen)
    inputs: tuple[MergedObject, ...]  # the closed segments cleaned, from the log start
    input_crcs: tuple[int, ...]
    outputs: tuple[MergedObject, ...]
    output_crcs: tuple[int, ...]
    first_dirty: int
    now_ms: int  # the clock of the delete horizons
    delete_retention_ms: int
    segment_bytes: int
    aborted_beyond: tuple[AbortedTxn, ...]
    producers: dict[int, tuple[int, int]]  # pid -> (last data offset or -1, epoch)
    grace_ms: int
    ms: int

    @property
    def upper(self) -> int:
        """The first offset not cleaned: the next first dirty offset."""
        return self.inputs[-1].end_offset

    def to_record(self) -> dict[str, Any]:
        return {"id": layout.partition_dir(self.topic, self.partition), "topic": self.topic,
                "p": self.partition, "seq": self.seq,
                "inputs": [o.to_json() for o in self.inputs],
                "input_crcs": list(self.input_crcs),
                "outputs": [o.to_json() for o in self.outputs],
                "output_crcs": list(self.output_crcs), "first_dirty": self.first_dirty,
                "now_ms": self.now_ms, "delete_retention_ms": self.delete_retention_ms,
                "segment_bytes": self.segment_bytes,
                "aborted_beyond": [[t.producer_id, t.first_offset, t.last_offset,
                                    t.last_stable_offset] for t in self.aborted_beyond],
                "producers": [[pid, last, epoch]
                              for pid, (last, epoch) in sorted(self.producers.items())],
                "grace_ms": self.grace_ms, "ms": self.ms}

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> CleanPlan:
        return cls(str(d["topic"]), int(d["p"]), int(d["seq"]),
                   tuple(MergedObject.from_json(r) for r in d["inputs"]),
                   tuple(int(c) for c in d["input_crcs"]),
                   tuple(MergedObject.from_json(r) for r in d["outputs"]),
                   tuple(int(c) for c in d["output_crcs"]), int(d["first_dirty"]),
                   int(d["now_ms"]), int(d["delete_retention_ms"]), int(d["segment_bytes"]),
                   tuple(AbortedTxn(*(int(v) for v in r)) for r in d["aborted_beyond"]),
                   {int(r[0]): (int(r[1]), int(r[2])) for r in d["producers"]},
                   int(d["grace_ms"]), int(d["ms"]))

    def manifest(self, pm: PartitionMerges) -> PartitionManifest:
        """The manifest it leads to: the segments cleaned replaced by the cleaned ones."""
        cleaned = set(self.inputs)
        objects = [o for o in pm.objects if o not in cleaned] + list(self.outputs)
        objects.sort(key=lambda o: o.base_offset)
        return new_manifest(self.topic, self.partition, self.seq, objects, pm.start_offset,
                            pm.open_since_ms, self.grace_ms, self.ms, pm.log_start)


@dataclass
class PartitionCleaning:
    """One partition's compaction state: Kafka's cleaner checkpoint (the first dirty
    offset: below it the log was cleaned), the compaction under way, and how many ran."""

    first_dirty: int = 0
    planned: CleanPlan | None = None
    cleanings: int = 0
    last_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"first_dirty": self.first_dirty, "cleanings": self.cleanings,
                "last_ms": self.last_ms,
                "planned": self.planned.to_record() if self.planned is not None else None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionCleaning:
        return cls(int(d["first_dirty"]),
                   CleanPlan.from_record(d["planned"]) if d.get("planned") else None,
                   int(d.get("cleanings", 0)), int(d.get("last_ms", 0)))


def apply_compact(cleanings: dict[str, PartitionCleaning], d: dict[str, Any]) -> None:
    """A compaction was planned (its inputs read and checked, its outputs computed)."""
    pc = cleanings.setdefault(d["id"], PartitionCleaning())
    pc.planned = CleanPlan.from_record(d)


def apply_compacted(cleanings: dict[str, PartitionCleaning],
                    merges: dict[str, PartitionMerges], d: dict[str, Any]) -> None:
    """The planned compaction's segments and manifest are durable: readers use them; the
    segments cleaned (and the previous manifest) are garbage after the grace period."""
    pc = cleanings.get(d["id"])
    plan = pc.planned if pc is not None else None
    if pc is None or plan is None or plan.seq != int(d["seq"]):
        raise ValueError(f"compacted record for {d['id']} #{d['seq']} without its plan")
    pm = merges[d["id"]]
    if pm.seq != plan.seq - 1:
        raise ValueError(f"compaction #{plan.seq} of {d['id']} follows manifest #{pm.seq}")
    man = plan.manifest(pm)
    retire(pm, int(d["ms"]) + max(plan.grace_ms, pm.grace_ms), [], list(plan.inputs))
    pm.seq, pm.objects, pm.grace_ms = plan.seq, list(man.objects), plan.grace_ms
    pc.first_dirty, pc.planned = plan.upper, None
    pc.cleanings += 1
    pc.last_ms = int(d["ms"])
