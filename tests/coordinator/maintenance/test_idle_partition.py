"""A partition nobody appends to any more is merged, compacted and retained as Kafka's
would be: ``segment.ms`` and ``max.compaction.lag.ms`` hold without more appends.

The scenario, as a new user meets it: a topic with ``segment.ms=500`` gets ~150
transactions of random keyed writes (tombstones and aborts among them) over a few seconds,
then one last small write a second later — the append after ``segment.ms`` that makes
Kafka roll the segment holding everything before it — then nothing. Kafka closes that
segment at the last append; with ``cleanup.policy=compact`` the cleaner compacts it
(``max.compaction.lag.ms`` promises it within the lag, KIP-354), with ``delete`` retention
drops it once ``retention.ms`` has passed. Whether the last small objects had been merged
depended on where the writes' timing put the merger's last run, so the scenario runs 20
times (10 topics at once, each with its own phase against the merger's ticks) against a
real coordinator process, and every run must meet the rule.

The bound asserted is the rule itself plus a stated margin: the lag (``max.compaction.lag.ms``
or ``retention.ms``), the job's interval (the merger's tick, where the cleaner and
retention run, and the retention check interval), and ``MARGIN_S`` for process scheduling
on a loaded 2-core machine (the coordinator, ten producers and ten polling readers share
it; a merge and a compaction of one partition take tens of milliseconds when idle, but a
tick can wait behind a second of commits). The observed lags are printed.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer
from txnlog.log_format.manifest import read_latest_manifest
from txnlog.log_format.reader import PartitionReader
from txnlog.log_format.storage import Storage

from tests.coordinator_proc import CoordinatorProc

RUNS = 20
AT_ONCE = 10  # runs at once: two waves keep the test near a minute on a busy machine
TXNS = 150
WRITE_S = 4.0  # the transactions are paced over this long
GAP_S = 1.0  # then the last small write, after segment.ms
MERGE_INTERVAL_S = 0.2
RETENTION_CHECK_MS = 200
MARGIN_S = 3.0
SEGMENT_MS = 500
MAX_COMPACTION_LAG_MS = 2000
RETENTION_MS = 1000
FLAGS = ["--merge-interval-s", str(MERGE_INTERVAL_S),
         "--retention-check-interval-ms", str(RETENTION_CHECK_MS)]
COMPACT = {"cleanup.policy": "compact", "segment.ms": str(SEGMENT_MS),
           "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
           "max.compaction.lag.ms": str(MAX_COMPACTION_LAG_MS)}
DELETE = {"cleanup.policy": "delete", "segment.ms": str(SEGMENT_MS),
          "retention.ms": str(RETENTION_MS)}


@dataclass
class Written:
    """What one run wrote: the committed latest value per key, and where the last small
    write begins and when it was acknowledged (monotonic)."""

    model: dict[str, str | None]
    last_offset: int
    last_at: float


def scenario(root: str, endpoint: str, topic: str, seed: int) -> Written:
    """The issue's writes into ``topic``-0: ``TXNS`` transactions of 1-4 records over 60
    keys (10% tombstones, 15% aborted) paced over ``WRITE_S``, then after ``GAP_S`` one
    last committed record of its own key."""
    rng = random.Random(seed)
    time.sleep(rng.uniform(0, 0.5))  # each run's own phase against the merger's ticks
    producer = TransactionalProducer(root, f"idle-{topic}", coordinator=endpoint)
    producer.init_transactions()
    model: dict[str, str | None] = {}
    start = time.monotonic()
    for i in range(TXNS):
        producer.begin_transaction()
        recs: list[tuple[str, str | None]] = []
        for _ in range(rng.randint(1, 4)):
            key = f"k{rng.randrange(60)}"
            value = None if rng.random() < 0.1 else f"v{i}"
            recs.append((key, value))
            producer.send(topic, None if value is None else value.encode(), key=key.encode(),
                          partition=0)
        if rng.random() < 0.15:
            producer.flush()
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            model.update(recs)
        time.sleep(max(0.0, (i + 1) * WRITE_S / TXNS - (time.monotonic() - start)))
    time.sleep(GAP_S)
    producer.begin_transaction()
    fut = producer.send(topic, b"last", key=b"last", partition=0)
    producer.commit_transaction()
    last_at = time.monotonic()
    model["last"] = "last"
    offset = fut.result().offset
    producer.close()
    return Written(model, offset, last_at)


def run_all(root: str, topics_config: dict[str, str],
            done: Callable[[Storage, str, Written], bool], bound_s: float) -> list[float]:
    """Every run's lag (s) from its last write's acknowledgement until ``done`` held;
    fails naming the runs that did not get there within ``bound_s``."""
    storage = Storage.for_url(root)
    lags: dict[int, float] = {}
    failed: dict[int, str] = {}
    with CoordinatorProc(root, extra=FLAGS) as proc:
        client = CoordinatorClient(proc.endpoint)
        for wave in range(0, RUNS, AT_ONCE):

            def one(i: int) -> None:
                topic = f"t{i}"
                try:
                    w = scenario(root, proc.endpoint, topic, seed=i)
                    while True:
                        lag = time.monotonic() - w.last_at
                        if done(storage, topic, w):
                            lags[i] = lag
                            return
                        if lag > bound_s:
                            man = read_latest_manifest(storage, topic, 0)
                            failed[i] = (f"{topic}: not done {lag:.1f} s after the last "
                                         f"write (offset {w.last_offset}); manifest ends at "
                                         f"{man.end_offset if man else None}")
                            return
                        time.sleep(0.2)
                except Exception as exc:  # reported with the run
                    failed[i] = f"{topic}: {exc!r}"

            for i in range(wave, wave + AT_ONCE):
                client.create_topic(f"t{i}", 1, topics_config)
            threads = [threading.Thread(target=one, args=(i,))
                       for i in range(wave, wave + AT_ONCE)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert "stopped:" not in proc.log_text()
    ordered = [lags[i] for i in sorted(lags)]
    if ordered:
        print(f"lag after the last write: p50 {statistics.median(ordered):.2f} s, max "
              f"{max(ordered):.2f} s over {len(ordered)} runs (bound {bound_s:.1f} s)")
    assert not failed, "\n".join(failed[i] for i in sorted(failed))
    return ordered


def compacted(storage: Storage, topic: str, w: Written) -> bool:
    """A read_committed read holds one record per key, each key's latest committed value
    (a tombstone until ``delete.retention.ms``)."""
    t = PartitionReader(storage, topic, 0).read_table()
    keys = [k.decode() for k in t.column("key").to_pylist()]
    if len(keys) != len(set(keys)):
        return False
    values = [None if v is None else v.decode() for v in t.column("value").to_pylist()]
    return dict(zip(keys, values, strict=True)) == w.model


def retained(storage: Storage, topic: str, w: Written) -> bool:
    """Every record before the last write is gone: the log start offset reached it."""
    return PartitionReader(storage, topic, 0).earliest_offset() >= w.last_offset


def test_an_idle_compacted_partition_is_compacted_within_max_compaction_lag(
        file_root: str) -> None:
    """Kafka rolls the segment at the last write (older than ``segment.ms``) and cleans it
    within ``max.compaction.lag.ms`` (here also past ``min.cleanable.dirty.ratio``)."""
    run_all(file_root, COMPACT, compacted,
            MAX_COMPACTION_LAG_MS / 1000 + MERGE_INTERVAL_S + MARGIN_S)


def test_an_idle_partition_is_retained_within_retention_ms(file_root: str) -> None:
    """The segment closed at the last write holds records at least ``GAP_S`` old: Kafka
    deletes it once its newest record is ``retention.ms`` old, at the next check."""
    run_all(file_root, DELETE, retained,
            RETENTION_MS / 1000 + RETENTION_CHECK_MS / 1000 + MERGE_INTERVAL_S + MARGIN_S)
