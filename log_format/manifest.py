"""Where a partition's merged objects are: its manifest.

Below the merged end ``M`` a partition is read from merged objects only — closed Kafka
segments (``<t>-<p>/segments/``) and the runs of its open segment (``<t>-<p>/runs/<n>/``);
at or above ``M`` from the small objects commits leave in ``<t>-<p>/``. The manifest names
every merged object readers may use, in offset order, contiguous from the log start offset
to ``M``. The coordinator writes a new one (put-if-absent, never rewritten) after each
merge, once the merged object is durable; names sort newest first
(``layout.manifest_name``), so a reader finds the newest with one LIST of at most one key
and one GET, whatever the history.

Readers never look at small objects below ``M``: after the grace period the coordinator
deletes them, which frees their names for put-if-absent again, and a zombie's late write
there must stay invisible for good (the trap of the pruned-offset takeover). Merged objects
hold the same bytes as the small objects they replaced, so a reader may switch from one to
the other at any offset; a merged object deleted under a reader (superseded by a bigger
one, after the grace period) makes it read the newest manifest again. Compacted segments
(``gen`` > 0, topics with ``cleanup.policy=compact``) hold a subset of what they replaced,
each record at its original offset: a reader switching to one at its cursor reads on from
the same offset and skips only superseded records, as a Kafka consumer of a compacted
topic does.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import TxnlogError
from .layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_MERGE_LEVEL,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    cleaned_dir,
    manifest_dir,
    manifest_path,
    merged_dir,
    parse_manifest_name,
    segment_name,
)
from .storage import Storage

if TYPE_CHECKING:
    from .segments.segment_merge import MergedSegment

FORMAT = 1
READ_ATTEMPTS = 5
# Kafka's file.delete.delay.ms default: how long merged-away objects stay for readers in
# flight. txnlog refuses less than MIN_GRACE_MS: a reader trusts a listing of small objects
# for half the grace (half of MIN_GRACE_MS before a partition has a manifest saying more).
DEFAULT_GRACE_MS = 60_000
MIN_GRACE_MS = 2_000


class ManifestError(TxnlogError, ValueError):
    """A manifest that cannot be parsed or is inconsistent (gaps, overlaps, wrong range)."""


# A run of the open segment smaller than this is written without ``.index``/``.timeindex``
# (the coordinator's ``merge_policy.unindexed_run`` says why); a reader reads one whole
UNINDEXED_RUN_MAX_BYTES = 512 * 1024


@dataclass(frozen=True)
class MergedObject:
    """One merged object: offsets ``[base_offset, end_offset)`` at ``level`` (0: a closed
    segment; >= 1: a run of the open segment), with its indexes beside it."""

    level: int
    base_offset: int
    end_offset: int
    size: int
    has_txnindex: bool = False
    max_timestamp: int = -1
    # > 0: a compacted segment, written by the cleaning that led to manifest
    # ``gen`` under ``<t>-<p>/cleaned/<gen>/``: it holds fewer records than what it
    # replaced, under a new name (put-if-absent never rewrites a name)
    gen: int = 0
    # False: a small run of the open segment written without ``.index``/``.timeindex``
    # (``log_merger.unindexed_run``): readers scan it from its start, as they do a small
    # object; the merge that carries it into a bigger run or a segment indexes that
    indexed: bool = True

    def path(self, topic: str, partition: int, suffix: str = LOG_SUFFIX) -> str:
        name = segment_name(self.base_offset, suffix)
        if self.gen:
            return f"{cleaned_dir(topic, partition, self.gen)}/{name}"
        return f"{merged_dir(topic, partition, self.level)}/{name}"

    def paths(self, topic: str, partition: int) -> list[str]:
        """Every object of it: the log, its indexes, its txnindex if any."""
        sfx = [LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX] if self.indexed else [LOG_SUFFIX]
        if self.has_txnindex:
            sfx.append(TXNINDEX_SUFFIX)
        return [self.path(topic, partition, s) for s in sfx]

    def files(self, topic: str, partition: int, seg: MergedSegment) -> list[tuple[str, bytes]]:
        """(key, bytes) of every object a built segment writes under this name: the log,
        its indexes, and its txnindex if it has one (none: no object, as Kafka leaves an
        empty one)."""
        out = [(self.path(topic, partition), seg.log)]
        if self.indexed:
            out += [(self.path(topic, partition, INDEX_SUFFIX), seg.index),
                    (self.path(topic, partition, TIMEINDEX_SUFFIX), seg.timeindex)]
        if seg.txnindex is not None:
            out.append((self.path(topic, partition, TXNINDEX_SUFFIX), seg.txnindex))
        return out

    def to_json(self) -> list[int]:
        row = [self.level, self.base_offset, self.end_offset, self.size,
               int(self.has_txnindex), self.max_timestamp]
        if not self.indexed:  # an 8th field: a reader that predates it refuses the row
            return [*row, self.gen, 0]
        return [*row, self.gen] if self.gen else row  # uncompacted rows keep their bytes

    @classmethod
    def from_json(cls, row: Any) -> MergedObject:
        if len(row) not in (6, 7, 8):
            raise ValueError(f"bad merged object {row!r}")
        level, base, end, size, txn, max_ts = (int(v) for v in row[:6])
        gen = int(row[6]) if len(row) >= 7 else 0
        indexed = len(row) < 8 or int(row[7]) != 0
        if not 0 <= level <= MAX_MERGE_LEVEL or not 0 <= base <= end or size < 0 or gen < 0:
            raise ValueError(f"bad merged object {row!r}")
        if not indexed and (level == 0 or gen):
            raise ValueError(f"bad merged object {row!r}: a segment without indexes")
        return cls(level, base, end, size, bool(txn), max_ts, gen, indexed)


@dataclass(frozen=True)
class PartitionManifest:
    """A partition's merged objects as of manifest ``seq``: contiguous over
    ``[start_offset, end_offset)``; ``open_since_ms`` is when the open segment's first run
    was made (what ``segment.ms`` counts from; 0: no open segment)."""

    topic: str
    partition: int
    seq: int
    start_offset: int
    end_offset: int
    objects: tuple[MergedObject, ...]
    open_since_ms: int = 0
    written_ms: int = 0
    grace_ms: int = DEFAULT_GRACE_MS  # how long objects it replaced stay for readers
    # Kafka's log start offset: the first offset readers may read. Retention and
    # DeleteRecords move it; it may lie inside the first object, or past the merged end
    # (records deleted that are not merged yet). -1: the manifest's start_offset.
    log_start_offset: int = -1

    def __post_init__(self) -> None:
        if self.log_start_offset < 0:
            object.__setattr__(self, "log_start_offset", self.start_offset)
        if self.log_start_offset < self.start_offset:
            raise ManifestError(f"manifest {self.topic}-{self.partition} #{self.seq}: log "
                                f"start offset {self.log_start_offset} is below its first "
                                f"object's {self.start_offset}")
        expect = self.start_offset
        for obj in self.objects:
            if obj.base_offset != expect:
                raise ManifestError(
                    f"manifest {self.topic}-{self.partition} #{self.seq}: object at "
                    f"{obj.base_offset} does not follow the one ending at {expect}")
            expect = obj.end_offset
        if expect != self.end_offset:
            raise ManifestError(f"manifest {self.topic}-{self.partition} #{self.seq}: objects "
                                f"end at {expect}, not at its merged end {self.end_offset}")

    @property
    def path(self) -> str:
        return manifest_path(self.topic, self.partition, self.seq)

    def to_json(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "topic": self.topic, "partition": self.partition,
            "seq": self.seq, "start": self.start_offset, "end": self.end_offset,
            "open_since_ms": self.open_since_ms, "written_ms": self.written_ms,
            "grace_ms": self.grace_ms,
            "objects": [o.to_json() for o in self.objects],
            # only when moved past the first object, so older manifests keep their bytes
            **({"log_start": self.log_start_offset}
               if self.log_start_offset != self.start_offset else {}),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str = "manifest") -> PartitionManifest:
        try:
            obj: Any = json.loads(data)
            if obj.get("format") != FORMAT:
                raise ValueError(f"unknown format {obj.get('format')!r}")
            return cls(str(obj["topic"]), int(obj["partition"]), int(obj["seq"]),
                       int(obj["start"]), int(obj["end"]),
                       tuple(MergedObject.from_json(r) for r in obj["objects"]),
                       int(obj.get("open_since_ms", 0)), int(obj.get("written_ms", 0)),
                       int(obj.get("grace_ms", DEFAULT_GRACE_MS)),
                       int(obj.get("log_start", -1)))
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"{source}: not a valid manifest: {exc}") from exc


def new_manifest(topic: str, partition: int, seq: int, objects: list[MergedObject],
                 start_offset: int, open_since_ms: int, grace_ms: int,
                 now_ms: int | None = None, log_start_offset: int = -1) -> PartitionManifest:
    end = objects[-1].end_offset if objects else start_offset
    return PartitionManifest(topic, partition, seq, start_offset, end, tuple(objects),
                             open_since_ms,
                             int(time.time() * 1000) if now_ms is None else now_ms, grace_ms,
                             max(log_start_offset, start_offset))


def read_latest_manifest(storage: Storage, topic: str, partition: int
                         ) -> PartitionManifest | None:
    """The newest manifest of a partition (None: nothing merged yet): one LIST of at most
    one key and one GET. A manifest deleted between the two makes it list again."""
    directory = manifest_dir(topic, partition)
    for _ in range(READ_ATTEMPTS):
        found = storage.list(directory, limit=1)
        if not found:
            return None
        seq = parse_manifest_name(found[0].name)
        if seq is None:
            raise ManifestError(f"{storage.url}/{directory}/{found[0].name}: not a manifest "
                                "name")
        path = manifest_path(topic, partition, seq)
        try:
            data = storage.get(path)
        except FileNotFoundError:
            continue
        man = PartitionManifest.from_json(data, f"{storage.url}/{path}")
        if (man.topic, man.partition, man.seq) != (topic, partition, seq):
            raise ManifestError(f"{storage.url}/{path}: holds the manifest of "
                                f"{man.topic}-{man.partition} #{man.seq}")
        return man
    raise ManifestError(f"{storage.url}/{directory}: the newest manifest vanished "
                        f"{READ_ATTEMPTS} times in a row")
