"""Group directory fsync: every caller is covered by an fsync that began after its call."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from txnlog.log_format.storage import dir_sync


def test_each_caller_waits_for_an_fsync_that_began_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs: list[tuple[float, float]] = []
    real = dir_sync._fsync

    def slow_fsync(directory: str) -> None:
        t0 = time.monotonic()
        real(directory)
        time.sleep(0.02)  # a journal commit takes a while: others arrive meanwhile
        syncs.append((t0, time.monotonic()))

    monkeypatch.setattr(dir_sync, "_fsync", slow_fsync)
    calls: list[tuple[float, float]] = []
    lock = threading.Lock()

    def caller(i: int) -> None:
        time.sleep(0.003 * (i % 7))
        t0 = time.monotonic()
        dir_sync.fsync_dir(str(tmp_path))
        with lock:
            calls.append((t0, time.monotonic()))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 32
    for entered, returned in calls:
        assert any(entered <= s0 and s1 <= returned for s0, s1 in syncs), (entered, syncs)
    assert len(syncs) < len(calls)  # coalesced


def test_a_failed_fsync_covers_nobody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = dir_sync._fsync

    def flaky(directory: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "I/O error")
        real(directory)

    monkeypatch.setattr(dir_sync, "_fsync", flaky)
    with pytest.raises(OSError):
        dir_sync.fsync_dir(str(tmp_path))
    dir_sync.fsync_dir(str(tmp_path))  # a fresh fsync, not the failed one
    assert calls["n"] == 2
