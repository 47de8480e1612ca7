"""Which objects to merge next: a size-tiered policy under Kafka's segment rules.

Commits leave small objects (one per partition per commit, plus markers). A Kafka segment
closes at ``segment.bytes`` or after ``segment.ms``; building it by rewriting it at every
merge would cost O(segment / commit) writes per byte, so the open segment is kept as a few
*runs*, merged the way a binary counter carries (size-tiered compaction):

- ``min_objects`` small objects below the published LSO become one run of level 1;
- ``fanout`` runs of one level become one run of the next level;
- the open segment closes — all its runs (and the small objects that still fit) become one
  Kafka segment (level 0) — when the next small object would take it past
  ``segment.bytes``, when its first record is older than ``roll_ms`` (Kafka's
  ``LogConfig.maxSegmentMs``: ``segment.ms``, or ``max.compaction.lag.ms`` when smaller on
  a compacted topic, KIP-354), or when its offsets would no longer fit the 32-bit relative
  offsets of Kafka's indexes. Only small objects with a successor are listed, so what
  closes always had a later append: what Kafka's roll at that append closes;
- a partition idle for ``idle_ms`` has its small objects (at least two) made a run
  whatever their number: readers of an idle partition list and read one object, not many.

A byte is written once as a small object, about once per level it climbs
(``log_fanout(segment.bytes / object size)`` levels), and once more into the closed segment;
a partition holds at most ``fanout - 1`` runs per level plus fewer than ``min_objects``
small objects above its closed segments (and, for the grace period, what was merged away).

Pure: the merger lists, reads and writes; this only decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from txnlog.log_format.manifest import UNINDEXED_RUN_MAX_BYTES, MergedObject

# Kafka's defaults (LogConfig): segment.bytes 1 GiB, segment.ms 7 days.
DEFAULT_SEGMENT_BYTES = 1 << 30
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000
MAX_RELATIVE_OFFSET = 0x7FFFFFFF  # what a .index entry can hold (int32)
MAX_IO_PARALLEL = 32  # a merge's requests in flight at once when merging has fallen behind


def unindexed_run(level: int, size: int) -> bool:
    """Whether a merge's output at ``level`` of ``size`` bytes goes without indexes.

    Over many partitions each partition's share of the writes is small, so its level-1
    runs are too (~150 kB at 0.5 MB/s over 64 partitions), and a run written with its
    ``.index`` and ``.timeindex`` beside it and a manifest was 4 objects, three quarters
    of all the root gained (bench/write_cost.py). An index earns its PUT where it saves a
    reader bytes: in a run this small a reader reads from the run's start (one GET of at
    most this much, as it reads a small object), and finds a timestamp by scanning the
    batch headers. Kafka's own segments keep theirs: a closed segment (level 0) is always
    indexed, and so is any run this size or bigger (``index.interval.bytes`` is 4 kB, so
    Kafka would hold 128 entries here). A Kafka broker given the directory rebuilds a
    missing index when it loads the log, as it does after an unclean shutdown."""
    return level >= 1 and size < UNINDEXED_RUN_MAX_BYTES


@dataclass(frozen=True)
class SmallObject:
    """A small object above M whose successor exists below the published LSO: it resolves
    ``[base_offset, end_offset)`` for good."""

    base_offset: int
    end_offset: int
    size: int
    has_txnindex: bool
    location: tuple[str, int] | None = None  # a run in a shared object: (path, position)
    # a run of abort markers in a shared object: its .txnindex entries (from the tail)
    aborted: tuple[tuple[int, int, int, int], ...] = ()


@dataclass(frozen=True)
class MergeSettings:
    """The merger's knobs (coordinator flags); segment size and age are topic configs."""

    min_objects: int = 32
    fanout: int = 8
    max_inputs: int = 1000  # objects one merge reads (an old root converts in steps)
    interval_s: float = 1.0  # how often partitions are looked at
    idle_ms: int = 30_000  # a partition with no append for this long: its few objects merge
    # read and build merges in a worker process (merge_worker.py); None: on remote storage
    isolate: bool | None = None
    worker_timeout_s: float = 600.0  # a merge in the worker taking longer: killed, retried
    # a shared object no confirm ever named (a zombie's, a writer killed between its put and
    # its confirm, a gateway window whose confirm failed) is deleted once it was seen
    # unnamed for this long: past the longest transaction timeout (15 min) and the
    # reservation timeout, no confirm of it can still succeed
    orphan_age_s: float = 16 * 60.0

    def __post_init__(self) -> None:
        if self.min_objects < 2 or self.fanout < 2 or self.max_inputs < 2:
            raise ValueError("merge min objects, fanout and max inputs must be >= 2")
        if not self.worker_timeout_s > 0:
            raise ValueError("the merge worker timeout must be > 0 s")
        if not self.orphan_age_s > 0:
            raise ValueError("the shared object orphan age must be > 0 s")


def io_parallelism(pending: int, min_objects: int) -> int:
    """How many of a merge's storage requests are in flight at once: one while merging
    keeps up (fewer than two merges' worth of small objects wait in the partition), then
    one more per merge's worth waiting, up to ``MAX_IO_PARALLEL``.

    Why not always as many as the inputs: a merge of 32 small objects is some 70 requests,
    and sent at once they are a burst the storage serves ahead of the commits that arrive
    meanwhile. On SeaweedFS sharing two cores with the coordinator, one-partition commits'
    p99 was 1.85x of merging off with 32 in flight, 1.67x with 4 and 1.10x with one
    (bench/merge_isolation.py). Kafka's log cleaner has the same concern and
    the same kind of answer (``log.cleaner.io.max.bytes.per.second``). A merge one request
    at a time is slower, which is harmless while the merger keeps up; when it does not,
    the backlog grows and so does the parallelism, up to a full round of GETs (the
    throughput a root converted from before merging, or a merger behind a busy stream,
    needs on a remote store where each request takes tens of milliseconds)."""
    return max(1, min(MAX_IO_PARALLEL, pending // max(1, min_objects)))


@dataclass(frozen=True)
class Choice:
    """What to merge: these runs (in order) and then these small objects, into ``level``."""

    level: int
    runs: tuple[MergedObject, ...]
    small: tuple[SmallObject, ...]

    @property
    def base_offset(self) -> int:
        return self.runs[0].base_offset if self.runs else self.small[0].base_offset

    @property
    def end_offset(self) -> int:
        return self.small[-1].end_offset if self.small else self.runs[-1].end_offset


def roll_ms(segment_ms: int, compact: bool, max_compaction_lag_ms: int) -> int:
    """How old the open segment's first record may get before the segment closes: Kafka's
    ``LogConfig.maxSegmentMs``. On a compacted topic ``max.compaction.lag.ms`` caps it
    (KIP-354): the cleaner never touches the open segment, so a record can only be
    compacted within the lag if its segment is rolled within it."""
    return min(segment_ms, max_compaction_lag_ms) if compact else segment_ms


def open_since(open_since_ms: int, first_small_ms: int) -> int:
    """When the open segment's first record was appended (0: unknown): its runs' time, or
    the first small object's when there is no run."""
    known = [ms for ms in (open_since_ms, first_small_ms) if ms]
    return min(known) if known else 0


def choose_merge(runs: list[MergedObject], small: list[SmallObject], *, segment_bytes: int,
                 segment_ms: int, open_since_ms: int, now_ms: int,
                 settings: MergeSettings, first_small_ms: int = 0,
                 idle: bool = False) -> Choice | None:
    """The next merge for a partition whose open segment is ``runs`` (levels >= 1,
    ascending, contiguous) followed by the mergeable ``small`` objects; None: nothing due.

    ``segment_ms``: the roll age (``roll_ms``); ``open_since_ms``: the runs' (0: none);
    ``first_small_ms``: when ``small[0]`` was appended (0: unknown) — without it a
    partition with fewer small objects than a run never aged, and its tail stayed unmerged
    for as long as nothing was appended. ``idle``: no append for ``settings.idle_ms``."""
    small = small[:settings.max_inputs]
    base = runs[0].base_offset if runs else (small[0].base_offset if small else 0)
    open_bytes = sum(r.size for r in runs)
    # 1. close by size (or by offset span): the runs, and the small objects that still fit
    fits = 0
    total = open_bytes
    for obj in small:
        if total + obj.size > segment_bytes or obj.end_offset - base > MAX_RELATIVE_OFFSET:
            break
        total += obj.size
        fits += 1
    if fits < len(small):
        if runs or fits:
            return Choice(0, tuple(runs), tuple(small[:fits]))
        return Choice(0, (), (small[0],))  # one object bigger than a segment: alone
    # 2. close by age (of the first record: the runs', else the first small object's)
    since = open_since(open_since_ms if runs else 0, first_small_ms if small else 0)
    if since and now_ms - since >= segment_ms and (runs or small):
        return Choice(0, tuple(runs), tuple(small))
    # 3. carry: fanout runs of one level become one of the next
    by_level: dict[int, list[MergedObject]] = {}
    for r in runs:
        by_level.setdefault(r.level, []).append(r)
    for level in sorted(by_level):
        same = by_level[level]
        if len(same) >= settings.fanout:
            return Choice(level + 1, tuple(same[:settings.fanout]), ())
    # 4. small objects into a run of level 1 (any two once the partition is idle)
    if len(small) >= settings.min_objects or (idle and len(small) >= 2):
        return Choice(1, (), tuple(small))
    return None
