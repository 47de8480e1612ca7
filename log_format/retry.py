"""One retry/backoff policy for every loop that waits out a failure.

Storage calls, the coordinator's log writer, the stable-state publisher, the completion path
and the coordinator client all retry something. They differ only in *what* is worth retrying
and *when to give up* (a prepared transaction is never given up on; a storage call gives up
after a few attempts; a client call after a deadline), so those are the parameters and the
loop itself is written once, in a blocking and an asyncio form.

Why full jitter on the upper half (``top/2 + rand*top/2``): many task attempts hitting the
same throttled bucket must not retry in lock-step, yet no retry should come sooner than half
the nominal delay (a burst of 503s needs a real pause).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

RetryOn = type[BaseException] | tuple[type[BaseException], ...]
OnRetry = Callable[[int, BaseException, float], None]
"""Called before each wait with (attempt number from 1, the error, the delay in seconds)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter.

    ``max_attempts``: how many calls in all (None: no limit — for work that must finish,
    such as rolling a prepared transaction forward). ``deadline_s``: give up once the next
    wait would end later than this many seconds after the first call (None: no deadline).
    ``jitter``: False gives the plain doubling schedule (for tests that count waits).
    The defaults ride out a few seconds of 503s.
    """

    max_attempts: int | None = 8
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    deadline_s: float | None = None
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {self.max_attempts}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("retry delays must not be negative")
        if self.deadline_s is not None and self.deadline_s < 0:
            raise ValueError("deadline_s must not be negative")

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (0-based)."""
        top = min(self.max_delay_s, self.base_delay_s * (2 ** min(attempt, 62)))
        if not self.jitter:
            return top
        return top / 2 + random.random() * top / 2

    def next_delay(self, attempt: int, started: float) -> float | None:
        """The wait before another try after failed attempt ``attempt`` (0-based), or None
        when the policy says to give up (attempts used up, or past the deadline)."""
        if self.max_attempts is not None and attempt + 1 >= self.max_attempts:
            return None
        wait = self.delay(attempt)
        if self.deadline_s is not None and time.monotonic() + wait > started + self.deadline_s:
            return None
        return wait


class RetriesExhausted(Exception):
    """Raised by the retry loops when the policy gives up; ``last`` is the final error and
    ``attempts`` how many calls were made. Callers turn it into their own error type."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


def retry_call(fn: Callable[[], T], policy: RetryPolicy, retry_on: RetryOn,
               on_retry: OnRetry | None = None) -> T:
    """Call ``fn`` until it returns, sleeping between failures of type ``retry_on``.

    Other exceptions propagate at once. When the policy gives up, raises
    RetriesExhausted from the last error.
    """
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return fn()
        except retry_on as exc:
            wait = policy.next_delay(attempt, started)
            if wait is None:
                raise RetriesExhausted(attempt + 1, exc) from exc
            attempt += 1
            if on_retry is not None:
                on_retry(attempt, exc, wait)
            time.sleep(wait)


async def retry_async(fn: Callable[[], Awaitable[T]], policy: RetryPolicy, retry_on: RetryOn,
                      on_retry: OnRetry | None = None) -> T:
    """The asyncio form of ``retry_call``: awaits ``fn()`` and ``asyncio.sleep``s between
    failures, so a coordinator's event loop keeps serving while one task waits."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return await fn()
        except retry_on as exc:
            wait = policy.next_delay(attempt, started)
            if wait is None:
                raise RetriesExhausted(attempt + 1, exc) from exc
            attempt += 1
            if on_retry is not None:
                on_retry(attempt, exc, wait)
            import asyncio  # here: a blocking caller (a Spark task) never imports it

            await asyncio.sleep(wait)
