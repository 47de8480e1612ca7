"""The one retry/backoff policy (log_format/retry.py): attempts, deadlines, what is retried."""

from __future__ import annotations

import asyncio

import pytest
from txnlog.log_format.retry import RetriesExhausted, RetryPolicy, retry_async, retry_call


def flaky(failures: int, exc: type[BaseException] = OSError):
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise exc(f"failure {calls['n']}")
        return "ok"

    return fn, calls


def test_retries_until_success_and_reports_each_wait():
    fn, calls = flaky(3)
    seen: list[tuple[int, str, float]] = []
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.001, max_delay_s=0.004, jitter=False)
    assert retry_call(fn, policy, OSError, lambda a, e, w: seen.append((a, str(e), w))) == "ok"
    assert calls["n"] == 4
    assert seen == [(1, "failure 1", 0.001), (2, "failure 2", 0.002), (3, "failure 3", 0.004)]


def test_gives_up_after_max_attempts_with_the_last_error():
    fn, calls = flaky(10)
    with pytest.raises(RetriesExhausted) as info:
        retry_call(fn, RetryPolicy(max_attempts=3, base_delay_s=0, max_delay_s=0), OSError)
    assert calls["n"] == 3 and info.value.attempts == 3
    assert str(info.value.last) == "failure 3"


def test_other_errors_are_not_retried():
    fn, calls = flaky(1, KeyError)
    with pytest.raises(KeyError):
        retry_call(fn, RetryPolicy(base_delay_s=0), OSError)
    assert calls["n"] == 1


def test_deadline_stops_before_a_wait_that_would_end_past_it():
    fn, calls = flaky(100)
    policy = RetryPolicy(max_attempts=None, base_delay_s=10, max_delay_s=10, deadline_s=1)
    with pytest.raises(RetriesExhausted):
        retry_call(fn, policy, OSError)
    assert calls["n"] == 1


def test_unbounded_policy_keeps_going_and_async_form_matches():
    fn, calls = flaky(20)

    async def afn() -> str:
        return fn()

    policy = RetryPolicy(max_attempts=None, base_delay_s=0, max_delay_s=0)
    assert asyncio.run(retry_async(afn, policy, OSError)) == "ok"
    assert calls["n"] == 21


def test_jittered_delay_stays_in_the_upper_half_and_is_capped():
    policy = RetryPolicy(base_delay_s=0.1, max_delay_s=1.0)
    for attempt in range(40):
        top = min(1.0, 0.1 * 2 ** attempt)
        assert top / 2 <= policy.delay(attempt) <= top


@pytest.mark.parametrize("bad", [dict(max_attempts=0), dict(base_delay_s=-1),
                                 dict(deadline_s=-1)])
def test_nonsense_policies_are_refused(bad):
    with pytest.raises(ValueError):
        RetryPolicy(**bad)
