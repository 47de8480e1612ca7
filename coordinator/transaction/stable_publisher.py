"""Publishing what readers may trust: every partition's HW and LSO, in heads over bases.

Kafka's leaders advance the high watermark as followers replicate, and the LSO with it; here
the coordinator knows both (``partition_state.visible_offsets``) and publishes them as one
head object per snapshot (``log_format/stable.py``), which readers list to find the newest.
Requests coalesce: everyone who asks while a head is being written is answered by the next
one, so one object serves any number of commits that completed meanwhile.

What a commit costs does not grow with the root. A head is a cumulative delta
over a base holding every partition: the publisher recomputes only the partitions records
changed since its last head (``stable_changes.ChangeJournal``), and the head carries every
partition changed since its base. When that grows past ``rebase_at`` partitions, a new base
(the state the newest head published) is written in the background, off the commit path;
once it is durable, the next heads stand on it. The first head of a coordinator stands on a
base it writes first (at takeover), never on its predecessor's: a fenced predecessor may
still prune its own bases.

This is also where the bookkeeping behind the view is released: completed transactions that
no longer hold an LSO back and the predecessor's floor once this coordinator's own values
have caught up. Releasing changes no view, so read-only callers use ``view()``, which
changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from txnlog.log_format import planted_bugs, stable
from txnlog.log_format.retry import RetriesExhausted, RetryPolicy, retry_async
from txnlog.log_format.storage import StorageError

from ..errors import KafkaStorageError
from ..state.coordinator_state import CoordinatorState
from ..state.partition_state import Offsets, PartitionOffset, Visibility, visible_offsets
from ..state.runtime import Observer, StorageIO
from .stable_changes import ChangeJournal

log = logging.getLogger("txnlog.coordinator.transaction.stable_publisher")

# A snapshot is retried for a long time (1000 attempts, waits 0.1 s doubling up to 5 s): the
# commits waiting for it cannot be answered before it is out. No jitter: one writer.
STABLE_RETRY = RetryPolicy(max_attempts=1000, base_delay_s=0.1, max_delay_s=5.0, jitter=False)
PRUNE_EVERY = 20  # snapshots between two prunes of old ones
# Partitions in the cumulative delta below which no base is written. TXNLOG_STABLE_REBASE_MIN
# lowers it so the chaos harness switches bases all the time on its small roots (at 256,
# they would only ever have the base each coordinator writes at takeover).
REBASE_MIN = int(os.environ.get("TXNLOG_STABLE_REBASE_MIN", "256"))
REBASE_FRACTION = 16  # ... or this fraction of the root's partitions, if more
T = TypeVar("T")


class StablePublisher:
    """Writes stable heads on request, one at a time, on its own thread; bases on another."""

    def __init__(self, io: StorageIO, state: CoordinatorState, observer: Observer,
                 keep: int = 10) -> None:
        self.io = io
        self.storage = io.storage
        self.state = state
        self.observer = observer
        self.keep = keep
        self.seq = 0
        self.written: stable.StableSnapshot | None = None
        # (HW, LSO) per partition of the newest stable snapshot at takeover, until this
        # coordinator's own values reach them (partition_state._apply_predecessor_floor).
        self.predecessor_floor: Offsets = {}
        # The runs the predecessor's newest head published (read at start: ``adoptable``).
        self.predecessor_tails: dict[str, tuple[stable.TailEntry, ...]] = {}
        self.journal = ChangeJournal()
        self.journal.attach(state)
        # The base heads stand on, what it holds, and what changed since (every head's
        # state is base_parts overlaid with since_base).
        self.base: stable.BaseRef | None = None
        self.base_parts: Offsets = {}
        self.since_base: Offsets = {}
        # The same for tails (runs in shared objects above M): the base's, and every
        # partition's tail as the newest head shows it where it changed since the base.
        self.base_tails: dict[str, tuple[stable.TailEntry, ...]] = {}
        self.since_tails: dict[str, tuple[stable.TailEntry, ...]] = {}
        # A base being written: the head seq whose state it holds, and what changed after
        # that head (the next since_base once the base is durable).
        self._next_base: tuple[int, Offsets] | None = None
        self._base_task: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[int]] = []
        self._in_flight: list[asyncio.Future[int]] = []  # waiting on the head being written
        # Set when publishing failed for good; ``on_fatal`` (the coordinator wires it to
        # the log's fatal path, which stops the process) is told once.
        self.failed: BaseException | None = None
        self.on_fatal: Callable[[BaseException], None] | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._prune_task: asyncio.Task[Any] | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coord-stable")
        self._base_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coord-base")

    def rebase_at(self) -> int:
        """Partitions in the cumulative delta past which a new base is written: a fraction
        of the root (a base costs the root; written once per that many changed partitions,
        it costs each at most REBASE_FRACTION entries), and never below REBASE_MIN (a small
        root is not rebased on every head)."""
        return max(REBASE_MIN, len(self.base_parts) // REBASE_FRACTION)

    def visibility(self, only: Iterable[str] | None = None) -> Visibility:
        """The view and what it still needs, computed from the state (changes nothing);
        ``only``: just those partitions (the rest are as last published)."""
        st = self.state
        return visible_offsets(st.topics, st.partitions, st.unreplicated,
                               self.predecessor_floor, only)

    def view(self) -> Offsets:
        """Every partition's (HW, LSO) as readers may trust them now. Read-only."""
        return self.visibility().offsets

    def publishable(self, only: Iterable[str] | None = None) -> Offsets:
        """The view to publish (of ``only``, or every partition), releasing what no longer
        holds it back (same view)."""
        vis = self.visibility(only)
        self.state.release_unreplicated(vis.unreplicated)
        self.predecessor_floor = vis.predecessor_floor
        return vis.offsets

    def current_tail(self, key: str) -> tuple[stable.TailEntry, ...]:
        """The partition's tail as the newest head publishes it."""
        v = self.since_tails.get(key)
        return v if v is not None else self.base_tails.get(key, stable.NO_TAIL)

    def _tail_changes(self, only: set[str] | None) -> dict[str, tuple[stable.TailEntry, ...]]:
        """Partitions whose tail in the state differs from the newest head's."""
        shared = self.state.shared
        keys = (only if only is not None
                else set(shared.tails) | set(self.since_tails) | set(self.base_tails))
        out = {}
        for k in keys:
            now = tuple(shared.tail(k))
            if now != self.current_tail(k):
                out[k] = now
        return out

    def current(self, key: str) -> tuple[int, int] | None:
        """What the newest head publishes for a partition (None: not in it)."""
        v = self.since_base.get(key)
        return v if v is not None else self.base_parts.get(key)

    async def start(self) -> None:
        """Read the predecessor's newest snapshot (its floor, the runs it published) and
        start the writer."""
        prev = await self.io.run(stable.read_latest_stable, self.storage)
        if prev is not None:
            self.predecessor_floor = dict(prev.partitions)
            self.predecessor_tails = {k: tuple(v) for k, v in prev.tails.items() if v}
        self.journal.mark_everything()
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stable")

    def adoptable(self) -> dict[int, list[list[Any]]]:
        """Confirm rows, by producer, for runs the predecessor published whose confirm the
        log does not hold: a head may be written while a confirm's record is still in flight
        (a confirm follows a successful write, so the run is true in storage), and a
        coordinator that died before the record was durable must not take the run back
        (readers saw it). What is not reserved and unconfirmed any more is left alone."""
        out: dict[int, list[list[Any]]] = {}
        for key, entries in self.predecessor_tails.items():
            topic, _, p = key.rpartition("-")
            for e in entries:
                res = self.state.reservations.get(PartitionOffset(topic, int(p), e.base))
                if res is not None and not res.confirmed and res.base + res.count == e.end:
                    out.setdefault(res.pid, []).append(
                        [topic, int(p), e.base, e.end, e.path, e.position, e.size])
        self.predecessor_tails = {}
        return out

    def request(self) -> asyncio.Future[int]:
        """A future that resolves once a stable snapshot taken after now is written."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.failed is not None:  # nothing will ever publish again: say so at once
            fut.set_exception(self._failure())
            return fut
        self._waiters.append(fut)
        assert self._wake is not None
        self._wake.set()
        return fut

    async def _run(self) -> None:
        """Publish until cancelled. If publishing fails for good (storage refused every
        retry, or a head/base name holds other bytes), no commit can ever be answered
        again: fail every waiter and stop the process through ``on_fatal`` — a restarted
        (or standby) coordinator recovers — instead of leaving callers waiting forever."""
        try:
            await self._serve()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed = exc
            log.critical("stable snapshots cannot be published, the coordinator stops: %s",
                         exc)
            for w in self._in_flight + self._waiters:
                if not w.done():
                    w.set_exception(self._failure())
                    w.exception()  # mark retrieved: the caller may be gone
            self._in_flight, self._waiters = [], []
            if self.on_fatal is not None:
                self.on_fatal(exc)

    def _failure(self) -> KafkaStorageError:
        return KafkaStorageError(f"stable snapshots cannot be published: {self.failed}")

    async def _serve(self) -> None:
        assert self._wake is not None
        written = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._waiters:
                continue
            self._in_flight, self._waiters = self._waiters, []
            self.seq += 1
            snap = await self._publish(self.seq)
            self.written = snap
            waiters, self._in_flight = self._in_flight, []
            for w in waiters:
                if not w.done():
                    w.set_result(snap.seq)
            self.observer.object_written("stable")
            written += 1
            if self._next_base is None and len(self.since_base) > self.rebase_at():
                self._start_rebase(snap.seq)
            if written % PRUNE_EVERY == 0 and (self._prune_task is None
                                               or self._prune_task.done()):
                # In the background: a LIST + DELETEs must not delay the next snapshot.
                self._prune_task = asyncio.get_running_loop().create_task(self._prune())

    async def _publish(self, seq: int) -> stable.StableSnapshot:
        """Recompute what changed, write head ``seq`` (after a first base if there is none
        yet) and return the state it publishes."""
        epoch = self.state.coordinator_epoch
        only = self.journal.drain()
        view = self.publishable(only)
        changes = {k: v for k, v in view.items() if self.current(k) != v}
        tail_changes = self._tail_changes(only)
        for k in tail_changes:  # a delta names a partition whose tail moved, with its offsets
            if k not in changes:
                v = view.get(k) or self.current(k)
                changes[k] = v if v is not None else (0, 0)
        if self.base is None:  # the first head of this coordinator: a base of its own
            parts = {**self.base_parts, **self.since_base, **changes}
            tails = {k: v for k, v in {**self.base_tails, **self.since_tails,
                                       **tail_changes}.items() if v}
            data = stable.encode_base(epoch, seq, parts, tails=tails)
            ref = await self._write(stable.stable_base_path(epoch, seq), self._io,
                                    stable.write_base, self.storage, epoch, seq, data)
            if ref is None:
                raise KafkaStorageError(f"stable base {epoch}-{seq} holds other bytes")
            self.base, self.base_parts, self.since_base = ref, parts, {}
            self.base_tails, self.since_tails = tails, {}
            self.observer.object_written("stable_base")
        else:
            self.since_base.update(changes)
            self.since_tails.update(tail_changes)
            if self._next_base is not None:
                self._next_base[1].update(changes)
        shown = self._omit_planted(changes)
        base, base_parts = self.base, self.base_parts  # a rebase may land during the write
        base_tails = self.base_tails
        shown_tails = {k: t for k in shown if (t := self.current_tail(k))}
        data = stable.encode_delta(epoch, seq, base, shown, tails=shown_tails)
        ok = await self._write(stable.stable_path(epoch, seq), self._io,
                               stable.write_delta, self.storage, epoch, seq, data)
        if not ok:
            log.critical("stable head %s holds other bytes", stable.stable_path(epoch, seq))
        return stable.StableSnapshot(
            epoch, seq, stable.Overlay(base_parts, shown), int(time.time() * 1000),
            tails=stable.TailOverlay(base_tails, shown, shown_tails))

    def _omit_planted(self, changes: Offsets) -> Offsets:
        """``since_base`` as the head shows it; the planted bug ``delta_omits_partition``
        leaves out one partition this head changed (it shows the value before), so a
        transaction across partitions is torn for a head (tests/chaos/test_planted.py)."""
        shown = dict(self.since_base)
        in_delta = [k for k in changes if k in shown]
        if len(in_delta) < 2 or not planted_bugs.enabled("delta_omits_partition"):
            return shown
        key = max(in_delta)
        before = self.written.partitions.get(key) if self.written is not None else None
        if before is None:
            del shown[key]
        else:
            shown[key] = before
        return shown

    def _start_rebase(self, seq: int) -> None:
        """Write a base holding head ``seq``'s state, in the background; heads keep standing
        on the current base (and collect what changes meanwhile) until it is durable."""
        since = dict(self.since_base)
        since_tails = dict(self.since_tails)
        self._next_base = (seq, {})
        self._base_task = asyncio.get_running_loop().create_task(
            self._rebase(seq, self.base_parts, since, self.base_tails, since_tails),
            name="stable-base")

    async def _rebase(self, seq: int, base_parts: Offsets, since: Offsets,
                      base_tails: dict[str, tuple[stable.TailEntry, ...]],
                      since_tails: dict[str, tuple[stable.TailEntry, ...]]) -> None:
        epoch = self.state.coordinator_epoch

        def build() -> tuple[Offsets, dict[str, tuple[stable.TailEntry, ...]], bytes]:
            # the root's size of work: off the loop
            parts = {**base_parts, **since}
            tails = {k: v for k, v in {**base_tails, **since_tails}.items() if v}
            return parts, tails, stable.encode_base(epoch, seq, parts, tails=tails)

        try:
            parts, tails, data = await asyncio.get_running_loop().run_in_executor(
                self._base_io, build)
            ref = await self._write(stable.stable_base_path(epoch, seq), self._base_io,
                                    stable.write_base, self.storage, epoch, seq, data)
        except BaseException:
            self._next_base = None
            raise
        pending, self._next_base = self._next_base, None
        if ref is None:
            log.critical("stable base %s holds other bytes; heads stay on %s",
                         stable.stable_base_path(epoch, seq), self.base)
            return
        assert pending is not None
        # Between two heads (this runs on the loop): the next head stands on the new base
        # and carries only what changed after head ``seq``.
        # what changed after head ``seq`` keeps its newest tail; the rest is in the base now
        newest = {k: self.current_tail(k) for k in pending[1]}
        self.base, self.base_parts, self.since_base = ref, parts, pending[1]
        self.base_tails, self.since_tails = tails, newest
        self.observer.object_written("stable_base")

    async def _write(self, path: str, pool: ThreadPoolExecutor,
                     fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on ``pool``, retrying storage errors (STABLE_RETRY); when it gives
        up, the RetriesExhausted ends the publisher (nothing more can be answered)."""
        def put() -> asyncio.Future[T]:
            return asyncio.get_running_loop().run_in_executor(pool, fn, *args)

        def failed(attempt: int, exc: BaseException, _wait: float) -> None:
            self.observer.storage_error()
            log.warning("stable object %s failed (attempt %d): %s", path, attempt, exc)

        try:
            return await retry_async(put, STABLE_RETRY, StorageError, failed)
        except RetriesExhausted as exc:
            failed(exc.attempts, exc.last, 0.0)
            raise

    async def _prune(self) -> None:
        with contextlib.suppress(StorageError):
            await self.io.run(stable.prune_stable, self.storage, self.keep)

    async def stop(self) -> None:
        """Stop writing (what was requested and not yet written is not answered); a prune
        or base under way finishes."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for task in (self._prune_task, self._base_task):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        self._io.shutdown(wait=False)
        self._base_io.shutdown(wait=False)

    async def halt(self) -> None:
        """Cancel the writers at once (a crash, for tests)."""
        for task in (self._task, self._base_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
