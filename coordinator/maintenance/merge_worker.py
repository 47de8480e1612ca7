"""A merge's storage work: reading, building, writing and deleting, in a process of its own
on remote storage.

Why a process: on S3 one merge of 32 small objects is some 60 requests (the objects, their
``.txnindex`` files, the output and its indexes, the manifest, the deletes after the grace
period), and each costs an S3 client milliseconds of CPU. On threads of the coordinator's
process they hold the GIL against the event loop that answers commits: with merging on, a
one-partition commit's p99 was 1.5-2.1 s against 0.3 s with merging off (SeaweedFS, load
~20; bench/merge_isolation.py), the p50 unchanged. Kafka's log cleaner threads do not share
a lock with the request handlers; here the only way to the same is a second interpreter.

So on remote storage every request a merge makes goes through one worker process (its own
GIL, its own S3 clients and threads): ``MergeStore`` below, which lists, reads and builds,
keeps the built segment until the merger has logged its plan, then writes it, and deletes.
Everything that decides stays in the coordinator: planning, the log records, the order of
the steps, fencing. The segment's bytes never cross to the coordinator (a merge of 1 GiB
would otherwise be pickled both ways). Local roots keep the store on the coordinator's
threads: a local request costs microseconds of CPU, and a process hop would cost more.

The worker is spawned (never forked: the coordinator has threads) as the coordinator starts
serving, dies with the coordinator (``PR_SET_PDEATHSIG``), and is started again if it dies:
what it was doing is retried at the next tick, as after a storage error (a planned merge
whose built segment died with it is rebuilt from its inputs, checked against their CRCs). A
worker that does not answer within ``timeout_s`` (stopped, or stuck on a connection the S3
client's own timeouts do not end) is killed and replaced the same way: merging must not
stall for good behind one process, while commits go on and small objects pile up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.codec.crc import crc32c
from txnlog.log_format.codec.indexes import AbortedTxn, encode_txn_index
from txnlog.log_format.errors import LogFormatError
from txnlog.log_format.manifest import MergedObject
from txnlog.log_format.segments.segment_merge import MergedSegment, merge_segment
from txnlog.log_format.segments.segment_merge import MergeInput as SegmentInput
from txnlog.log_format.storage import S3Storage, Storage, StorageError
from txnlog.log_format.storage.s3_arrow import arrow_reader

from ..state.merge_state import SMALL
from .merge_policy import MAX_IO_PARALLEL

# (level, base offset, end offset, .txnindex, location) of one input, as the merger lists
# them; .txnindex: True for an object of its own beside the input, its bytes when the tail
# publishes them (an abort's markers in a shared object), False for none; location (shared
# object path, position, size) for a run in a shared object, None for an object of the
# partition's own
Row = (tuple[int, int, int, bool | bytes]
       | tuple[int, int, int, bool | bytes, "tuple[str, int, int] | None"])
# the most requests of one merge in flight at once (merge_policy.io_parallelism decides how
# many a merge uses: one while merging keeps up, more as its backlog grows)
IO_THREADS = MAX_IO_PARALLEL
# how long one step of a merge (its build, its writes, a cleanup) may take in the worker
# before it is killed and the step retried: far above a build's time (max_inputs objects,
# at most a segment's bytes; a build of that many inputs sends ~30 requests at a time)
DEFAULT_TIMEOUT_S = 600.0
START_TIMEOUT_S = 120.0  # for a new worker to start and answer

SWEEP_KEYS = 1000  # one LIST page of small objects to delete

_store: MergeStore | None = None  # the worker process's store


def input_paths(topic: str, p: int, row: Row) -> tuple[str, str]:
    """The object and ``.txnindex`` keys of one input."""
    level, base, end = row[0], row[1], row[2]
    if level == SMALL:
        return (layout.segment_path(topic, p, base),
                layout.segment_path(topic, p, base, layout.TXNINDEX_SUFFIX))
    obj = MergedObject(level, base, end, 0)
    return obj.path(topic, p), obj.path(topic, p, layout.TXNINDEX_SUFFIX)


def txnindex_of(has_txnindex: bool, aborted: Sequence[Sequence[int]]) -> bool | bytes:
    """A row's .txnindex field: the bytes of ``aborted`` (entries a tail run publishes), else
    whether the input has a .txnindex object of its own."""
    if aborted:
        return encode_txn_index([AbortedTxn(*e) for e in aborted])
    return has_txnindex


def bounded_map(pool: ThreadPoolExecutor, fn: Callable[[Any], Any], items: Sequence[Any],
                parallel: int) -> list[Any]:
    """``[fn(x) for x in items]`` with at most ``parallel`` calls in flight on ``pool``."""
    if parallel <= 1:
        return [fn(x) for x in items]
    out: list[Any] = [None] * len(items)
    flying: collections.deque[tuple[int, Future[Any]]] = collections.deque()
    for i, item in enumerate(items):
        if len(flying) >= parallel:
            j, fut = flying.popleft()
            out[j] = fut.result()
        flying.append((i, pool.submit(fn, item)))
    for j, fut in flying:
        out[j] = fut.result()
    return out


def read_and_merge(storage: Storage, reads: ThreadPoolExecutor, topic: str, p: int,
                   rows: Sequence[Row], get: Callable[[str], bytes] | None = None,
                   parallel: int = MAX_IO_PARALLEL
                   ) -> tuple[list[tuple[int, int]], MergedSegment]:
    """Read the inputs (``parallel`` at a time on ``reads``, with ``get`` or
    ``storage.get``) and build the merged segment: each input's (size, CRC32C), and the
    segment. FileNotFoundError: an input is gone; LogFormatError: the inputs cannot be
    merged."""
    whole = get or storage.get
    paths: list[tuple[str, int, int] | str] = []
    for row in rows:
        path, tpath = input_paths(topic, p, row)
        loc = row[4] if len(row) > 4 else None  # rows of four: objects of the partition
        paths.append(path if loc is None else loc)
        if row[3] is True:
            paths.append(tpath)

    def fetch(item: tuple[str, int, int] | str) -> bytes:
        if isinstance(item, str):
            return whole(item)
        path, pos, size = item  # a run of a shared object: its bytes only
        data = storage.get(path, pos, pos + size)
        if len(data) != size:
            raise LogFormatError(f"{storage.url}/{path}: {len(data)} bytes at {pos}, "
                                 f"not the {size} confirmed")
        return data

    got = iter(bounded_map(reads, fetch, paths, parallel))
    read = [(next(got), next(got) if row[3] is True else row[3] or None) for row in rows]
    metas = [(len(data), crc32c(data)) for data, _ in read]
    source = f"{storage.url}/{layout.partition_dir(topic, p)}@"
    built = merge_segment([SegmentInput(row[1], row[2], data, txn, f"{source}{row[1]}")
                           for row, (data, txn) in zip(rows, read, strict=True)])
    return metas, built


class BuiltLost(StorageError):
    """The built segment a write asks for is not held (the worker that built it died, or
    another merge was built since): the planned merge is rebuilt from its inputs."""


@dataclass(frozen=True)
class Built:
    """What the merger needs to know of a built segment; its bytes stay in the store."""

    base_offset: int
    end_offset: int
    size: int
    has_txnindex: bool
    max_timestamp: int


class MergeStore:
    """Every storage request of a merge, on one root: in the worker process on remote
    storage, on the coordinator's threads on a local root. Blocking calls; the merger
    decides their order. It holds the last segment it built until that is written: a merge
    is built, its plan logged, and only then written (a restart rebuilds the same bytes)."""

    def __init__(self, storage: Storage, pool: ThreadPoolExecutor,
                 get: Callable[[str], bytes] | None = None) -> None:
        self.storage = storage
        self.pool = pool  # a merge's reads and writes go out up to ``parallel`` at a time
        self.get = get or storage.get
        self._built: tuple[str, int, MergedSegment, int] | None = None

    def list(self, directory: str, start_after: str | None) -> list[tuple[str, int]]:
        """(name, size) of the objects under ``directory`` after ``start_after``."""
        return [(o.name, o.size) for o in self.storage.list(directory, start_after)]

    def build(self, topic: str, p: int, rows: Sequence[Row], parallel: int
              ) -> tuple[list[tuple[int, int]], Built]:
        """Read the inputs, ``parallel`` requests at a time, and build their segment (held
        until written, then written as parallel): each input's (size, CRC32C), and what
        the segment is."""
        self._built = None
        metas, seg = read_and_merge(self.storage, self.pool, topic, p, rows, self.get,
                                    parallel)
        self._built = (topic, p, seg, parallel)
        return metas, Built(seg.base_offset, seg.end_offset, len(seg.log),
                            seg.txnindex is not None, seg.max_timestamp)

    def write_built(self, topic: str, p: int, out: MergedObject) -> tuple[list[str], int]:
        """Write the held segment as ``out`` with its indexes, put-if-absent and in
        parallel: the keys that hold other bytes (none: written), and the bytes written."""
        held = self._built
        if (held is None or held[:2] != (topic, p) or held[2].base_offset != out.base_offset
                or held[2].end_offset != out.end_offset or len(held[2].log) != out.size):
            raise BuiltLost(f"the merge of {layout.partition_dir(topic, p)} "
                            f"[{out.base_offset}, {out.end_offset}) is not built here; it is "
                            "built again from its inputs")
        files = out.files(topic, p, held[2])
        oks = bounded_map(self.pool, lambda f: self.storage.put_if_absent(*f), files, held[3])
        refused = [path for (path, _), ok in zip(files, oks, strict=True) if not ok]
        if not refused:
            self._built = None
        return refused, sum(len(data) for _, data in files)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return self.storage.put_if_absent(path, data)

    def delete_many(self, paths: list[str]) -> None:
        self.storage.delete_many(paths)

    def delete_small_below(self, topic: str, p: int, below: int) -> int:
        """Delete the partition's small objects (and txnindexes) below ``below``: what was
        merged and waited out its grace period, and whatever a zombie wrote into a name
        freed earlier. Listed page by page from the start of the directory, where nothing
        but such garbage is left: the cost is what is deleted, not history."""
        directory = layout.partition_dir(topic, p)
        total = 0
        while True:
            page = self.storage.list(directory, None, SWEEP_KEYS)
            doomed = [f"{directory}/{o.name}" for o in page
                      if (n := layout.parse_segment_name(o.name)) is not None
                      and n.base_offset < below]
            if doomed:
                self.storage.delete_many(doomed)
                total += len(doomed)
            if len(page) < SWEEP_KEYS or len(doomed) < len(page):
                return total


def _worker_init(root: str, options: Mapping[str, Any], coordinator_pid: int) -> None:
    """In the worker: die with the coordinator, open the root once."""
    global _store
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: the watchdog below
    # PR_SET_PDEATHSIG misses a coordinator killed while this process started (before the
    # prctl), and an orphaned worker then waits for ever on its queue's pipe, which its
    # resource tracker keeps open (the chaos runs left such pairs behind): exit as soon as
    # the coordinator is no longer the parent
    if os.getppid() != coordinator_pid:
        os._exit(0)
    threading.Thread(target=_exit_when_orphaned, args=(coordinator_pid,), daemon=True,
                     name="merge-worker-watchdog").start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator decides when it stops
    # no lower scheduling priority (it once ran at nice +10): on a machine at
    # load ~18 the worker then got ~1% of the CPU, merging fell behind for good, and
    # readers listed ever longer tails of small objects (chaos consumers' polls 20x
    # slower than with the in-process merger). Merging has to keep up; the process is
    # for the GIL, not for priority
    storage = Storage.for_url(root, options)
    # the inputs' GETs through Arrow's C++ S3 client: a fifth of s3fs's CPU per request
    # (log_format/storage/s3_arrow.py); s3fs when the options have no Arrow equivalent.
    # Writes stay on the root's storage: Arrow has no put-if-absent
    get, how = storage.get, "the root's storage"
    if isinstance(storage, S3Storage):
        arrow = arrow_reader(storage, options)
        get, how = ((arrow, "Arrow's S3 client") if arrow is not None else
                    (storage.get, "s3fs (the storage options have no Arrow equivalent)"))
    _warm_up()
    sys.stderr.write(f"txnlog merge worker {os.getpid()} reads merge inputs with {how}\n")
    sys.stderr.flush()
    _store = MergeStore(storage, ThreadPoolExecutor(max_workers=IO_THREADS,
                                                    thread_name_prefix="merge-io"), get)


def _warm_up() -> None:
    """Merge two tiny objects once, at the worker's start: the first merge otherwise loads
    the scan kernels (numba) then, and a worker's start is the coordinator's start, not a
    moment when commits are being answered."""
    from txnlog.log_format.codec.records import encode_batch

    merge_segment([SegmentInput(b, b + 1, encode_batch([(b"k", b"v", [], None)],
                                                       base_offset=b), None, "warm-up")
                   for b in (0, 1)])


def _in_worker(method: str, args: tuple[Any, ...]) -> Any:
    assert _store is not None
    return getattr(_store, method)(*args)


def _exit_when_orphaned(coordinator_pid: int) -> None:
    while os.getppid() == coordinator_pid:
        time.sleep(1.0)
    os._exit(0)


def _ready() -> bool:
    return _store is not None


class MergeWorker:
    """One spawned process that holds a ``MergeStore`` for the coordinator's merger."""

    def __init__(self, root: str, options: Mapping[str, Any] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.root = root
        self.options = dict(options or {})
        self.timeout_s = timeout_s
        self._executor: ProcessPoolExecutor | None = None
        self._starting: asyncio.Future[bool] | None = None  # the new worker's first answer

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init, initargs=(self.root, self.options, os.getpid()))
        return self._executor

    def start(self) -> None:
        """Spawn the worker now, without waiting for it. The coordinator calls this as it
        starts serving: a worker's start (spawn, imports, its S3 client, the kernels) is
        about a second of CPU, which at the first merge fell among commits being answered
        (bench/merge_isolation.py's p99). A start that fails shows at the first merge,
        which starts a new one."""
        if self._executor is None:
            self._starting = asyncio.get_running_loop().run_in_executor(self._pool(), _ready)
            self._starting.add_done_callback(
                lambda f: f.cancelled() or f.exception())  # retrieved: read at the merge

    async def call(self, method: str, *args: Any) -> Any:
        """``MergeStore.<method>(*args)`` in the worker (started first if it is not)."""
        loop = asyncio.get_running_loop()
        try:
            if self._executor is None:
                self.start()
            if self._starting is not None:
                # a new worker first starts (spawn, imports, its S3 client): seconds under
                # load, not counted against a merge's timeout
                await asyncio.wait_for(asyncio.shield(self._starting),
                                       max(self.timeout_s, START_TIMEOUT_S))
                self._starting = None
            return await asyncio.wait_for(
                loop.run_in_executor(self._pool(), _in_worker, method, args),
                self.timeout_s)
        except BrokenProcessPool as exc:
            self._drop()
            raise StorageError(f"the merge worker process died ({exc}); the merge is "
                               "retried with a new one") from None
        except TimeoutError:
            self._drop(kill=True)
            raise StorageError(f"the merge worker did not answer in time ({self.timeout_s:g} s "
                               "for a step of a merge); it was killed and the merge is retried "
                               "with a new one") from None

    def _drop(self, kill: bool = False) -> None:
        self._starting = None
        if self._executor is not None:
            if kill:  # a stopped process ignores SIGTERM until resumed: SIGKILL
                for proc in list(getattr(self._executor, "_processes", {}).values()):
                    with contextlib.suppress(ProcessLookupError, OSError):
                        os.kill(proc.pid, signal.SIGKILL)
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def close(self) -> None:
        self._drop()
