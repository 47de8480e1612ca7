"""What the coordinator does when nobody asks: timeouts, expiry, stale reservations.

Kafka splits this between TransactionCoordinator (``abortTimedOutTransactions``) and
TransactionStateManager (``enableTransactionalIdExpiration``, ``timedOutTransactions``).
Here one timer, every 0.2 s:

- aborts an Ongoing transaction with no heartbeat for its ``transaction.timeout.ms`` (with an
  epoch bump, through the Completer; a transaction in Prepare* is never aborted);
- drops a one-shot transactional id (a batch write's own) ``one_shot_retention_ms`` after its
  transaction was decided — long enough for any retried EndTxn to get the same answer — and
  an idle reusable id after Kafka's ``transactional.id.expiration.ms``, each by a tombstone
  record, so replay drops them too;
- closes idempotent reservations never confirmed (a 0-byte fence object at their offset),
  so the HW can move past them.

Every change goes through ``Commits.commit`` like any request's, so replay equals live.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from txnlog.log_format import layout
from txnlog.log_format.planted_bugs import enabled as unsafe

from ..errors import CoordinatorError
from ..state.coordinator_state import CoordinatorState
from ..state.partition_state import Reservation
from ..state.runtime import Commits, StorageIO, spawn
from ..state.states import TxnState
from ..state.txn_log_records import LogRecord
from ..state.txn_metadata import Txn, now_ms
from .completion import Completer

log = logging.getLogger("txnlog.coordinator.transaction.timers")

TICK_S = 0.2


class TransactionTimers:
    """The coordinator's timer: ``check()`` once per tick while ``start()``ed."""

    def __init__(self, state: CoordinatorState, commits: Commits, completer: Completer,
                 io: StorageIO, request_stable: Callable[[], Awaitable[int]], *,
                 expiration_ms: int, one_shot_retention_ms: int,
                 reservation_timeout_ms: int) -> None:
        if one_shot_retention_ms < 0:
            raise ValueError("one_shot_id_retention_ms must be >= 0, got "
                             f"{one_shot_retention_ms}")
        self.state = state
        self.commits = commits
        self.completer = completer
        self.io = io
        self.request_stable = request_stable
        self.expiration_ms = expiration_ms
        self.one_shot_retention_ms = one_shot_retention_ms
        self.reservation_timeout_ms = reservation_timeout_ms
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run ``check`` every tick on the running loop until ``stop``."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="timers")

    async def stop(self) -> None:
        """Stop ticking (a check in progress is cancelled at its next await)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.check()
            except CoordinatorError as exc:
                log.warning("timer check failed: %s", exc)

    async def check(self) -> None:
        """Abort transactions past their timeout, expire idle transactional ids (one-shot
        ids after their retention period), fence idempotent reservations never
        confirmed."""
        now = time.monotonic()
        wall = now_ms()
        expired: list[LogRecord] = []
        one_shot = 0
        for txn in list(self.state.txns.values()):
            if txn.state is TxnState.ONGOING and \
                    (now - txn.last_heartbeat) * 1000 > txn.timeout_ms and \
                    not self.completer.busy(txn.tid):
                log.info("%r: no heartbeat for %d ms (timeout %d): aborting with an epoch bump",
                         txn.tid, (now - txn.last_heartbeat) * 1000, txn.timeout_ms)
                spawn(self.completer.end(txn, commit=False, committed=set(), reason="timeout"))
            elif self.one_shot_expired(txn, wall):
                one_shot += 1
                expired.append(LogRecord("txn", {"tid": txn.tid, "tombstone": True}))
            elif txn.state.is_idle and wall - txn.last_update_ms > self.expiration_ms:
                log.info("%r: idle for %d ms: transactional id expires", txn.tid,
                         wall - txn.last_update_ms)
                expired.append(LogRecord("txn", {"tid": txn.tid, "tombstone": True}))
        if expired:
            # One append for all of them: thousands of one-shot ids may come due together
            # (after a restart), and each awaited on its own would wait a log write.
            for rec in expired:
                self.completer.forget(rec.data["tid"])
            if one_shot:
                log.info("dropping %d one-shot transactional ids past their retention",
                         one_shot)
            await self.commits.commit(expired)
        stale = [r for r in self.state.reservations.values()
                 if r.tid is None and not r.confirmed
                 and (now - r.created) * 1000 > self.reservation_timeout_ms]
        if stale:
            await self.fence_stale(stale)

    def one_shot_expired(self, txn: Txn, wall: int) -> bool:
        """A one-shot id whose transaction was decided more than the retention period ago
        and that nothing is completing: no answer about it can still be needed."""
        done = txn.one_shot_done_ms()
        if done is None or not txn.state.is_idle or self.completer.busy(txn.tid):
            return False
        if unsafe("one_shot_early_drop"):  # planted bug: no retention period at all
            return True
        return wall - done >= self.one_shot_retention_ms

    async def fence_stale(self, stale: Iterable[Reservation]) -> None:
        """Idempotent reservations never confirmed: close them so the HW can move on."""
        parts = []
        for r in stale:
            path = layout.segment_path(r.topic, r.partition, r.base)
            await self.io.call(self.io.storage.put_if_absent, path, b"")
            parts.append(r.where)
        log.info("fenced %d unconfirmed idempotent reservations", len(parts))
        await self.commits.commit([LogRecord("fence", {"id": "", "parts": parts,
                                                       "ms": int(time.time() * 1000)})])
        await self.request_stable()
