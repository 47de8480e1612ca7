"""Growth: what reading and committing cost as a partition's history grows.

A streaming sink commits one small transaction every few seconds, forever: before segments,
every commit left ~2 objects per partition and every read listed all of them (a fresh
reader needed 0.44 s on S3 for the newest record after 250 commits, 2.0 s after 8,000).
This bench writes that history — one-record transactions into ``events-0``, each with a
consumer group's offsets (``send_offsets_to_transaction``), as Spark's exactly-once sink
makes them, from ``--writers`` sinks at once (4: the history builds 4x faster) — and at
250 / 2,000 / 8,000 / 32,000 commits measures:

- objects per partition: everything under ``events-0/`` (small objects, runs, segments,
  indexes, manifests), and its merged and small shares;
- a fresh reader (new storage object, no cached stable base) reading the newest record: its
  storage requests (LIST, GET, HEAD) and its time (median of 5);
- planning one Spark micro-batch on the driver (``TxnlogStreamReader.latestOffset`` +
  ``partitions`` from the previous end, as Spark calls them): time, median of 5;
- commit latency (p50, p99) of the last 200 commits before the point;
- write amplification: bytes written per byte of the partition's log — once as small
  objects, plus what merges wrote (runs, segments and their indexes: the coordinator's
  ``txnlog_coordinator_merge_bytes`` counter).

Each point's ratios are printed against the 250-commit point of the same run (the baseline,
measured in the same process minutes earlier, under the same load — printed with every
point). ``--compare-no-merge`` runs the same history with merging off (the previous
behaviour) up to ``--no-merge-max`` commits, for contrast.

    python bench/growth.py [--points 250,2000,8000,32000] [--no-s3] [--no-file] [--writers 4]
                           [--compare-no-merge] [--no-merge-max 8000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

TOPIC = "events"
GROUP = "sink-group"
BUCKET = "txnlog-bench"
READ_REPEATS = 5


class CountingStorage:
    """Counts the storage requests a fresh reader makes (wraps one storage instance)."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.counts: dict[str, int] = {}
        for name, kind in (("list", "LIST"), ("get", "GET"), ("get_view", "GET"),
                           ("size", "HEAD"), ("exists", "HEAD")):
            self._wrap(name, kind)

    def _wrap(self, name: str, kind: str) -> None:
        inner = getattr(self.storage, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            return inner(*args, **kwargs)

        setattr(self.storage, name, counted)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _objects(storage: Any) -> dict[str, int]:
    """Objects and bytes under the partition's directory, by kind."""
    part = f"{TOPIC}-0"
    out = {"small": 0, "small_bytes": 0, "merged": 0, "merged_bytes": 0, "manifests": 0}
    for o in storage.list(part):
        out["small"] += 1
        out["small_bytes"] += o.size
    dirs = ["segments"] + [f"runs/{d}" for d in storage.list_dirs(f"{part}/runs")]
    for d in dirs:
        for o in storage.list(f"{part}/{d}"):
            out["merged"] += 1
            out["merged_bytes"] += o.size
    out["manifests"] = len(storage.list(f"{part}/manifest"))
    out["total"] = out["small"] + out["merged"] + out["manifests"]
    # what readers may use now: the newest manifest's objects and the small ones from M;
    # the rest waits for file.delete.delay.ms (readers in flight) and is then deleted
    from txnlog.log_format.manifest import read_latest_manifest

    man = read_latest_manifest(storage, TOPIC, 0)
    merged_end = man.end_offset if man is not None else 0
    live = 1 if man is not None else 0
    if man is not None:
        live += sum(len(o.paths(TOPIC, 0)) for o in man.objects)
    live += sum(1 for o in storage.list(part, f"{merged_end:020d}" if merged_end else None))
    out["live"] = live
    out["in_grace"] = out["total"] - live
    # the partition's log in bytes, once: the merged objects readers use and the tail
    logical = sum(o.size for o in man.objects) if man is not None else 0
    logical += sum(o.size for o in storage.list(part, f"{merged_end:020d}" if merged_end
                                                else None)
                   if o.name.endswith(".log"))
    out["log_bytes"] = logical
    return out


def _merge_bytes(endpoint: str) -> float:
    """What the coordinator's merges wrote so far (its /metrics counter)."""
    import urllib.request

    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("txnlog_coordinator_merge_bytes_total "):
                return float(line.split()[1])
    return 0.0


def _fresh_read(root: str) -> tuple[float, dict[str, int], int]:
    """A fresh reader reading the newest record: (seconds, requests, rows)."""
    from txnlog.log_format import stable
    from txnlog.log_format.reader import PartitionReader
    from txnlog.log_format.storage import Storage

    Storage.clear_cache()
    stable.clear_base_cache()
    storage = Storage.for_url(root)
    counting = CountingStorage(storage)
    t0 = time.perf_counter()
    reader = PartitionReader(storage, TOPIC, 0)
    hw = reader.last_stable_offset()
    rows = 0
    start = max(0, hw - 3)  # the newest record and its marker
    for chunk in reader.read(start, hw):
        rows += chunk.batch.num_rows
    return time.perf_counter() - t0, dict(counting.counts), rows


def _plan_micro_batch(root: str, previous: dict[str, Any] | None
                      ) -> tuple[float, Any, dict[str, int]]:
    """Driver-side planning of one micro-batch, as Spark calls the stream reader."""
    from pyspark.sql.datasource import ReadAllAvailable
    from txnlog.datasource.options import parse_read_options
    from txnlog.datasource.read.projection import full_read_schema
    from txnlog.datasource.read.stream_reader import TxnlogStreamReader
    from txnlog.log_format import stable
    from txnlog.log_format.storage import Storage

    Storage.clear_cache()
    stable.clear_base_cache()
    opts = parse_read_options({"path": root, "subscribe": TOPIC,
                               "startingOffsets": "earliest"}, streaming=True)
    reader = TxnlogStreamReader(opts, full_read_schema(False))  # no session needed
    counting = CountingStorage(Storage.for_url(root))
    t0 = time.perf_counter()
    start = previous if previous is not None else reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.partitions(start, end)
    return time.perf_counter() - t0, end, dict(counting.counts)


def run(root: str, points: list[int], merge: bool, label: str, writers: int
        ) -> list[dict[str, Any]]:
    from coordinator_proc import CoordinatorProc
    from txnlog.coordinator.client.producer import TransactionalProducer
    from txnlog.log_format.arrow.warmup import warm_up
    from txnlog.log_format.layout import TopicPartition

    warm_up()  # compile the codec kernels first: not a commit's latency
    log_path = Path(tempfile.mkdtemp(prefix="growth-log-")) / "coordinator.log"
    proc = CoordinatorProc(root, log_path=log_path,
                           extra=[] if merge else ["--no-merge"])
    rows: list[dict[str, Any]] = []
    try:
        proc.wait_healthy(120)
        client = proc.client(timeout=120)
        client.create_topic(TOPIC, 1)
        client.create_topic("source", writers)
        producers = []
        for w in range(writers):
            producer = TransactionalProducer(root, f"sink-{label}-{w}",
                                             coordinator=proc.endpoint)
            producer.init_transactions()
            producers.append(producer)
        latencies: list[float] = []
        written = 0
        previous_plan = None
        lock = threading.Lock()

        def sink(w: int, upto: int) -> None:
            """One streaming sink: one-record transactions with its group's offsets."""
            nonlocal written
            producer = producers[w]
            while True:
                with lock:
                    if written >= upto:
                        return
                    n = written
                    written += 1
                producer.begin_transaction()
                producer.send(TOPIC, b"x" * 100, key=b"k%d" % n, partition=0)
                producer.send_offsets_to_transaction(
                    {TopicPartition("source", w): n + 1}, f"{GROUP}-{w}")
                t0 = time.perf_counter()
                producer.commit_transaction()
                with lock:
                    latencies.append(time.perf_counter() - t0)
        print(f"# bench/growth.py {label}: {os.cpu_count()} cpus, load {os.getloadavg()}",
              flush=True)
        for point in points:
            threads = [threading.Thread(target=sink, args=(w, point)) for w in range(writers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(1.0)  # one merge tick, as a reader arriving a moment later sees it
            reads = [_fresh_read(root) for _ in range(READ_REPEATS)]
            plans = []
            for _ in range(READ_REPEATS):
                secs, end, plan_requests = _plan_micro_batch(root, previous_plan)
                plans.append(secs)
            previous_plan = end
            from txnlog.log_format.storage import Storage
            objs = _objects(Storage.for_url(root))
            recent = latencies[-200:]
            merged_written = _merge_bytes(proc.endpoint) if merge else 0.0
            rows.append({
                "backend": "s3" if root.startswith("s3://") else "file", "merge": merge,
                "commits": point, "objects": objs["total"], "small_objects": objs["small"],
                "merged_objects": objs["merged"], "manifests": objs["manifests"],
                "live_objects": objs["live"], "in_grace": objs["in_grace"],
                "read_s": statistics.median(r[0] for r in reads),
                "read_requests": reads[-1][1], "read_rows": reads[-1][2],
                "plan_s": statistics.median(plans), "plan_requests": plan_requests,
                "commit_p50_ms": 1000 * _pct(recent, 0.5),
                "commit_p99_ms": 1000 * _pct(recent, 0.99),
                "merged_bytes": objs["merged_bytes"],
                "small_bytes": objs["small_bytes"], "log_bytes": objs["log_bytes"],
                "write_amplification": (objs["log_bytes"] + merged_written)
                / max(1, objs["log_bytes"]),
                "load": os.getloadavg()[0],
            })
            print(_line(rows[-1], rows[0]), flush=True)
        for producer in producers:
            producer.close()
    finally:
        proc.stop()
    return rows


def _line(r: dict[str, Any], base: dict[str, Any]) -> str:
    req = sum(r["read_requests"].values())
    base_req = sum(base["read_requests"].values())
    return (f"{r['backend']:4} merge={'on ' if r['merge'] else 'off'} {r['commits']:6d} commits: "
            f"objects {r['objects']:6d}: live {r['live_objects']}, waiting for deletion "
            f"{r['in_grace']} | newest record "
            f"{1000 * r['read_s']:7.1f} ms x{r['read_s'] / base['read_s']:.2f}, "
            f"{req} requests {r['read_requests']} x{req / base_req:.2f} | plan "
            f"{1000 * r['plan_s']:6.1f} ms x{r['plan_s'] / base['plan_s']:.2f}, "
            f"{sum(r['plan_requests'].values())} requests | commit p50 "
            f"{r['commit_p50_ms']:.1f} ms x{r['commit_p50_ms'] / base['commit_p50_ms']:.2f} "
            f"p99 {r['commit_p99_ms']:.1f} ms | write amplification "
            f"{r['write_amplification']:.1f} | load {r['load']:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", default="250,2000,8000,32000")
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-file", action="store_true")
    ap.add_argument("--compare-no-merge", action="store_true")
    ap.add_argument("--no-merge-max", type=int, default=8000)
    ap.add_argument("--writers", type=int, default=4,
                    help="streaming sinks committing at once into the partition (default 4)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    points = [int(p) for p in args.points.split(",")]
    results: list[dict[str, Any]] = []
    backends = ([] if args.no_file else ["file"]) + ([] if args.no_s3 else ["s3"])
    server = None
    try:
        for backend in backends:
            if backend == "s3" and server is None:
                from s3_server import S3Server

                server = S3Server.start(Path(tempfile.mkdtemp(prefix="growth-s3-")))
                server.create_bucket(BUCKET)
                os.environ.update(server.env())
            modes = [True] + ([False] if args.compare_no_merge else [])
            for merge in modes:
                pts = points if merge else [p for p in points if p <= args.no_merge_max]
                tmp = tempfile.mkdtemp(prefix="growth-root-")
                root = (f"file://{tmp}" if backend == "file"
                        else f"s3://{BUCKET}/growth-{uuid.uuid4().hex[:8]}")
                try:
                    results += run(root, pts, merge, f"{backend}-{merge}-{uuid.uuid4().hex[:4]}",
                                   args.writers)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
