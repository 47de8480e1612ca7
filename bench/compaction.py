"""What compaction buys and costs: a fixed key space updated continuously.

Two topics get the same transactions, interleaved, from one producer against one real
coordinator process (merging and compaction running by themselves):

- ``plain``: ``cleanup.policy=delete`` — the baseline measured in the same run;
- ``compacted``: ``cleanup.policy=compact`` with the same ``segment.bytes``.

After every round the bench counts each partition's objects and bytes under the root (the
log, indexes, manifests: everything a reader or a LIST may meet) and prints them with the
ratio compacted/plain, and the cost of the compactions of that round (bytes the cleaner read
and wrote, from the coordinator's log) against the history written so far: under a fixed
key space the compacted topic's objects and bytes level off while the plain topic's grow
with history, and each compaction reads what is live (about the key space), not history.

    python bench/compaction.py [--rounds 8] [--txns 40] [--keys 200] [--records 20]

``--idle-lag N``: how long a record stays uncompacted once its partition goes idle. N runs
(``--at-once`` at a time, each its own topic and phase against the merger's ticks) of a
compacted topic with ``max.compaction.lag.ms`` (``--max-lag-ms``, 2000) getting 150
transactions of random keyed writes, tombstones and aborts over ~4 s and one last small write
a second later, then nothing; each run's lag is the time from the last write's
acknowledgement until a read_committed read holds one record per key (the latest). Printed:
p50 and max over the runs, and each as a ratio of ``max.compaction.lag.ms``. ``segment.ms``
is Kafka's default unless ``--segment-ms`` is given, so the lag is what bounds it (KIP-354
rolls the open segment within it).

    python bench/compaction.py --idle-lag 20 [--at-once 5] [--max-lag-ms 2000]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

FAST = ["--merge-min-objects", "8", "--merge-fanout", "4", "--merge-interval-s", "0.2"]
COMPACT_LINE = re.compile(r"compacting (\S+) #\d+: \[\d+, \d+\) (\d+) -> (\d+) bytes")


def usage(root: Path, topic: str) -> tuple[int, int]:
    """(objects, bytes) under every partition directory of ``topic``."""
    objects = size = 0
    for d in root.glob(f"{topic}-*"):
        for dirpath, _, files in os.walk(d):
            for f in files:
                objects += 1
                size += os.path.getsize(os.path.join(dirpath, f))
    return objects, size


def idle_lag(runs: int, at_once: int, max_lag_ms: int, segment_ms: int | None,
             interval_s: float) -> None:
    """The ``--idle-lag`` mode: the lag of each run, then p50/max against the rule."""
    from coordinator_proc import CoordinatorProc
    from test_idle_partition import compacted, scenario
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient
    from txnlog.log_format.storage import Storage

    root = Path(tempfile.mkdtemp(prefix="bench-compaction-lag-"))
    url = f"file://{root}"
    storage = Storage.for_url(url)
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
              "min.compaction.lag.ms": "0", "max.compaction.lag.ms": str(max_lag_ms)}
    if segment_ms is not None:
        config["segment.ms"] = str(segment_ms)
    bound_s = 3 * max_lag_ms / 1000 + 30  # a run not compacted by then is reported as such
    lags: dict[int, float] = {}
    lock = threading.Lock()
    print(f"idle lag: {runs} runs, {at_once} at once, max.compaction.lag.ms {max_lag_ms}, "
          f"segment.ms {segment_ms if segment_ms is not None else 'default'}, merger "
          f"interval {interval_s} s; load {os.getloadavg()[0]:.1f}", flush=True)
    proc = CoordinatorProc(url, log_path=root.parent / f"{root.name}-coordinator.log",
                           extra=["--merge-interval-s", str(interval_s)])
    try:
        endpoint = proc.wait_healthy(120)
        client = CoordinatorClient(endpoint)
        for wave in range(0, runs, at_once):

            def one(i: int) -> None:
                w = scenario(url, endpoint, f"t{i}", seed=i)
                while time.monotonic() - w.last_at < bound_s:
                    if compacted(storage, f"t{i}", w):
                        with lock:
                            lags[i] = time.monotonic() - w.last_at
                        return
                    time.sleep(0.05)

            todo = range(wave, min(runs, wave + at_once))
            for i in todo:
                client.create_topic(f"t{i}", 1, config)
            threads = [threading.Thread(target=one, args=(i,)) for i in todo]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print("  " + "  ".join(f"t{i} {lags[i]:.2f} s" if i in lags else f"t{i} never"
                                   for i in todo), flush=True)
    finally:
        proc.stop()
    got = sorted(lags.values())
    lag_s = max_lag_ms / 1000
    if got:
        p50, worst = statistics.median(got), max(got)
        print(f"uncompacted after the last append: p50 {p50:.2f} s ({p50 / lag_s:.2f}x "
              f"max.compaction.lag.ms), max {worst:.2f} s ({worst / lag_s:.2f}x) over "
              f"{len(got)} runs; {runs - len(got)} never compacted within {bound_s:.0f} s; "
              f"load {os.getloadavg()[0]:.1f}")
    else:
        print(f"no run compacted within {bound_s:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--txns", type=int, default=40, help="transactions per round")
    ap.add_argument("--keys", type=int, default=200, help="the fixed key space")
    ap.add_argument("--records", type=int, default=20, help="records per transaction")
    ap.add_argument("--segment-bytes", type=int, default=40_000)
    ap.add_argument("--idle-lag", type=int, default=0, metavar="N",
                    help="measure how long records stay uncompacted once idle, over N runs")
    ap.add_argument("--at-once", type=int, default=5, help="--idle-lag runs at a time")
    ap.add_argument("--max-lag-ms", type=int, default=2000, help="max.compaction.lag.ms")
    ap.add_argument("--segment-ms", type=int, default=None,
                    help="segment.ms of the --idle-lag topics (default: Kafka's)")
    ap.add_argument("--interval-s", type=float, default=0.2,
                    help="--merge-interval-s of the --idle-lag coordinator")
    args = ap.parse_args()
    if args.idle_lag:
        idle_lag(args.idle_lag, args.at_once, args.max_lag_ms, args.segment_ms,
                 args.interval_s)
        return

    from coordinator_proc import CoordinatorProc
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient
    from txnlog.coordinator.client.producer import TransactionalProducer

    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    url = f"file://{root}"
    log_path = root.parent / f"{root.name}-coordinator.log"
    proc = CoordinatorProc(url, log_path=log_path, extra=FAST)
    try:
        endpoint = proc.wait_healthy(120)
        client = CoordinatorClient(endpoint)
        common = {"segment.bytes": str(args.segment_bytes), "file.delete.delay.ms": "2000"}
        client.create_topic("plain", 1, {**common, "cleanup.policy": "delete"})
        client.create_topic("compacted", 1, {**common, "cleanup.policy": "compact",
                                             "delete.retention.ms": "2000"})
        producer = TransactionalProducer(url, "bench-compaction", coordinator=endpoint)
        producer.init_transactions()
        print(f"keys {args.keys}, {args.records} records x {args.txns} transactions per round, "
              f"segment.bytes {args.segment_bytes}; load {os.getloadavg()[0]:.1f}")
        print(f"{'round':>5} {'records':>8} | {'plain obj':>9} {'bytes':>9} | "
              f"{'compact obj':>11} {'bytes':>9} | {'obj ratio':>9} {'byte ratio':>10} | "
              f"{'cleanings':>9} {'read/clean':>10} {'history':>9} {'load':>5}")
        seen = 0
        written = 0
        n = 0
        for rnd in range(1, args.rounds + 1):
            for _ in range(args.txns):
                producer.begin_transaction()
                for _ in range(args.records):
                    key = f"key-{n % args.keys}".encode()
                    value = f"value-{n}-".encode() * 4
                    producer.send("plain", value, key=key, partition=0)
                    producer.send("compacted", value, key=key, partition=0)
                    n += 1
                producer.commit_transaction()
            written += args.txns * args.records
            time.sleep(4.0)  # let merging, compaction and deletion after the grace catch up
            p_obj, p_bytes = usage(root, "plain")
            c_obj, c_bytes = usage(root, "compacted")
            lines = log_path.read_text(errors="replace").splitlines()
            cleans = [m for line in lines[seen:] if (m := COMPACT_LINE.search(line))
                      and m.group(1).startswith("compacted-")]
            seen = len(lines)
            read = sum(int(m.group(2)) for m in cleans) // max(1, len(cleans))
            print(f"{rnd:>5} {written:>8} | {p_obj:>9} {p_bytes:>9} | {c_obj:>11} "
                  f"{c_bytes:>9} | {c_obj / max(1, p_obj):>9.2f} "
                  f"{c_bytes / max(1, p_bytes):>10.2f} | {len(cleans):>9} {read:>10} "
                  f"{p_bytes:>9} {os.getloadavg()[0]:>5.1f}", flush=True)
        producer.close()
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
