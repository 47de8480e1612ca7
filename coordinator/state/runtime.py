"""What the coordinator's roles share at run time: the commit step, storage I/O, metrics.

- ``Commits``: the only way the state changes while serving — apply records and queue them
  for the log in one synchronous step, so memory and log never disagree and a replay
  rebuilds exactly what was served.
- ``StorageIO``: storage calls run on a thread pool (they block: fsync, HTTP), and a
  StorageError becomes Kafka's KAFKA_STORAGE_ERROR in one place.
- ``Observer``: every metric the coordinator reports, behind methods named for what
  happened, so the roles do not carry prometheus plumbing (a no-op until metrics are bound).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from txnlog.log_format.storage import Storage, StorageError

from ..errors import KafkaStorageError
from .coordinator_state import CoordinatorState
from .txn_log import TxnLog
from .txn_log_records import LogRecord


@dataclass
class CommitTrace:
    """Storage calls on one EndTxn's critical path, grouped into sequential rounds.

    A round is one ``await`` of a group of storage calls issued together (in parallel); the
    number of rounds is the number of sequential storage round trips the reply waited for.
    Recorded where the calls are made, so /metrics (and bench/coordinator.py) can show it.
    """

    rounds: list[tuple[str, int]] = field(default_factory=list)

    def add(self, name: str, calls: int) -> None:
        if calls:
            self.rounds.append((name, calls))

    @property
    def calls(self) -> int:
        return sum(n for _, n in self.rounds)


class Observer:
    """The coordinator's metrics, reported by what happened (no-ops until ``bind``)."""

    def __init__(self, metrics: Any = None) -> None:
        self.metrics: Any = None
        self._cache: dict[tuple[str, tuple[str, ...]], Any] = {}
        if metrics is not None:
            self.bind(metrics)

    def bind(self, metrics: Any) -> None:
        """Report into ``metrics`` (the server's prometheus objects, by attribute name)."""
        self.metrics = metrics
        self._cache.clear()

    def _metric(self, name: str, *labels: str) -> Any:
        """The prometheus child for ``name{labels}``, cached: ``labels()`` takes a lock and
        builds a key, and the commit path asks several times per transaction."""
        if self.metrics is None:
            return None
        key = (name, labels)
        m = self._cache.get(key)
        if m is None:
            m = getattr(self.metrics, name)
            m = self._cache[key] = m.labels(*labels) if labels else m
        return m

    def _inc(self, name: str, *labels: str, amount: float = 1) -> None:
        m = self._metric(name, *labels)
        if m is not None:
            m.inc(amount)

    def _observe(self, name: str, value: float) -> None:
        m = self._metric(name)
        if m is not None:
            m.observe(value)

    def reserved(self) -> None:
        """A reserve call handed out offsets."""
        self._inc("reservations")

    def storage_error(self) -> None:
        """A storage call failed after the storage layer's own retries."""
        self._inc("storage_errors")

    def object_written(self, kind: str, n: int = 1) -> None:
        """Objects outside the coordinator's log: marker, fence, txnindex, stable."""
        self._inc("objects_written", kind, amount=n)

    def merge_written(self, level: int, nbytes: int) -> None:
        """A merge wrote ``nbytes`` of segment/run (log and indexes) at ``level``."""
        self._inc("objects_written", "segment" if level == 0 else "run")
        self._inc("merge_bytes", amount=nbytes)

    def transaction_ended(self, outcome: str) -> None:
        self._inc("transactions", outcome)

    def end_txn_answered(self, commit: bool, started: float, trace: CommitTrace) -> None:
        """An EndTxn's latency (commits only) and its storage round trips and calls."""
        if commit:
            self._observe("commit_latency", time.monotonic() - started)
        self._observe("commit_round_trips", len(trace.rounds))
        self._observe("commit_storage_calls", trace.calls)


class Commits:
    """Apply records and queue them for the log in one synchronous step."""

    def __init__(self, state: CoordinatorState) -> None:
        self.state = state
        self.log: TxnLog | None = None  # set once the coordinator takes the log over

    def commit(self, records: list[LogRecord], lazy: bool = False) -> asyncio.Future[None]:
        """Apply ``records`` to the state and queue them; the future resolves once durable.

        Nothing awaits between the two, so no other task sees the state ahead of the queue,
        and the log (sequential) makes every earlier change durable first. ``lazy``: no
        write of its own (``TxnLog.append``); the caller answers without waiting.
        """
        assert self.log is not None
        self.state.apply_all(records)
        return self.log.append(records, lazy=lazy)

    async def commit_or_queue(self, records: list[LogRecord], lazy: bool) -> None:
        """``commit``, then wait until durable unless ``lazy`` (a lazy record's failure to
        be written stops the process; nobody waits for it)."""
        fut = self.commit(records, lazy=lazy)
        if lazy:
            fut.add_done_callback(retrieve_outcome)
        else:
            await fut

    def append_applied(self, records: list[LogRecord]) -> asyncio.Future[None]:
        """Queue records already applied in this same synchronous step (a group of
        Prepare records, planned one after the other on the state each left)."""
        assert self.log is not None
        return self.log.append(records)

    async def sync(self) -> None:
        """Wait until everything queued so far is durable (answers that change nothing)."""
        assert self.log is not None
        await self.log.sync()

    def before_next_write(self, hook: Callable[[], None]) -> None:
        assert self.log is not None
        self.log.before_next_write(hook)


class StorageIO:
    """Blocking storage calls off the event loop, with KAFKA_STORAGE_ERROR translation."""

    def __init__(self, storage: Storage, observer: Observer, threads: int = 64) -> None:
        self.storage = storage
        self.observer = observer
        # Own pool, so markers of many transactions go out in parallel and never queue
        # behind (or in front of) the stable snapshot, which has its own thread.
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="coord-io")

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` on the pool, errors untranslated."""
        return asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the pool; a StorageError becomes KafkaStorageError (counted)."""
        try:
            return await self.run(fn, *args)
        except StorageError as exc:
            self.observer.storage_error()
            raise KafkaStorageError(str(exc)) from exc

    def size_or_none(self, path: str) -> int | None:
        """The object's size, or None if it is absent (blocking)."""
        try:
            return self.storage.size(path)
        except FileNotFoundError:
            return None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)


def retrieve_outcome(task: asyncio.Future[Any]) -> None:
    """A done-callback for tasks nobody awaits: retrieve the outcome so asyncio does not
    warn "exception was never retrieved" (each caller learns it from its own future)."""
    if not task.cancelled():
        task.exception()


def spawn(coro: Any, name: str | None = None) -> asyncio.Task[Any]:
    """Run ``coro`` as a task whose error, if nobody awaits it, is retrieved, not warned."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    task.add_done_callback(retrieve_outcome)
    return task
