"""The long run of retention: a topic with ``retention.ms`` of a minute, written continuously;
the objects and bytes under the root must level off, and reads from ``earliest`` keep
working all along.

A real coordinator process (retention checked every 5 s, ``segment.ms`` 10 s so segments
close — Kafka's retention, like this one, deletes closed segments only), a
TransactionalProducer committing small transactions into 2 partitions as fast as it can,
and every ``--every`` seconds a row: objects and bytes under the root (everything: small
objects, runs, segments, indexes, manifests, stable heads, the coordinator's log), each
partition's log start offset and end, and a fresh Consumer reading the whole partition from
``earliest`` (records read, and OffsetOutOfRange resets it met: a read racing retention
moves to the new log start, as Kafka's consumer with auto.offset.reset=earliest).

Levelling off is judged by the ratio of the last third's mean to the middle third's mean
(objects, bytes): ~1 when retention keeps up, >> 1 when storage grows with history.

    python bench/retention_long.py [--minutes 10] [--every 30] [--s3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

TOPIC = "long"
PARTITIONS = 2


def walk(storage: Any, directory: str = "") -> tuple[int, int]:
    """(objects, bytes) under ``directory``, every level."""
    n = size = 0
    stack = [directory]
    while stack:
        d = stack.pop()
        for o in storage.list(d):
            n += 1
            size += o.size
        stack.extend(f"{d}/{sub}" if d else sub for sub in storage.list_dirs(d))
    return n, size


def writer(root: str, endpoint: str, stop: threading.Event, counter: list[int]) -> None:
    from txnlog.coordinator.client.producer import TransactionalProducer

    prod = TransactionalProducer(root, "long-writer", coordinator=endpoint)
    prod.init_transactions()
    i = 0
    while not stop.is_set():
        prod.begin_transaction()
        for p in range(PARTITIONS):
            for _ in range(5):
                prod.send(TOPIC, f"r{i:09d}".encode().ljust(200, b"."), partition=p)
                i += 1
        prod.commit_transaction()
        counter[0] += 1
    prod.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--s3", action="store_true", help="a SeaweedFS root instead of a file root")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from coordinator_proc import CoordinatorProc
    from txnlog.coordinator.client.coordinator_client import CoordinatorClient
    from txnlog.log_format.consumer import Consumer
    from txnlog.log_format.reader import PartitionReader
    from txnlog.log_format.storage import Storage

    server = None
    if args.s3:
        from s3_server import S3Server  # type: ignore[import-not-found]

        server = S3Server()
        server.start()
        root = server.new_root("retention-long")
    else:
        root = Path(tempfile.mkdtemp(prefix="txnlog-retention-long-")).as_uri()
    storage = Storage.for_url(root)
    proc = CoordinatorProc(root, extra=["--retention-check-interval-ms", "5000",
                                        "--merge-interval-s", "1"])
    proc.wait_healthy()
    client = CoordinatorClient(proc.endpoint)
    client.create_topic(TOPIC, PARTITIONS, {"retention.ms": "60000", "segment.ms": "10000"})
    stop = threading.Event()
    commits = [0]
    t = threading.Thread(target=writer, args=(root, proc.endpoint, stop, commits), daemon=True)
    t.start()
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    try:
        while time.monotonic() - start < args.minutes * 60:
            time.sleep(args.every)
            objects, size = walk(storage)
            starts, ends, read, resets = [], [], 0, 0
            for p in range(PARTITIONS):
                r = PartitionReader(storage, TOPIC, p)
                starts.append(r.earliest_offset())
                ends.append(r.latest_offset())
            with Consumer(root, TOPIC, max_poll_records=1_000_000) as consumer:
                before = dict(consumer._positions)
                for _ in consumer:
                    read += 1
                after_start = {tp: consumer._readers[tp].earliest_offset() for tp in before}
                resets = sum(1 for tp in before if after_start[tp] > before[tp])
            row = {"t_s": round(time.monotonic() - start), "commits": commits[0],
                   "objects": objects, "bytes": size, "log_start": starts, "end": ends,
                   "read_from_earliest": read, "log_start_moved_during_read": resets,
                   "load": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row) if args.json else
                  f"t={row['t_s']:4d}s commits={row['commits']:6d} objects={objects:6d} "
                  f"bytes={size:10,d} log_start={starts} end={ends} read={read:7d} "
                  f"load={row['load']:.1f}", flush=True)
    finally:
        stop.set()
        t.join(30)
        proc.stop()
        if server is not None:
            server.stop()
    third = max(1, len(rows) // 3)
    mid, last = rows[third:2 * third] or rows, rows[-third:]
    for key in ("objects", "bytes"):
        m = statistics.mean(r[key] for r in mid)
        n = statistics.mean(r[key] for r in last)
        print(f"{key}: middle third mean {m:,.0f}, last third mean {n:,.0f}, "
              f"ratio {n / m:.2f} (written: {rows[-1]['commits']} commits; "
              f"first row {rows[0][key]:,}, max {max(r[key] for r in rows):,})")


if __name__ == "__main__":
    main()
