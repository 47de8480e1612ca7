"""The stable offsets readers trust (DESIGN.md 5.4, 8): heads over bases.

Every partition's HW and LSO move at once, in one object, so a reader sees a transaction in
all partitions or in none. That object no longer holds every partition of the root (a
one-partition commit in a 20,001-partition root rewrote 569 KB): it is a *head*, a small
cumulative delta over a *base* that holds every partition.

- Head ``_stable/<epoch>-<seq>.json``. Names sort as (coordinator epoch, seq): a fenced
  coordinator's late head sorts below the current one; readers take the highest head and
  never go backwards. A head is either
  - a *delta* (``"kind": "delta"``): the base it stands on (its key, size and CRC32) and
    every partition whose (HW, LSO) changed since that base; the state it publishes is the
    base overlaid with those changes. It has no ``partitions`` field, so a reader written
    before deltas existed fails on it with "not a valid stable snapshot" instead of taking
    the changed partitions for the whole root;
  - a *full* snapshot (``partitions``, no ``kind``): what roots written before deltas hold,
    still read as they are (a full snapshot is a base with no delta).
- Base ``_stable/<epoch>-<seq>.base.json``: every partition as head ``<epoch>-<seq>``
  published them. The coordinator writes one when it takes over and then off the commit
  path whenever the cumulative delta grows past a bound (coordinator/stable_publisher.py);
  heads written after it is durable stand on it.

A fresh reader needs one LIST of ``_stable/`` and two GETs (the head, and the newest base,
on remote storage fetched in parallel on the guess that the head stands on it); a reader
that already holds the head's base GETs the head only.

Shared objects (``segments/shared_object``) put many partitions' batches in one object, so a
reader cannot find them by listing its partition. Heads and bases therefore carry, per
partition, its *tail*: where each confirmed run above the merged end M lies
(``TailEntry``: offsets, shared object, byte position, size), in the same object that moves
its HW and LSO, so the run and the offsets that make it visible are published together. A
delta names a partition whose tail changed (a confirm, a merge that moved M) with its whole
tail; the merger keeps tails short (they are merged into segments like small objects).

Pruning (``prune_stable``) keeps the newest ``keep`` heads and the newest ``KEEP_BASES``
bases. That keeps every base the newest head can stand on: a coordinator's heads stand on
its newest durable base, or on the one before while it switches; a fenced coordinator's
bases sort below every base of its successor. A reader that finds its base pruned under it
lists again.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .errors import TxnlogError
from .layout import (
    STABLE_DIR,
    check_shared_path,
    parse_stable_base_name,
    parse_stable_name,
    stable_base_path,
    stable_path,
)
from .storage import Storage

DEFAULT_KEEP = 10
# Bases kept by pruning: the one the newest head stands on, the one it is switching to, and
# one more as grace for readers that listed before the last switch.
KEEP_BASES = 3
FORMAT = 2  # heads with "kind" and bases; full snapshots (no "format") are version 1
READ_ATTEMPTS = 5

Offsets = Mapping[str, tuple[int, int]]  # "t-p": (hw, lso)


class TailEntry(NamedTuple):
    """A confirmed run of one partition in a shared object: offsets ``[base, end)`` in its
    bytes ``[position, position + size)``.

    ``aborted``: for a run of markers that aborts transactions in this partition, the
    ``.txnindex`` entries they add (``(producer id, first offset, last offset, LSO)``, as
    Kafka's AbortedTxn): published with the run instead of written as a ``.txnindex``
    object of the partition's own, so that an aborted transaction costs one object (its
    markers' shared object), as a committed one does. Merging writes them into the merged
    segment's ``.txnindex``.
    """

    base: int
    end: int
    path: str
    position: int
    size: int
    aborted: tuple[tuple[int, int, int, int], ...] = ()


Tails = Mapping[str, tuple[TailEntry, ...]]  # "t-p": its runs above M, ascending
NO_TAIL: tuple[TailEntry, ...] = ()


def encode_tails(tails: Tails, keys: Iterator[str] | list[str] | None = None
                 ) -> dict[str, Any]:
    """``{"objects": [path...], "tails": {"t-p": [[base, end, object, pos, size]...]}}``
    for ``keys`` (default: every partition of ``tails``); each path is written once. A run
    with aborted transactions has a sixth field, ``[[pid, first, last, lso]...]`` (a
    reader written before it refuses the head as invalid instead of missing them)."""
    objects: dict[str, int] = {}
    out: dict[str, list[list[int]]] = {}
    for k in (tails if keys is None else keys):
        entries = tails.get(k, NO_TAIL)
        if entries:
            out[k] = [[e.base, e.end, objects.setdefault(e.path, len(objects)), e.position,
                       e.size, *([[list(a) for a in e.aborted]] if e.aborted else [])]
                      for e in entries]
    return {"objects": list(objects), "tails": out} if out else {}


def decode_tails(obj: Mapping[str, Any], source: str) -> dict[str, tuple[TailEntry, ...]]:
    """The tails a head or base carries (none in objects written before shared objects)."""
    raw = obj.get("tails")
    if not raw:
        return {}
    try:
        paths = [check_shared_path(p) for p in obj["objects"]]
        tails: dict[str, tuple[TailEntry, ...]] = {}
        for k, rows in raw.items():
            entries = tuple(_tail_entry(row, paths) for row in rows)
            last = -1
            for t in entries:
                if t.base < last or t.end < t.base or t.position < 0 or t.size < 0:
                    raise ValueError(f"tail of {k} is not ascending runs: {list(t)}")
                last = t.end
            tails[str(k)] = entries
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise StableSnapshotError(f"{source}: invalid tails: {exc}") from exc
    return tails


def _tail_entry(row: list[Any], paths: list[str]) -> TailEntry:
    b, e, i, pos, sz, *rest = row
    if len(rest) > 1:
        raise ValueError(f"a tail row of {len(row)} fields: {row}")
    entry = TailEntry(int(b), int(e), paths[int(i)], int(pos), int(sz),
                      aborted_entries(rest[0]) if rest else ())
    for _pid, first, last, _lso in entry.aborted:
        if not first <= last or not entry.base <= last < entry.end:
            raise ValueError(f"aborted transaction [{first}, {last}] does not end at a "
                             f"marker of the run [{entry.base}, {entry.end})")
    return entry


def aborted_entries(rows: Any) -> tuple[tuple[int, int, int, int], ...]:
    """``[[pid, first, last, lso]...]`` as the tuples a ``TailEntry`` holds (ValueError,
    TypeError: not that shape)."""
    out = []
    for r in rows:
        pid, first, last, lso = (int(x) for x in r)
        out.append((pid, first, last, lso))
    if not out:
        raise ValueError("an empty list of aborted transactions")
    return tuple(out)


class TailOverlay(Mapping[str, tuple[TailEntry, ...]]):
    """A base's tails with a delta's on top: a partition the delta names has the delta's
    tail (empty if it names none: merged away), every other the base's."""

    __slots__ = ("base", "changed", "tails")

    def __init__(self, base: Tails, changed: Mapping[str, Any], tails: Tails) -> None:
        self.base = base
        self.changed = changed
        self.tails = tails

    def __getitem__(self, key: str) -> tuple[TailEntry, ...]:
        if key in self.changed:
            return self.tails.get(key, NO_TAIL)
        return self.base[key]

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if key in self.changed:
            return self.tails.get(key, NO_TAIL)
        return self.base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.tails or (key in self.base and key not in self.changed)

    def __iter__(self) -> Iterator[str]:
        yield from self.tails
        for k in self.base:
            if k not in self.changed:
                yield k

    def __len__(self) -> int:
        return sum(1 for _ in self)


class StableSnapshotError(TxnlogError, ValueError):
    """A stable head or base that cannot be parsed, is inconsistent (lso > hw), or does not
    match what its head says of it (size, CRC32, key)."""


def _check_offsets(parts: Offsets, where: str) -> None:
    for key, (hw, lso) in parts.items():
        if not 0 <= lso <= hw:
            raise StableSnapshotError(
                f"stable snapshot {where}: partition {key} has lso {lso} > hw {hw} "
                "or a negative offset")


class BaseRef(NamedTuple):
    """What a delta head says of its base: its key, and its bytes' size and CRC32 (so a
    corrupt, truncated or foreign base is refused, never overlaid)."""

    coordinator_epoch: int
    seq: int
    size: int
    crc32: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.coordinator_epoch, self.seq)

    @property
    def path(self) -> str:
        return stable_base_path(self.coordinator_epoch, self.seq)


class Overlay(Mapping[str, tuple[int, int]]):
    """A base's partitions with a delta's on top: the state a delta head publishes, without
    copying the base (a reader refreshes often and the base may hold 20,000 partitions)."""

    __slots__ = ("base", "changed")

    def __init__(self, base: Mapping[str, tuple[int, int]],
                 changed: Mapping[str, tuple[int, int]]) -> None:
        self.base = base
        self.changed = changed

    def __getitem__(self, key: str) -> tuple[int, int]:
        v = self.changed.get(key)
        return v if v is not None else self.base[key]

    def __contains__(self, key: object) -> bool:
        return key in self.changed or key in self.base

    def __iter__(self) -> Iterator[str]:
        yield from self.changed
        for k in self.base:
            if k not in self.changed:
                yield k

    def __len__(self) -> int:
        return len(self.base) + sum(1 for k in self.changed if k not in self.base)


@dataclass(frozen=True)
class StableBase:
    """A base object, parsed: every partition as head ``key`` published them."""

    ref: BaseRef
    partitions: Mapping[str, tuple[int, int]]
    tails: Tails = field(default_factory=dict)


@dataclass(frozen=True)
class StableSnapshot:
    """The state one head publishes (a full snapshot's, or a delta's over its base)."""

    coordinator_epoch: int
    seq: int
    partitions: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # "t-p": (hw, lso)
    written_ms: int = 0
    # The base a delta head stands on (None: a full snapshot); kept so the next refresh of
    # the same reader reuses it instead of GETting it again.
    base: StableBase | None = field(default=None, compare=False, repr=False)
    tails: Tails = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.partitions, Overlay):  # an overlay's parts were checked
            _check_offsets(self.partitions, str(self.key))

    @property
    def key(self) -> tuple[int, int]:
        """Sort key; equals the order of the head names."""
        return (self.coordinator_epoch, self.seq)

    @property
    def path(self) -> str:
        return stable_path(self.coordinator_epoch, self.seq)

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(hw, lso) of a partition; (0, 0) if nothing was ever resolved there."""
        return tuple(self.partitions.get(f"{topic}-{partition}", (0, 0)))  # type: ignore

    def hw(self, topic: str, partition: int) -> int:
        return self.offsets(topic, partition)[0]

    def lso(self, topic: str, partition: int) -> int:
        return self.offsets(topic, partition)[1]

    def tail(self, topic: str, partition: int) -> tuple[TailEntry, ...]:
        """The partition's confirmed runs in shared objects above its merged end."""
        return self.tails.get(f"{topic}-{partition}", NO_TAIL)

    def to_json(self) -> bytes:
        """The full-snapshot encoding (format 1, what roots written before deltas hold)."""
        return json.dumps({
            "coordinator_epoch": self.coordinator_epoch, "seq": self.seq,
            "written_ms": self.written_ms,
            "partitions": {k: {"hw": hw, "lso": lso}
                           for k, (hw, lso) in sorted(self.partitions.items())},
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str = "stable snapshot") -> StableSnapshot:
        """A full snapshot; a delta head is refused (it needs its base: ``read_head``)."""
        head = read_head(data, source)
        if isinstance(head, DeltaHead):
            raise StableSnapshotError(f"{source}: a delta head, not a full snapshot")
        return head


@dataclass(frozen=True)
class DeltaHead:
    """A delta head, parsed: its key, its base, and the partitions changed since the base."""

    coordinator_epoch: int
    seq: int
    written_ms: int
    base: BaseRef
    changed: dict[str, tuple[int, int]]
    tails: dict[str, tuple[TailEntry, ...]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int]:
        return (self.coordinator_epoch, self.seq)

    def over(self, base: StableBase) -> StableSnapshot:
        """The state this head publishes, given its (checked) base."""
        tails: Tails = (TailOverlay(base.tails, self.changed, self.tails)
                        if base.tails or self.tails else {})
        return StableSnapshot(self.coordinator_epoch, self.seq,
                              Overlay(base.partitions, self.changed), self.written_ms, base,
                              tails)


def _pairs(obj: Any) -> dict[str, tuple[int, int]]:
    return {str(k): (int(v[0]), int(v[1])) for k, v in obj.items()}


def read_head(data: bytes, source: str = "stable head") -> StableSnapshot | DeltaHead:
    """Parse a head: a full snapshot (format 1) or a delta head (format 2)."""
    try:
        obj: Any = json.loads(data)
        epoch, seq = int(obj["coordinator_epoch"]), int(obj["seq"])
        written = int(obj.get("written_ms", 0))
        if obj.get("kind") == "delta":
            if obj.get("format") != FORMAT:
                raise ValueError(f"unknown format {obj.get('format')!r}")
            b = obj["base"]
            ref = BaseRef(int(b["epoch"]), int(b["seq"]), int(b["size"]), int(b["crc32"]))
            changed = _pairs(obj["changed"])
            _check_offsets(changed, source)
            tails = decode_tails(obj, source)
            if not set(tails) <= set(changed):
                raise ValueError("a tail of a partition the delta does not name")
            return DeltaHead(epoch, seq, written, ref, changed, tails)
        parts = {str(k): (int(v["hw"]), int(v["lso"])) for k, v in obj["partitions"].items()}
        return StableSnapshot(epoch, seq, parts, written)
    except StableSnapshotError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise StableSnapshotError(f"{source}: not a valid stable snapshot: {exc}") from exc


def encode_base(coordinator_epoch: int, seq: int, partitions: Offsets,
                now_ms: int | None = None, tails: Tails | None = None) -> bytes:
    """A base's bytes: every partition as [hw, lso] (half the bytes of format 1's dicts),
    and every non-empty tail."""
    return json.dumps({
        "format": FORMAT, "kind": "base", "coordinator_epoch": coordinator_epoch, "seq": seq,
        "written_ms": int(time.time() * 1000) if now_ms is None else now_ms,
        "partitions": {k: [hw, lso] for k, (hw, lso) in partitions.items()},
        **(encode_tails(tails) if tails else {}),
    }, separators=(",", ":")).encode()


def base_ref(coordinator_epoch: int, seq: int, data: bytes) -> BaseRef:
    """The reference a delta head carries to the base whose bytes are ``data``."""
    return BaseRef(coordinator_epoch, seq, len(data), zlib.crc32(data))


def read_base(data: bytes, ref: BaseRef, source: str = "stable base") -> StableBase:
    """Parse a base and check it is the one ``ref`` names (size, CRC32, key)."""
    if len(data) != ref.size or zlib.crc32(data) != ref.crc32:
        raise StableSnapshotError(
            f"{source}: {len(data)} bytes with CRC32 {zlib.crc32(data):#010x}, but its head "
            f"expects {ref.size} bytes with CRC32 {ref.crc32:#010x} (corrupt or truncated)")
    try:
        obj: Any = json.loads(data)
        if obj.get("kind") != "base" or obj.get("format") != FORMAT:
            raise ValueError("not a format-2 base")
        if (int(obj["coordinator_epoch"]), int(obj["seq"])) != ref.key:
            raise ValueError(f"holds key {(obj['coordinator_epoch'], obj['seq'])}, "
                             f"not {ref.key}")
        parts = _pairs(obj["partitions"])
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise StableSnapshotError(f"{source}: not a valid stable base: {exc}") from exc
    _check_offsets(parts, source)
    return StableBase(ref, parts, decode_tails(obj, source))


def encode_delta(coordinator_epoch: int, seq: int, base: BaseRef, changed: Offsets,
                 now_ms: int | None = None, tails: Tails | None = None) -> bytes:
    """A delta head's bytes (no ``partitions`` field: see the module docstring); the tails
    of the ``changed`` partitions that have one."""
    return json.dumps({
        "format": FORMAT, "kind": "delta", "coordinator_epoch": coordinator_epoch,
        "seq": seq, "written_ms": int(time.time() * 1000) if now_ms is None else now_ms,
        "base": {"epoch": base.coordinator_epoch, "seq": base.seq, "size": base.size,
                 "crc32": base.crc32},
        "changed": {k: [hw, lso] for k, (hw, lso) in changed.items()},
        **(encode_tails(tails, list(changed)) if tails else {}),
    }, separators=(",", ":")).encode()


# ------------------------------------------------------------------------------ writing
def write_stable(storage: Storage, snapshot: StableSnapshot) -> bool:
    """Write a full snapshot head put-if-absent (format 1: tests and roots of the previous
    version); False if its name already holds other bytes."""
    return storage.put_if_absent(snapshot.path, snapshot.to_json())


def make_snapshot(coordinator_epoch: int, seq: int,
                  partitions: Mapping[str, tuple[int, int]],
                  now_ms: int | None = None) -> StableSnapshot:
    return StableSnapshot(coordinator_epoch, seq, dict(partitions),
                          int(time.time() * 1000) if now_ms is None else now_ms)


def write_base(storage: Storage, coordinator_epoch: int, seq: int, data: bytes) -> BaseRef | None:
    """Write a base's bytes (``encode_base``) put-if-absent; its reference, or None if the
    name already holds other bytes (then no head may stand on it)."""
    path = stable_base_path(coordinator_epoch, seq)
    if not storage.put_if_absent(path, data):
        return None
    return base_ref(coordinator_epoch, seq, data)


def write_delta(storage: Storage, coordinator_epoch: int, seq: int, data: bytes) -> bool:
    """Write a delta head's bytes (``encode_delta``) put-if-absent; False if taken."""
    return storage.put_if_absent(stable_path(coordinator_epoch, seq), data)


# ------------------------------------------------------------------------------ reading
def list_stable_objects(storage: Storage) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(head keys, base keys), each ascending, from one LIST of ``_stable/``."""
    heads: list[tuple[int, int]] = []
    bases: list[tuple[int, int]] = []
    for o in storage.list(STABLE_DIR):
        key = parse_stable_name(o.name)
        if key is not None:
            heads.append(key)
        elif (key := parse_stable_base_name(o.name)) is not None:
            bases.append(key)
    return sorted(heads), sorted(bases)


def list_stable(storage: Storage) -> list[tuple[int, int]]:
    """(epoch, seq) of every head, ascending."""
    return list_stable_objects(storage)[0]


# Bases are immutable (put-if-absent, a name is never reused), so one process keeps the last
# few it read: a fresh Consumer or a Spark plan in the same process does not GET them again.
_BASE_CACHE: dict[tuple[str, BaseRef], StableBase] = {}
_BASE_CACHE_SIZE = 2
_cache_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def clear_base_cache() -> None:
    """Forget cached bases (benches measure a cold reader)."""
    with _cache_lock:
        _BASE_CACHE.clear()


def _cached_base(storage: Storage, ref: BaseRef) -> StableBase | None:
    with _cache_lock:
        return _BASE_CACHE.get((storage.url, ref))


def _cache_has(storage: Storage, key: tuple[int, int]) -> bool:
    with _cache_lock:
        return any(url == storage.url and ref.key == key for url, ref in _BASE_CACHE)


def _remember_base(storage: Storage, base: StableBase) -> None:
    with _cache_lock:
        _BASE_CACHE[(storage.url, base.ref)] = base
        while len(_BASE_CACHE) > _BASE_CACHE_SIZE:
            del _BASE_CACHE[next(iter(_BASE_CACHE))]


def _remote(storage: Storage) -> bool:
    """Worth a parallel GET: a round trip (S3), not a local read that costs less than
    handing it to a thread."""
    return not storage.url.startswith("file:")


def _prefetch(storage: Storage, path: str) -> Future[bytes]:
    """GET ``path`` on a small pool of this process (created after a fork, never shared)."""
    global _pool
    with _cache_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(2, thread_name_prefix="stable-get"))
        pool = _pool[1]
    return pool.submit(storage.get, path)


def _load_base(storage: Storage, ref: BaseRef, have: StableBase | None,
               guess: tuple[tuple[int, int], Future[bytes]] | None) -> StableBase:
    """The base ``ref`` names: the caller's, the cache's, the prefetched bytes, or a GET."""
    if have is not None and have.ref == ref:
        return have
    cached = _cached_base(storage, ref)
    if cached is not None:
        return cached
    if guess is not None and guess[0] == ref.key:
        data = guess[1].result()
    else:
        data = storage.get(ref.path)
    base = read_base(data, ref, f"{storage.url}/{ref.path}")
    _remember_base(storage, base)
    return base


def read_latest_stable(storage: Storage,
                       not_below: StableSnapshot | None = None) -> StableSnapshot | None:
    """The state the highest head publishes, or ``not_below`` if that one is newer.

    None when the root has no head yet (nothing is readable). A head or base pruned between
    the listing and the read makes it list again; a corrupt one raises StableSnapshotError
    naming it (never a guess at what it held).
    """
    for _ in range(READ_ATTEMPTS):
        heads, bases = list_stable_objects(storage)
        if not heads:
            return not_below
        key = heads[-1]
        if not_below is not None and key <= not_below.key:
            return not_below
        have = not_below.base if not_below is not None else None
        guess = None
        if bases and _remote(storage) and (have is None or have.ref.key != bases[-1]) \
                and not _cache_has(storage, bases[-1]):
            guess = (bases[-1], _prefetch(storage, stable_base_path(*bases[-1])))
        path = stable_path(*key)
        try:
            head = read_head(storage.get(path), f"{storage.url}/{path}")
            if isinstance(head, StableSnapshot):
                return head
            return head.over(_load_base(storage, head.base, have, guess))
        except FileNotFoundError:
            continue
        finally:
            if guess is not None:
                guess[1].cancel()
    raise StableSnapshotError(
        f"stable snapshots under {storage.url}/{STABLE_DIR} kept vanishing while read")


def read_stable(storage: Storage, key: tuple[int, int]) -> StableSnapshot:
    """The state head ``key`` publishes (its base read too): for tools and tests that walk
    every head; readers use ``read_latest_stable``. FileNotFoundError if it or its base
    was pruned."""
    path = stable_path(*key)
    head = read_head(storage.get(path), f"{storage.url}/{path}")
    if isinstance(head, StableSnapshot):
        return head
    return head.over(_load_base(storage, head.base, None, None))


# ------------------------------------------------------------------------------ pruning
def prune_stable(storage: Storage, keep: int = DEFAULT_KEEP, keep_bases: int = KEEP_BASES
                 ) -> int:
    """Delete all but the newest ``keep`` heads and ``keep_bases`` bases; returns how many
    objects were deleted. Only what this LIST showed is deleted, so a base written after it
    (not yet stood on) is never taken."""
    if keep < 1:
        raise ValueError("keep must be >= 1: readers need the newest snapshot")
    if keep_bases < 2:
        raise ValueError("keep_bases must be >= 2: the newest head may stand on the base "
                         "before the newest while its coordinator switches")
    heads, bases = list_stable_objects(storage)
    old = [stable_path(*k) for k in heads[:-keep]]
    old += [stable_base_path(*k) for k in bases[:-keep_bases]]
    if old:  # one DeleteObjects on S3, not a DELETE (and its client CPU) per head
        storage.delete_many(old)
    return len(old)
