"""What compaction buys and costs: a fixed key space updated continuously (issue 16).

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
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--txns", type=int, default=40, help="transactions per round")
    ap.add_argument("--keys", type=int, default=200, help="the fixed key space")
    ap.add_argument("--records", type=int, default=20, help="records per transaction")
    ap.add_argument("--segment-bytes", type=int, default=40_000)
    args = ap.parse_args()

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
