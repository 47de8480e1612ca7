"""Publishing what readers may trust: stable snapshots of every partition's HW and LSO.

Kafka's leaders advance the high watermark as followers replicate, and the LSO with it; here
the coordinator knows both (``partition_state.visible_offsets``) and publishes them as one
object per snapshot (``log_format/stable.py``), which readers list to find the newest.
Requests coalesce: everyone who asks while a snapshot is being written is answered by the
next one, so one object serves any number of commits that completed meanwhile.

This is also where the bookkeeping behind the view is released: completed transactions that
no longer hold an LSO back and the predecessor's floor once this coordinator's own values
have caught up. Releasing changes no view, so read-only callers use ``view()``, which
changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from txnlog.log_format import stable
from txnlog.log_format.retry import RetriesExhausted, RetryPolicy, retry_async
from txnlog.log_format.storage import StorageError

from .partition_state import Offsets, Visibility, visible_offsets
from .runtime import Observer, StorageIO
from .state import CoordinatorState

log = logging.getLogger("txnlog.coordinator.stable_publisher")

# A snapshot is retried for a long time (1000 attempts, waits 0.1 s doubling up to 5 s): the
# commits waiting for it cannot be answered before it is out. No jitter: one writer.
STABLE_RETRY = RetryPolicy(max_attempts=1000, base_delay_s=0.1, max_delay_s=5.0, jitter=False)
PRUNE_EVERY = 20  # snapshots between two prunes of old ones


class StablePublisher:
    """Writes stable snapshots on request, one at a time, on its own thread."""

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
        self._waiters: list[asyncio.Future[int]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._prune_task: asyncio.Task[Any] | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coord-stable")

    def visibility(self) -> Visibility:
        """The view and what it still needs, computed from the state (changes nothing)."""
        st = self.state
        return visible_offsets(st.topics, st.partitions, st.unreplicated,
                               self.predecessor_floor)

    def view(self) -> Offsets:
        """Every partition's (HW, LSO) as readers may trust them now. Read-only."""
        return self.visibility().offsets

    def publishable(self) -> Offsets:
        """The view to publish, releasing what no longer holds it back (same view)."""
        vis = self.visibility()
        self.state.release_unreplicated(vis.unreplicated)
        self.predecessor_floor = vis.predecessor_floor
        return vis.offsets

    async def start(self) -> None:
        """Read the predecessor's newest snapshot (its floor) and start the writer."""
        prev = await self.io.run(stable.read_latest_stable, self.storage)
        if prev is not None:
            self.predecessor_floor = dict(prev.partitions)
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stable")

    def request(self) -> asyncio.Future[int]:
        """A future that resolves once a stable snapshot taken after now is written."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        assert self._wake is not None
        self._wake.set()
        return fut

    async def _run(self) -> None:
        assert self._wake is not None
        written = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._waiters:
                continue
            waiters, self._waiters = self._waiters, []
            self.seq += 1
            snap = stable.make_snapshot(self.state.coordinator_epoch, self.seq,
                                        self.publishable())
            ok = await self._write(snap)
            if not ok:
                log.critical("stable snapshot %s holds other bytes", snap.path)
            self.written = snap
            for w in waiters:
                if not w.done():
                    w.set_result(snap.seq)
            self.observer.object_written("stable")
            written += 1
            if written % PRUNE_EVERY == 0 and (self._prune_task is None
                                               or self._prune_task.done()):
                # In the background: a LIST + DELETEs must not delay the next snapshot.
                self._prune_task = asyncio.get_running_loop().create_task(self._prune())

    async def _write(self, snap: stable.StableSnapshot) -> bool:
        """Write ``snap``, retrying storage errors (STABLE_RETRY); when it gives up, the
        RetriesExhausted ends the publisher (nothing more can be answered)."""
        def put() -> asyncio.Future[bool]:
            return asyncio.get_running_loop().run_in_executor(
                self._io, stable.write_stable, self.storage, snap)

        def failed(attempt: int, exc: BaseException, _wait: float) -> None:
            self.observer.storage_error()
            log.warning("stable snapshot %s failed (attempt %d): %s", snap.path, attempt, exc)

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
        under way finishes."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._prune_task is not None:
            await asyncio.gather(self._prune_task, return_exceptions=True)
        self._io.shutdown(wait=False)

    async def halt(self) -> None:
        """Cancel the writer at once (a crash, for tests)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
