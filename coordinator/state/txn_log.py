"""The coordinator's own log, ``__transaction_state-0``: durable, group-committed, fenced.

Each append is one new object named by its base offset (20 digits), holding one v2 batch of
LogRecords, written put-if-absent at the next offset. Losing that race means another
coordinator appended first: this process is fenced and must stop serving at once. Many
RPCs share one object (group commit); ``append`` resolves only once its object is durable.

A snapshot (``<next offset>.snapshot``, JSON of the whole state) is taken at the moment a
batch is popped for writing, so it covers exactly the records up to that batch's end, and is
written only after that batch is durable. Recovery loads the newest snapshot and replays the
objects after it. Old objects are deleted below the *previous* snapshot, but never a
takeover object: a fenced coordinator's next write always lands on or before the takeover
that fenced it, so keeping those objects keeps it fenced.

Deleting objects has a second consequence: put-if-absent succeeds on a *deleted* name. A
coordinator that was loading while the serving one wrote on, snapshotted twice and pruned,
would write its takeover at an offset that once held a record, and both would serve. So the
takeover (the first write of every ``TxnLog``) is checked once it is durable: if a snapshot
or a log object above it exists, the log had moved on past it and this coordinator is fenced.
That check is sound because an object is only deleted after a snapshot above it was written,
and the newest snapshot is never deleted.

**Lazy appends** (``append(records, lazy=True)``) are queued like any other but start no
write of their own: they ride in the next append that does, or are written once
``lazy_linger_s`` passes. A Spark batch write's one-shot id and its tasks' memberships and
reservations are appended this way and answered at once, so its tasks add no log objects:
they become durable in the append of the driver's EndTxn (its Prepare). That is safe because
the log is sequential (an eager append makes everything queued before it durable first),
every call that depends on a lazy record (a confirm, EndTxn) is eager, a confirm that names
a reservation the coordinator no longer knows is refused (``CoordinatorState.to_confirm``),
and a new coordinator never hands out a producer id of an earlier one's block (its takeover
record skips the rest of the block). A coordinator lost before a lazy record was durable
costs that write a retry (its task, or the job), never a record.

A *starting* coordinator that loses the race for its takeover offset has written nothing:
the serving one only wrote its last records (a CompleteCommit) while this one loaded. It
replays them and tries again at the new end (``TxnLog.take_over``); it is fenced only if
the log keeps moving or its view was pruned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from txnlog.log_format.codec.records import decode_batches, encode_batch
from txnlog.log_format.layout import (
    TRANSACTION_STATE_DIR,
    txn_state_log_path,
    txn_state_snapshot_path,
)
from txnlog.log_format.retry import RetriesExhausted, RetryPolicy, retry_async
from txnlog.log_format.storage import Storage, StorageError

from .. import faults
from ..errors import KafkaStorageError, NotCoordinatorError
from .txn_log_records import LogRecord, from_kafka_record, to_kafka_record

log = logging.getLogger("txnlog.coordinator.state.txn_log")

# A log write is retried a few times (same bytes, same name: put-if-absent is idempotent
# for us), then the process stops (TxnLog._fail): memory is ahead of the log by then.
# 5 attempts, waits 0.2, 0.4, 0.8, 1.6 s, no jitter (one writer, nothing to spread).
LOG_WRITE_RETRY = RetryPolicy(max_attempts=5, base_delay_s=0.2, max_delay_s=1.6, jitter=False)
# How often a starting coordinator replays what the serving one wrote meanwhile and tries
# again at the log's new end before it gives up as fenced (TxnLog.take_over).
TAKEOVER_ATTEMPTS = 10


class FencedError(NotCoordinatorError):
    """Another coordinator wrote our next log offset first."""


@dataclass
class Recovered:
    """What recovery found: the snapshot state (or None), records after it, next offset."""

    snapshot: dict[str, Any] | None
    records: list[LogRecord]
    next_offset: int
    snapshot_offsets: list[int] = field(default_factory=list)
    objects: int = 0  # log objects replayed after the snapshot
    seconds: float = 0.0  # how long reading them took


def recover(storage: Storage, fetch_threads: int = 32) -> Recovered:
    """Read the newest snapshot and every log object after it (blocking; run in a thread).

    The objects after the snapshot are fetched in parallel: on S3 one GET is a round trip
    of several ms, and replaying hundreds of objects one by one made a restart take
    seconds. They are decoded in offset order and must be contiguous.
    """
    t0 = time.monotonic()
    objects = storage.list(TRANSACTION_STATE_DIR)
    snaps = sorted(int(o.name[:20]) for o in objects if o.name.endswith(".snapshot"))
    bases = sorted(int(o.name[:20]) for o in objects if o.name.endswith(".log"))
    state = None
    start = 0
    if snaps:
        start = snaps[-1]
        state = json.loads(storage.get(txn_state_snapshot_path(start)))
    todo = [b for b in bases if b >= start]
    with ThreadPoolExecutor(max_workers=max(1, min(fetch_threads, len(todo)))) as pool:
        datas = list(pool.map(lambda b: storage.get(txn_state_log_path(b)), todo))
    records: list[LogRecord] = []
    offset = start
    for base, data in zip(todo, datas, strict=True):
        if base != offset:
            raise KafkaStorageError(
                f"{TRANSACTION_STATE_DIR} has a gap: expected an object at offset {offset}, "
                f"found {base}")
        offset = _decode_object(base, data, records)
    return Recovered(state, records, offset, snaps, objects=len(todo),
                     seconds=time.monotonic() - t0)


def _moved_on(ahead: str, base: int) -> FencedError:
    """The takeover at ``base`` reused a pruned offset: the log had moved on to ``ahead``."""
    return FencedError(
        f"fenced: {TRANSACTION_STATE_DIR} had moved on to {ahead} while this coordinator was "
        f"loading (its takeover at offset {base} reused a pruned offset); another "
        "coordinator is serving")


def _decode_object(base: int, data: bytes, into: list[LogRecord]) -> int:
    """Append the records of the log object at ``base`` to ``into``; the offset after it."""
    offset = base
    for batch in decode_batches(data, source=txn_state_log_path(base)):
        into.extend(from_kafka_record(r) for r in batch.records)
        offset = batch.header.next_offset
    return offset


class TxnLog:
    """Group-committed appends to ``__transaction_state-0`` from one asyncio loop."""

    def __init__(self, storage: Storage, next_offset: int, *,
                 snapshot_fn: Callable[[], dict[str, Any]],
                 protected_fn: Callable[[], list[int]],
                 on_fatal: Callable[[BaseException], None],
                 snapshot_offsets: list[int] | None = None,
                 max_batch_records: int = 5000,
                 snapshot_every_records: int = 20_000,
                 snapshot_every_objects: int = 50,
                 snapshot_every_s: float = 5.0,
                 replayed: tuple[int, int] = (0, 0),
                 snapshot_after_replay: int = 8,
                 lazy_linger_s: float = 5.0) -> None:
        """``replayed``: (records, objects) recovery read after the newest snapshot. They
        count towards the next snapshot, and when at least ``snapshot_after_replay`` objects
        were replayed the first write (the takeover) is snapshotted at once: a coordinator
        restarted again soon (a crash loop, the chaos harness's kills) must not replay the
        same objects again, and each restart would otherwise replay more."""
        self.storage = storage
        self.next_offset = next_offset
        self._snapshot_fn = snapshot_fn
        self._protected_fn = protected_fn
        self._on_fatal = on_fatal
        self._snapshots = list(snapshot_offsets or [])
        self.max_batch_records = max_batch_records
        self.snapshot_every_records = snapshot_every_records
        self.snapshot_every_objects = snapshot_every_objects
        self.snapshot_every_s = snapshot_every_s
        self.lazy_linger_s = lazy_linger_s
        self._lazy_timer: asyncio.TimerHandle | None = None
        self._pending: list[tuple[LogRecord, asyncio.Future[None] | None]] = []
        self._before_write: list[Callable[[], None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_future: asyncio.Future[None] | None = None
        self._since_snapshot = replayed[0]
        self._objects_since_snapshot = replayed[1]
        # A big state makes each snapshot costly (serialized on the event loop): at least
        # one log object per 8 KiB of the last snapshot between two of them (per 64 KiB
        # for the timer).
        self._snapshot_bytes = 0
        self._snapshot_now = snapshot_after_replay > 0 and replayed[1] >= snapshot_after_replay
        self._last_snapshot_t = time.monotonic()
        self._snapshot_task: asyncio.Task[None] | None = None
        self._takeover_checked = False  # the first write is the takeover (see module doc)
        self.failed: BaseException | None = None
        self.objects_written = 0
        self.records_written = 0
        self.storage_errors = 0
        # One write is in flight at a time; its own thread means it never waits in a queue
        # behind marker puts (the coordinator's pool), so the group-commit cycle stays short.
        self._writer_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="txn-log")
        self._snapshot_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="txn-log-snap")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="txn-log")
        self._task.add_done_callback(self._writer_ended)

    def _writer_ended(self, task: asyncio.Task[None]) -> None:
        """The writer task only ends when cancelled (close/halt); ending any other way (an
        exception nobody foresaw) would leave every later append waiting forever, so it
        stops the process instead (the next coordinator recovers from the log)."""
        if task.cancelled() or self.failed is not None:
            return
        exc = task.exception() or RuntimeError("the coordinator log writer ended")
        log.critical("the coordinator log writer failed: %r", exc)
        self._fail(exc, [])

    def append(self, records: list[LogRecord], lazy: bool = False) -> asyncio.Future[None]:
        """Queue records (already applied by the caller); the future resolves when durable.

        ``lazy``: start no write for them; they go out with the next eager append, or after
        ``lazy_linger_s`` at the latest (see the module doc for when that is safe)."""
        if self.failed is not None:
            raise NotCoordinatorError(f"this coordinator stopped: {self.failed}")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        for i, rec in enumerate(records):
            self._pending.append((rec, fut if i == len(records) - 1 else None))
        if not records:
            fut.set_result(None)
        else:
            self._last_future = fut
        if not lazy:
            self._wake.set()
        elif records and self._lazy_timer is None:
            self._lazy_timer = loop.call_later(self.lazy_linger_s, self._linger_over)
        return fut

    def _linger_over(self) -> None:
        self._lazy_timer = None
        self._wake.set()

    def before_next_write(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (once, synchronously) just before the next object is cut.

        What a hook appends goes into that object. The completion path uses this to plan the commits
        that arrived while the previous write was in flight all at once, so their markers
        get consecutive offsets and share objects (see completion.Completer._seal_commits).
        """
        if self.failed is not None:
            raise NotCoordinatorError(f"this coordinator stopped: {self.failed}")
        self._before_write.append(hook)
        self._wake.set()

    def _run_hooks(self) -> None:
        hooks, self._before_write = self._before_write, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # a hook fails its own callers; the log goes on
                log.exception("before-write hook failed")

    async def sync(self) -> None:
        """Wait until everything appended so far is durable (for answers without changes);
        lazy records queued so far are written now."""
        fut = self._last_future
        if fut is not None and not fut.done():
            self._wake.set()
            await asyncio.shield(fut)
        elif fut is not None and fut.exception() is not None:
            raise fut.exception()  # type: ignore[misc]

    async def close(self) -> None:
        """Finish writing what is queued (graceful shutdown), then stop."""
        await self.sync()
        if self._snapshot_task is not None:
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._writer_io.shutdown(wait=False)
        self._snapshot_io.shutdown(wait=False)

    async def halt(self) -> None:
        """Stop the writer at once, with no graceful step: what SIGKILL leaves behind (what
        is durable stays; nothing queued is written). For tests that stand in for a crash."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._lazy_timer is not None:  # everything queued goes out now
                self._lazy_timer.cancel()
                self._lazy_timer = None
            while self.failed is None:
                self._run_hooks()
                if not self._pending:
                    break
                await self._write_one()

    def _snapshot_due(self) -> bool:
        """Whichever comes first: records, objects (what a replay on S3 pays for: one GET
        each) or seconds of activity since the last snapshot, or a long replay at start."""
        return (self._snapshot_now
                or self._since_snapshot >= self.snapshot_every_records
                or self._objects_since_snapshot >= max(self.snapshot_every_objects,
                                                       self._snapshot_bytes // 8192)
                or (self._since_snapshot > 0
                    and self._objects_since_snapshot >= self._snapshot_bytes // 65536
                    and time.monotonic() - self._last_snapshot_t >= self.snapshot_every_s))

    async def _write_one(self) -> None:
        snapshot = None
        if self._snapshot_due() and (self._snapshot_task is None or self._snapshot_task.done()):
            # Take everything pending: the state now equals durable + this batch.
            batch, self._pending = self._pending, []
            # Serialized now: the dict shares live lists/dicts with the state, which later
            # records would change before the write (the snapshot must equal this offset).
            snapshot = json.dumps(self._snapshot_fn(), separators=(",", ":")).encode()
        else:
            # Never split one append over two objects: a group of commits prepared (and
            # completed) in one append must be durable all or none (Completer._seal_commits).
            n = min(len(self._pending), self.max_batch_records)
            while n < len(self._pending) and self._pending[n - 1][1] is None:
                n += 1
            batch = self._pending[:n]
            del self._pending[:n]
        base = self.next_offset
        now = int(time.time() * 1000)
        try:
            # Encoding is inside the try: a record that cannot be encoded (request_limits
            # keeps them out, but a bug must not wedge the log) fails the process at once.
            data = encode_batch([to_kafka_record(r, now) for r, _ in batch],
                                base_offset=base, now_ms=now)
            ok = await self._put(txn_state_log_path(base), data)
        except BaseException as exc:
            self._fail(exc, batch)
            if isinstance(exc, asyncio.CancelledError):
                raise  # the writer task is being stopped: let it end
            return
        if not ok:
            exc = FencedError(
                f"fenced: another coordinator wrote {TRANSACTION_STATE_DIR} offset {base} "
                "first; "
                "this coordinator stops serving")
            log.critical("%s", exc)
            self._fail(exc, batch)
            return
        if not self._takeover_checked:
            try:
                ahead = await asyncio.get_running_loop().run_in_executor(
                    self._writer_io, self._log_ahead_of, base)
            except BaseException as exc:
                self._fail(exc, batch)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            if ahead is not None:
                exc = _moved_on(ahead, base)
                log.critical("%s", exc)
                self._fail(exc, batch)
                return
            self._takeover_checked = True
        faults.point("after_log_write")
        self.objects_written += 1
        self.records_written += len(batch)
        self.next_offset = base + len(batch)
        self._since_snapshot += len(batch)
        self._objects_since_snapshot += 1
        for _, fut in batch:
            if fut is not None and not fut.done():
                fut.set_result(None)
        if snapshot is not None:
            self._start_snapshot(snapshot)

    def _start_snapshot(self, snapshot: bytes) -> None:
        """Write ``snapshot`` (the state at ``next_offset``) in the background; the counts
        towards the next one start again."""
        self._since_snapshot = 0
        self._objects_since_snapshot = 0
        self._snapshot_now = False
        self._snapshot_bytes = len(snapshot)
        self._last_snapshot_t = time.monotonic()
        self._snapshot_task = asyncio.get_running_loop().create_task(
            self._write_snapshot(self.next_offset, snapshot))

    async def _put(self, path: str, data: bytes) -> bool:
        """put-if-absent with extra retries around storage errors (same bytes, same name);
        the last StorageError propagates once LOG_WRITE_RETRY gives up."""
        def put() -> asyncio.Future[bool]:
            return asyncio.get_running_loop().run_in_executor(
                self._writer_io, self.storage.put_if_absent, path, data)

        def failed(attempt: int, exc: BaseException, _wait: float) -> None:
            self.storage_errors += 1
            log.warning("log write %s failed (attempt %d): %s", path, attempt, exc)

        try:
            return await retry_async(put, LOG_WRITE_RETRY, StorageError, failed)
        except RetriesExhausted as exc:
            self.storage_errors += 1
            log.warning("log write %s failed (attempt %d): %s", path, exc.attempts, exc.last)
            raise exc.last from None

    async def take_over(self, make_record: Callable[[int], LogRecord],
                        catch_up: Callable[[list[LogRecord]], None],
                        apply: Callable[[LogRecord], None],
                        attempts: int = TAKEOVER_ATTEMPTS) -> LogRecord:
        """Append the takeover record at the log's end, the first write of this log.

        A coordinator started while another still serves can lose the race for the end of
        the log to the serving one's last writes (its CompleteCommit, a merge record): that
        says nothing about who should serve, since this process has written nothing yet.
        So a lost race reads what the other wrote (``catch_up`` applies it to the state),
        and tries again at the new end (``make_record(offset)`` builds the record for it).
        Only when the log keeps moving for ``attempts`` tries, or moved on so far that the
        objects after this process's view were pruned, is this process the one fenced.

        Once written, the takeover is checked (see the module doc), applied (``apply``), and
        snapshotted at once after a long replay. Before writing, nothing is applied: a lost
        attempt leaves the state as the log has it.
        """
        assert self._task is None, "take_over is the first write, before start()"
        loop = asyncio.get_running_loop()
        for _attempt in range(attempts):
            base = self.next_offset
            rec = make_record(base)
            now = int(time.time() * 1000)
            data = encode_batch([to_kafka_record(rec, now)], base_offset=base, now_ms=now)
            try:
                ok = await self._put(txn_state_log_path(base), data)
                if not ok:
                    newer, end = await loop.run_in_executor(self._writer_io,
                                                            self._read_from, base)
                    log.warning("%s offset %d was written by the serving coordinator while "
                                "this one loaded; replaying %d records up to offset %d and "
                                "taking over there", TRANSACTION_STATE_DIR, base, len(newer),
                                end)
                    catch_up(newer)
                    self.next_offset = end
                    self._since_snapshot += len(newer)
                    continue
                ahead = await loop.run_in_executor(self._writer_io, self._log_ahead_of, base)
            except NotCoordinatorError as exc:
                log.critical("%s", exc)
                self._fail(exc, [])
                raise
            except BaseException as exc:
                self._fail(exc, [])
                raise NotCoordinatorError(f"coordinator log write failed, stopping: {exc}") \
                    from exc
            if ahead is not None:
                exc = _moved_on(ahead, base)
                log.critical("%s", exc)
                self._fail(exc, [])
                raise exc
            self._takeover_checked = True
            faults.point("after_log_write")
            apply(rec)
            self.objects_written += 1
            self.records_written += 1
            self.next_offset = base + 1
            self._since_snapshot += 1
            self._objects_since_snapshot += 1
            if self._snapshot_now:
                self._start_snapshot(
                    json.dumps(self._snapshot_fn(), separators=(",", ":")).encode())
            return rec
        exc = FencedError(
            f"fenced: {TRANSACTION_STATE_DIR} moved on at each of {attempts} takeover "
            "attempts; another coordinator is serving and writing")
        log.critical("%s", exc)
        self._fail(exc, [])
        raise exc

    def _read_from(self, base: int) -> tuple[list[LogRecord], int]:
        """The records of the log objects from ``base`` on, and the offset after them
        (blocking). Objects pruned there mean the log moved on past two snapshots since
        this process loaded: it is too far behind to catch up, and is fenced."""
        bases = sorted(int(o.name[:20]) for o in self.storage.list(TRANSACTION_STATE_DIR)
                       if o.name.endswith(".log") and int(o.name[:20]) >= base)
        records: list[LogRecord] = []
        offset = base
        for b in bases:
            if b != offset:
                break
            offset = _decode_object(b, self.storage.get(txn_state_log_path(b)), records)
        if offset == base:
            raise FencedError(
                f"fenced: {TRANSACTION_STATE_DIR} offset {base} was written and pruned "
                "while this coordinator loaded; another coordinator is serving")
        return records, offset

    def _log_ahead_of(self, base: int) -> str | None:
        """The name of a snapshot or log object above ``base``, if any (blocking)."""
        for obj in self.storage.list(TRANSACTION_STATE_DIR):
            offset = int(obj.name[:20])
            if offset > base and obj.name.endswith((".snapshot", ".log")):
                return obj.name
        return None

    def stop_fatally(self, exc: BaseException) -> None:
        """Another part of the coordinator cannot continue (e.g. the stable publisher gave
        up): fail every queued append and stop the process, as a failed log write does."""
        if self.failed is None:
            self._fail(exc, [])

    def _fail(self, exc: BaseException, batch: list[tuple[LogRecord, Any]]) -> None:
        """State in memory is now ahead of the log: fail everyone and stop the process."""
        self.failed = exc
        err = exc if isinstance(exc, NotCoordinatorError) else NotCoordinatorError(
            f"coordinator log write failed, stopping: {exc}")
        for _, fut in batch + self._pending:
            if fut is not None and not fut.done():
                fut.set_exception(err)
                fut.exception()  # mark retrieved; callers may be gone
        self._pending = []
        self._run_hooks()  # their appends now fail, which fails their callers
        self._on_fatal(exc)

    async def _write_snapshot(self, offset: int, data: bytes) -> None:
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._snapshot_io, self.storage.put_if_absent,
                                       txn_state_snapshot_path(offset), data)
            log.info("snapshot at %s offset %d (%d bytes)", TRANSACTION_STATE_DIR, offset,
                     len(data))
            faults.point("mid_snapshot")
            self._snapshots.append(offset)
            await loop.run_in_executor(self._snapshot_io, self._prune)
        except Exception as exc:  # a missed snapshot only costs recovery time
            self.storage_errors += 1
            log.warning("snapshot at offset %d failed: %s", offset, exc)

    def _prune(self) -> None:
        """Delete log objects and snapshots below the previous snapshot (not takeovers)."""
        if len(self._snapshots) < 2:
            return
        keep_from = self._snapshots[-2]
        protected = set(self._protected_fn())
        doomed = [f"{TRANSACTION_STATE_DIR}/{obj.name}"
                  for obj in self.storage.list(TRANSACTION_STATE_DIR)
                  if int(obj.name[:20]) < keep_from
                  and not (obj.name.endswith(".log") and int(obj.name[:20]) in protected)]
        self.storage.delete_many(doomed)
        self._snapshots = [s for s in self._snapshots if s >= keep_from]
