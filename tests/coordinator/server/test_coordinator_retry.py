"""The coordinator's three retry loops, now one policy each: same schedules as the loops
they replaced, and what happens when one gives up.

- log writes (``txn_log.LOG_WRITE_RETRY``): 5 attempts, waits 0.2/0.4/0.8/1.6 s, then the
  log fails and the process stops (``on_fatal``);
- a prepared transaction's objects (``completion.ROLL_FORWARD_RETRY``): no limit, waits
  doubling from 0.2 s up to 5 s;
- a stable snapshot (``stable_publisher.STABLE_RETRY``): 1000 attempts, waits doubling from
  0.1 s up to 5 s.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from txnlog.coordinator.errors import NotCoordinatorError
from txnlog.coordinator.state import txn_log
from txnlog.coordinator.state.txn_log import LOG_WRITE_RETRY, TxnLog
from txnlog.coordinator.state.txn_log_records import LogRecord
from txnlog.coordinator.transaction.completion import ROLL_FORWARD_RETRY
from txnlog.coordinator.transaction.stable_publisher import STABLE_RETRY
from txnlog.log_format.retry import RetryPolicy
from txnlog.log_format.storage import Storage, StorageError


def _waits(policy: RetryPolicy, n: int) -> list[float | None]:
    now = time.monotonic()
    return [policy.next_delay(a, now) for a in range(n)]


def test_log_writes_give_up_after_five_attempts() -> None:
    assert _waits(LOG_WRITE_RETRY, 5) == [0.2, 0.4, 0.8, 1.6, None]


def test_a_prepared_transaction_is_retried_without_limit() -> None:
    waits = _waits(ROLL_FORWARD_RETRY, 200)
    assert waits[:6] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert all(w == 5.0 for w in waits[5:])


def test_stable_snapshots_are_retried_a_thousand_times() -> None:
    waits = _waits(STABLE_RETRY, 1000)
    assert waits[:7] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert waits[998] == 5.0 and waits[999] is None


class _FailingPuts:
    """Storage whose put_if_absent fails with StorageError ``failures`` times."""

    def __init__(self, inner: Storage, failures: int) -> None:
        self.inner, self.failures, self.calls = inner, failures, 0

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self.calls += 1
        if self.calls <= self.failures:
            raise StorageError(f"planted failure {self.calls}")
        return self.inner.put_if_absent(path, data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.mark.parametrize("failures,stops", [(4, False), (5, True)])
def test_a_log_write_fails_the_log_only_when_the_policy_gives_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int, stops: bool) -> None:
    # the same policy without the waits, so the test takes no seconds
    monkeypatch.setattr(txn_log, "LOG_WRITE_RETRY",
                        RetryPolicy(max_attempts=5, base_delay_s=0, jitter=False))
    storage = _FailingPuts(Storage.for_url((tmp_path / "root").as_uri()), failures)

    async def scenario() -> list[BaseException]:
        fatal: list[BaseException] = []
        log = TxnLog(storage, 0, snapshot_fn=dict, protected_fn=list,  # type: ignore[arg-type]
                     on_fatal=fatal.append)
        log.start()
        fut = log.append([LogRecord("takeover", {"id": "", "epoch": 0, "log_offset": 0,
                                                 "ms": 0, "pid": 1})])
        if stops:
            with pytest.raises(NotCoordinatorError):
                await fut
            await log.halt()
        else:
            await fut
            await log.close()
        assert log.storage_errors == failures
        return fatal

    fatal = asyncio.run(scenario())
    assert storage.calls == 5, "4 failures and a success, or 5 failures and no 6th call"
    assert [type(e) for e in fatal] == ([StorageError] if stops else [])
