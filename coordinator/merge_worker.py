"""A merge's reading and building, in a process of its own on remote storage.

Why a process: on S3 one merge of 32 small objects is some 50 requests (the objects, their
``.txnindex`` files), and each costs the S3 client milliseconds of Python CPU. On threads of
the coordinator's process they hold the GIL against the event loop that answers commits:
with merging on, a one-partition commit's p99 was 1.5-2.1 s against 0.3 s with merging off
(SeaweedFS, load ~20; bench/merge_isolation.py), the p50 unchanged. Kafka's log cleaner
threads do not share a lock with the request handlers; here the only way to the same is a
second interpreter. So on remote storage the merger hands "read these inputs and build the
segment" to one worker process (its own GIL, its own S3 client and threads) and keeps
everything that decides in the coordinator: planning, the log records, the output and
manifest writes (a handful of requests per merge), fencing. Local roots keep the in-process
path: a local read costs microseconds of CPU, and a process hop would cost more than it saves.

The worker is spawned (never forked: the coordinator has threads), started at the first
merge, dies with the coordinator (``PR_SET_PDEATHSIG``), and is started again if it dies:
the merge it was doing is retried at the next tick, as after a storage error. A worker
that does not answer within ``timeout_s`` (stopped, or stuck on a connection the S3
client's own timeouts do not end) is killed and replaced the same way: merging must not
stall for good behind one process, while commits go on and small objects pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from typing import Any

from txnlog.log_format import layout
from txnlog.log_format.crc import crc32c
from txnlog.log_format.manifest import MergedObject
from txnlog.log_format.segment_merge import MergedSegment, merge_segment
from txnlog.log_format.segment_merge import MergeInput as SegmentInput
from txnlog.log_format.storage import S3Storage, Storage, StorageError
from txnlog.log_format.storage.s3_arrow import arrow_reader

from .merge_state import SMALL

# (level, base offset, end offset, has .txnindex) of one input, as the merger lists them
Row = tuple[int, int, int, bool]
READ_THREADS = 32  # inputs are read in parallel: on S3 one round of GETs, not eight
# how long one merge may take in the worker before it is killed and the merge retried: far
# above a merge's time (max_inputs objects, at most a segment's bytes, read in parallel)
DEFAULT_TIMEOUT_S = 600.0
START_TIMEOUT_S = 120.0  # for a new worker to start and answer

_storage: Storage | None = None
_get: Callable[[str], bytes] | None = None  # whole-object GET: Arrow's S3 client if it can
_reads: ThreadPoolExecutor | None = None


def input_paths(topic: str, p: int, row: Row) -> tuple[str, str]:
    """The object and ``.txnindex`` keys of one input."""
    level, base, end, _ = row
    if level == SMALL:
        return (layout.segment_path(topic, p, base),
                layout.segment_path(topic, p, base, layout.TXNINDEX_SUFFIX))
    obj = MergedObject(level, base, end, 0)
    return obj.path(topic, p), obj.path(topic, p, layout.TXNINDEX_SUFFIX)


def read_and_merge(storage: Storage, reads: ThreadPoolExecutor, topic: str, p: int,
                   rows: Sequence[Row], get: Callable[[str], bytes] | None = None
                   ) -> tuple[list[tuple[int, int]], MergedSegment]:
    """Read the inputs (in parallel on ``reads``, with ``get`` or ``storage.get``) and
    build the merged segment: each input's (size, CRC32C), and the segment.
    FileNotFoundError: an input is gone; LogFormatError: the inputs cannot be merged."""
    get = get or storage.get
    futures = []
    for row in rows:
        path, tpath = input_paths(topic, p, row)
        futures.append((reads.submit(get, path),
                        reads.submit(get, tpath) if row[3] else None))
    read = [(d.result(), t.result() if t is not None else None) for d, t in futures]
    metas = [(len(data), crc32c(data)) for data, _ in read]
    source = f"{storage.url}/{layout.partition_dir(topic, p)}@"
    built = merge_segment([SegmentInput(base, end, data, txn, f"{source}{base}")
                           for (_, base, end, _), (data, txn) in zip(rows, read, strict=True)])
    return metas, built


def _worker_init(root: str, options: Mapping[str, Any], coordinator_pid: int) -> None:
    """In the worker: die with the coordinator, open the root once."""
    global _storage, _get, _reads
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
    # no lower scheduling priority (it ran at nice +10 until session 9): on a machine at
    # load ~18 the worker then got ~1% of the CPU, merging fell behind for good, and
    # readers listed ever longer tails of small objects (chaos consumers' polls 20x
    # slower than with the in-process merger). Merging has to keep up; the process is
    # for the GIL, not for priority
    _storage = Storage.for_url(root, options)
    # the inputs' GETs through Arrow's C++ S3 client: a fifth of s3fs's CPU per request
    # (log_format/storage/s3_arrow.py); s3fs when the options have no Arrow equivalent
    _get, how = _storage.get, "the root's storage"
    if isinstance(_storage, S3Storage):
        arrow = arrow_reader(_storage, options)
        _get, how = ((arrow, "Arrow's S3 client") if arrow is not None else
                     (_storage.get, "s3fs (the storage options have no Arrow equivalent)"))
    _warm_up()
    sys.stderr.write(f"txnlog merge worker {os.getpid()} reads merge inputs with {how}\n")
    sys.stderr.flush()
    _reads = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="merge-read")


def _warm_up() -> None:
    """Merge two tiny objects once, at the worker's start: the first merge otherwise loads
    the scan kernels (numba) then, and a worker's start is the coordinator's start, not a
    moment when commits are being answered."""
    from txnlog.log_format.records import encode_batch

    merge_segment([SegmentInput(b, b + 1, encode_batch([(b"k", b"v", [], None)],
                                                       base_offset=b), None, "warm-up")
                   for b in (0, 1)])


def _in_worker(topic: str, p: int, rows: list[Row]
               ) -> tuple[list[tuple[int, int]], MergedSegment]:
    assert _storage is not None and _reads is not None
    return read_and_merge(_storage, _reads, topic, p, rows, _get)


def _exit_when_orphaned(coordinator_pid: int) -> None:
    while os.getppid() == coordinator_pid:
        time.sleep(1.0)
    os._exit(0)


def _ready() -> bool:
    return _storage is not None


class MergeWorker:
    """One spawned process that reads and merges for the coordinator's merger."""

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

    async def read_and_merge(self, topic: str, p: int, rows: Sequence[Row]
                             ) -> tuple[list[tuple[int, int]], MergedSegment]:
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
                loop.run_in_executor(self._pool(), _in_worker, topic, p, list(rows)),
                self.timeout_s)
        except BrokenProcessPool as exc:
            self._drop()
            raise StorageError(f"the merge worker process died ({exc}); the merge is "
                               "retried with a new one") from None
        except TimeoutError:
            self._drop(kill=True)
            raise StorageError(f"the merge worker did not answer in time ({self.timeout_s:g} s "
                               "for a merge); it was killed and the merge is retried with a "
                               "new one") from None

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
