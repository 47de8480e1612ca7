"""The gateway's flush window: every Produce of every connection, one object per flush.

A broker appends each Produce to its partitions' segment files; object storage has no
append, and one object per partition per Produce made the gateway's cost follow partitions
times requests (2,237 objects per MB over 64 partitions, and the root's object rate, not
bytes, held a producer to ~730 records/s). Like WarpStream's agents and Kafka's diskless
topics, the gateway now collects the batches of every Produce request that arrives within
a window (``flush_interval_ms``, or until ``flush_max_bytes`` are waiting) and flushes them
together:

1. ``reserve_many``: one coordinator call reserves offsets for every producer of the window
   (each checked as its own Reserve: sequences, epochs, a Kafka client's transaction);
2. every reserved batch is stamped with its base offset (outside the CRC: the client's
   bytes are otherwise unchanged) and all go into one shared object, put-if-absent;
3. ``confirm_many``: one call confirms them all, with where each run lies;
4. each Produce is answered once its own batches are confirmed (and, for idempotent
   producers, published: acks=all read-your-writes).

A failure of one producer's reserve fails that producer's batches alone; a failure of the
put or of the confirm fails the whole window's batches with a retriable code, and the
clients' retries (same sequences) get the same offsets back. Windows overlap (the next
collects while one writes) but reserve in order, one at a time, so a producer with several
requests in flight keeps its sequence order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from txnlog.log_format.codec.batch_header import set_base_offset
from txnlog.log_format.segments import shared_object

from .. import faults
from ..client.segment_writer import put_shared_object
from ..errors import error_from_json
from . import errors as E

log = logging.getLogger("txnlog.gateway.flush")
Run = Callable[..., Awaitable[Any]]  # the backend's run: a blocking call on its I/O threads

# WarpStream's agent defaults (batch timeout 250 ms, 8 MiB): at 0.5 MB/s a window costs
# ~4 objects (the shared object, the coordinator's appends, a stable head), ~32 objects per
# MB; a shorter window trades objects for produce-to-ack latency (docs/gateway.md).
DEFAULT_FLUSH_INTERVAL_MS = 250
DEFAULT_FLUSH_MAX_BYTES = 8 << 20
MAX_WINDOWS_IN_FLIGHT = 4


@dataclass
class WindowBatch:
    """One partition's batch of a Produce, as the window writes it."""

    topic: str
    partition: int
    data: bytearray
    base_sequence: int
    count: int
    error: int = 0
    message: str | None = None
    base_offset: int = -1


@dataclass
class WindowEntry:
    """One producer's batches of one Produce request."""

    producer_id: int
    epoch: int
    transactional_id: str | None  # a Kafka client's transaction (its epoch translated)
    batches: list[WindowBatch]
    wait_stable: bool
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop()
                                       .create_future())

    def fail(self, code: int, message: str | None) -> None:
        for b in self.batches:
            if b.error == 0:
                b.error, b.message = code, message


class FlushWindow:
    """Collects entries from every connection and flushes each window as one object."""

    def __init__(self, run: Run, call: Callable[[str, dict[str, Any]], Any],
                 put_if_absent: Callable[[str, bytes], bool],
                 interval_ms: int = DEFAULT_FLUSH_INTERVAL_MS,
                 max_bytes: int = DEFAULT_FLUSH_MAX_BYTES) -> None:
        """``run(fn, *args)``: ``fn`` on the gateway's I/O threads; ``call(op, body)``: a
        coordinator call (blocking); ``put_if_absent``: the root's."""
        if interval_ms < 0 or max_bytes < 1:
            raise ValueError("flush interval must be >= 0 ms and the size bound >= 1 byte")
        self.run, self.call, self.put_if_absent = run, call, put_if_absent
        self.interval_s = interval_ms / 1000.0
        self.max_bytes = max_bytes
        self._pending: list[WindowEntry] = []
        self._bytes = 0
        self._arrived: asyncio.Event | None = None
        self._full: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._reserve_lock: asyncio.Lock | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self.flushes = 0  # windows flushed (metrics, tests)

    async def submit(self, entry: WindowEntry) -> None:
        """Add ``entry`` to the open window; returns once its batches have an outcome."""
        self.enqueue(entry)
        await asyncio.shield(entry.done)

    def enqueue(self, entry: WindowEntry) -> None:
        """Add ``entry`` to the open window (``entry.done`` tells when it has an outcome).
        Entries are written in the order they are enqueued."""
        if self._task is None:
            self._arrived, self._full = asyncio.Event(), asyncio.Event()
            self._reserve_lock = asyncio.Lock()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="flush")
        assert self._arrived is not None and self._full is not None
        self._pending.append(entry)
        self._bytes += sum(len(b.data) for b in entry.batches)
        self._arrived.set()
        if self._bytes >= self.max_bytes:
            self._full.set()

    async def _run(self) -> None:
        assert self._arrived is not None and self._full is not None
        limit = asyncio.Semaphore(MAX_WINDOWS_IN_FLIGHT)
        while True:
            await self._arrived.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self.interval_s)
            entries, self._pending, self._bytes = self._pending, [], 0
            self._arrived.clear()
            self._full.clear()
            await limit.acquire()
            task = asyncio.get_running_loop().create_task(self._flush(entries))
            self._in_flight.add(task)
            task.add_done_callback(lambda t: (self._in_flight.discard(t), limit.release()))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        for entry in self._pending:
            entry.fail(E.KAFKA_STORAGE_ERROR, "the gateway is stopping")
            if not entry.done.done():
                entry.done.set_result(None)

    async def _flush(self, entries: list[WindowEntry]) -> None:
        t0 = time.monotonic()
        try:
            await self._write(entries)
        except Exception as exc:  # the object or the confirm: the whole window, retriable
            code = E.code_of(exc)
            if code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS,
                        E.UNKNOWN_SERVER_ERROR):
                code = E.KAFKA_STORAGE_ERROR  # retriable for a producer: same sequences
            log.warning("flush of %d producers failed: %r", len(entries), exc)
            for entry in entries:
                entry.fail(code, str(exc)[:500])
        finally:
            self.flushes += 1
            for entry in entries:
                if not entry.done.done():
                    entry.done.set_result(None)
            log.debug("flushed %d producers in %.1f ms", len(entries),
                      (time.monotonic() - t0) * 1000)

    async def _write(self, entries: list[WindowEntry]) -> None:
        assert self._reserve_lock is not None
        t0 = time.monotonic()
        async with self._reserve_lock:  # windows reserve in the order they closed
            answer = await self.run(self.call, "reserve_many", {"entries": [
                {"producer_id": e.producer_id, "epoch": e.epoch,
                 "transactional_id": e.transactional_id,
                 "partitions": [{"topic": b.topic, "partition": b.partition,
                                 "base_sequence": b.base_sequence, "count": b.count}
                                for b in e.batches]} for e in entries]})
        t1 = time.monotonic()
        reserved: list[tuple[WindowEntry, int]] = []
        for entry, result in zip(entries, answer["results"], strict=True):
            if "error" in result:
                exc = error_from_json(result["error"])
                code = E.code_of(exc)
                if code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS):
                    code = E.KAFKA_STORAGE_ERROR
                entry.fail(code, str(exc)[:500])
                continue
            for b, part in zip(entry.batches, result["partitions"], strict=True):
                b.base_offset = int(part["base_offset"])
                set_base_offset(b.data, 0, b.base_offset)
            reserved.append((entry, int(result["epoch"])))
        if not reserved:
            return
        runs = [shared_object.RunToWrite(b.topic, b.partition, b.base_offset,
                                         b.base_offset + b.count, b.data)
                for entry, _ in reserved for b in entry.batches]
        first = reserved[0][0]
        data, placed = shared_object.build(runs, first.producer_id, first.epoch)
        path = await self.run(put_shared_object, self.put_if_absent, data, first.producer_id,
                              first.epoch)
        if path is None:
            raise OSError("three fresh shared object names were all taken")
        faults.point("gateway_after_put")
        t2 = time.monotonic()
        it = iter(placed)
        confirms = []
        for entry, epoch in reserved:
            parts = []
            for b in entry.batches:
                at = next(it)
                parts.append({"topic": b.topic, "partition": b.partition,
                              "base_offset": b.base_offset, "object": path,
                              "position": at.position, "size": at.size})
            confirms.append({"producer_id": entry.producer_id, "epoch": epoch,
                             "partitions": parts})
        answer = await self.run(self.call, "confirm_many", {
            "entries": confirms, "wait_stable": any(e.wait_stable for e, _ in reserved)})
        for (entry, _), result in zip(reserved, answer["results"], strict=True):
            if "error" in result:
                exc = error_from_json(result["error"])
                entry.fail(E.code_of(exc), str(exc)[:500])
        log.debug("window of %d producers, %d runs, %d bytes: reserve %.0f ms, put %.0f ms, "
                  "confirm %.0f ms", len(entries), len(runs), len(data), (t1 - t0) * 1000,
                  (t2 - t1) * 1000, (time.monotonic() - t2) * 1000)


__all__ = ["DEFAULT_FLUSH_INTERVAL_MS", "DEFAULT_FLUSH_MAX_BYTES", "FlushWindow",
           "WindowBatch", "WindowEntry"]
