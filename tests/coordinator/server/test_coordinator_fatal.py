"""A coordinator part that cannot continue stops the process instead of wedging it.

The stable publisher retries storage errors (``STABLE_RETRY``); when it gives up, no commit
can ever be answered again. Before, its task simply ended and every caller waiting for a
stable snapshot (every EndTxn) waited forever. Now every waiter gets KAFKA_STORAGE_ERROR at
once, later requests too, and the log's fatal path (which stops the process so a restart or
a standby recovers) is taken.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from txnlog.coordinator.errors import KafkaStorageError, NotCoordinatorError
from txnlog.coordinator.state.txn_log import TxnLog, recover
from txnlog.coordinator.transaction import stable_publisher
from txnlog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from txnlog.log_format import stable
from txnlog.log_format.retry import RetryPolicy
from txnlog.log_format.storage import Storage, StorageError

HANG = 60  # seconds: only a hang detector (the answer comes at once when the fix is in)


def test_publisher_that_gives_up_fails_waiters_and_stops_the_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = Storage.for_url(tmp_path.as_uri())
    fatal: list[BaseException] = []

    def log_factory(engine: TransactionCoordinator, recovered: Any) -> TxnLog:
        return TxnLog(engine.storage, recovered.next_offset, snapshot_fn=engine.to_snapshot,
                      snapshot_offsets=recovered.snapshot_offsets,
                      protected_fn=lambda: list(engine.takeover_offsets),
                      on_fatal=fatal.append)

    async def scenario() -> None:
        engine = TransactionCoordinator(storage)
        await engine.start(log_factory, await asyncio.to_thread(recover, storage))
        assert not fatal
        monkeypatch.setattr(stable_publisher, "STABLE_RETRY",
                            RetryPolicy(max_attempts=3, base_delay_s=0, max_delay_s=0))

        def broken(*args: Any) -> Any:
            raise StorageError("storage refuses every write (planted)")

        monkeypatch.setattr(stable, "write_delta", broken)
        waiting = [engine.request_stable() for _ in range(3)]
        for fut in waiting:
            with pytest.raises(KafkaStorageError, match="cannot be published"):
                await asyncio.wait_for(fut, HANG)
        with pytest.raises(KafkaStorageError):  # later requests: at once, not queued
            await asyncio.wait_for(engine.request_stable(), HANG)
        assert len(fatal) == 1 and "planted" in str(fatal[0])
        # The log refuses further appends: the process is stopping.
        with pytest.raises(NotCoordinatorError):
            await asyncio.wait_for(engine.init_producer_id("after-fatal"), HANG)
        await engine.halt()

    asyncio.run(scenario())
