"""The coordinator's own state after many one-shot batch writes: snapshot bytes, snapshot CPU,
and restart (recovery) time on S3 — with one-shot ids dropped ("after") and kept ("before").

    python bench/coordinator_state.py [--counts 1000,10000,100000] [--procs 4] [--threads 4]
        [--retention-ms 2000] [--spark 50]

Each write goes through the Spark batch writer's own code, not a shortcut: the data source's
``writer()`` (TxnlogBatchWriter: create_topic + InitProducerId, declared one-shot), the task
side ``write()`` (task_writer.run_task: add_member, the segment writer's reserve -> put ->
confirm, a heartbeat thread), and the driver's ``commit()`` (EndTxn naming the member) — in
``procs`` processes of ``threads`` threads, against a real coordinator process on a local
root. ``--spark N`` then runs N real ``df.write`` calls through Spark (local mode) against a
fresh coordinator and shows their ids were created one-shot and dropped.

At each count (cumulative):
- snapshot bytes: the JSON snapshot of the state recovered from the coordinator's log (what
  its next ``.snapshot`` object holds);
- snapshot CPU: process CPU to build and serialize that snapshot (``to_snapshot`` + JSON,
  what TxnLog does on the event loop), median of 3, and that CPU per second at one snapshot
  per ``--snapshot-every-s`` (5 s, the coordinator's timer while writes go on); and what the
  coordinator really wrote during the writes (its log's ``snapshot at ... (N bytes)``
  lines): snapshots per second, and their CPU per second at the measured cost per byte;
- restart on S3: the coordinator's log (``__transaction_state-0``: newest snapshot and the
  objects after it) copied to a SeaweedFS S3 root (tests/s3_server.py), then the recovery a
  starting coordinator does there (list, GET snapshot, GET the objects after it in parallel,
  decode, apply), median of 3. The history is written on a local root because writing 100,000
  transactions through S3 takes hours on this machine; what recovery reads is the same bytes.

"before" = the same run with a retention of 7 days, i.e. ids kept as long as Kafka's
transactional.id.expiration.ms keeps them (dropping switched off for the run's length).
"after" uses a short retention (``--retention-ms``, 2 s; the default is 10 minutes) so the
run stays short: the live state then holds the writes of the last 2 s, whatever the count.
Ratios are against the 1,000 point of the same column, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.state.coordinator_state import CoordinatorState
from txnlog.coordinator.state.txn_log import recover
from txnlog.log_format import layout
from txnlog.log_format.storage import Storage

# Spark binds its driver to this host's first non-loopback address unless told otherwise;
# the bench talks to 127.0.0.0/8 only.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

KEEP_MS = 7 * 24 * 3600 * 1000
TOPIC = "bench"
TIMEOUT_MS = "10000"  # task heartbeats every 2.5 s: few lingering heartbeat threads


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# ------------------------------------------------------------------ the coordinator
def start_coordinator(root: str, retention_ms: int, log: Path, level: str = "INFO"
                      ) -> tuple[subprocess.Popen, str]:
    """A coordinator process for ``root``, registered, once healthy: (process, endpoint)."""
    args = [sys.executable, "-m", "txnlog.coordinator.cli", "coordinator", "--root", root,
            "--port", "0", "--one-shot-id-retention-ms", str(retention_ms),
            "--log-level", level]
    out = open(log, "ab")  # noqa: SIM115 - the process owns it until it exits
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    st = Storage.for_url(root)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            info = json.loads(st.get(layout.COORDINATOR_FILE))
            if info.get("pid") == proc.pid and CoordinatorClient(info["endpoint"]).healthy():
                return proc, info["endpoint"]
        except (FileNotFoundError, ValueError, KeyError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"coordinator for {root} did not start; see {log}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# ------------------------------------------------------------------ the writers
def _writes(root: str, endpoint: str, n: int, threads: int) -> int:
    """``n`` batch writes through the Spark writer's code path, ``threads`` at a time."""
    import pyarrow as pa
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StructField, StructType
    from txnlog.datasource.source import TxnlogDataSource

    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    options = CaseInsensitiveDict({"path": root, "topic": TOPIC, "coordinator": endpoint,
                                   "transaction.timeout.ms": TIMEOUT_MS})
    batch = pa.record_batch({"key": pa.array([b"k"], pa.binary()),
                             "value": pa.array([b"v" * 100], pa.binary())})

    def one(_: int) -> None:
        writer = TxnlogDataSource(options).writer(schema, False)  # driver: InitProducerId
        msg = writer.write(iter([batch]))  # a task: add_member, reserve, put, confirm
        writer.commit([msg])  # driver: EndTxn(commit, members)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(n)))
    return n


def run_writes(root: str, endpoint: str, n: int, procs: int, threads: int) -> float:
    """``n`` writes in ``procs`` processes; returns the wall seconds."""
    t0 = time.perf_counter()
    shares = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    with mp.get_context("spawn").Pool(procs) as pool:
        done = sum(pool.starmap(_writes, [(root, endpoint, s, threads) for s in shares if s]))
    assert done == n
    return time.perf_counter() - t0


# ------------------------------------------------------------------ measurements
def measure(root: str, s3_root: str | None) -> dict[str, Any]:
    """Snapshot bytes and CPU of the state in ``root``'s log, and its recovery time on S3."""
    st = Storage.for_url(root)
    rec = recover(st)
    state = CoordinatorState()
    state.load(rec.snapshot, rec.records)
    cpu = []
    for _ in range(3):
        c0 = time.process_time()
        blob = json.dumps(state.to_snapshot(), separators=(",", ":")).encode()
        cpu.append(time.process_time() - c0)
    out: dict[str, Any] = {
        "bytes": len(blob), "snap_cpu_ms": statistics.median(cpu) * 1000,
        "ids": len(state.txns), "producers": len(state.producers),
        "one_shot": sum(1 for t in state.txns.values() if t.one_shot)}
    if s3_root is not None:
        s3 = Storage.for_url(s3_root)
        names = [o.name for o in st.list(layout.TRANSACTION_STATE_DIR)]
        first = max((int(n.split(".")[0]) for n in names if n.endswith(".snapshot")),
                    default=0)
        keep = [n for n in names if int(n.split(".")[0]) >= first]

        def copy(name: str) -> None:
            path = f"{layout.TRANSACTION_STATE_DIR}/{name}"
            s3.put_if_absent(path, st.get(path))
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(copy, keep))
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            r = recover(s3)
            CoordinatorState().load(r.snapshot, r.records)
            times.append(time.perf_counter() - t0)
        out["restart_s"] = statistics.median(times)
        out["replayed_objects"] = r.objects
    return out


def snapshots_written(coord_log: Path, start: int) -> list[int]:
    """Sizes of the snapshots the coordinator logged writing after byte ``start`` of its
    log (``snapshot at ... (N bytes)``)."""
    with open(coord_log, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return [int(n) for n in re.findall(r"snapshot at \S+ offset \d+ \((\d+) bytes\)", text)]


def spark_phase(n: int, retention_ms: int, work: Path) -> str:
    """``n`` real df.write calls; then whether their ids were one-shot and are gone."""
    from pyspark.sql import SparkSession

    root = (work / "spark-root").as_uri()
    proc, endpoint = start_coordinator(root, retention_ms, work / "coord-spark.log", "DEBUG")
    try:
        spark = (SparkSession.builder.master("local[2]").appName("coordinator_state")
                 .config("spark.ui.enabled", "false").getOrCreate())
        df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary").coalesce(1)
        t0 = time.perf_counter()
        for _ in range(n):
            (df.write.format("txnlog").option("topic", TOPIC).option("coordinator", endpoint)
             .mode("append").save(root))
        wall = time.perf_counter() - t0
        spark.stop()
        time.sleep(retention_ms / 1000 + 1.0)  # let the retention period pass
        client = CoordinatorClient(endpoint)
        client.stable(publish=True)
    finally:
        stop(proc)
    # Counted in the coordinator's DEBUG log: the log objects themselves are pruned
    # after each snapshot.
    text = (work / "coord-spark.log").read_text(errors="replace")
    created = len(re.findall(r"init_producer_id 'txnlog-write-[0-9a-f]+' -> pid \d+ "
                             r"epoch 0 \(one-shot\)", text))
    dropped = sum(int(x) for x in re.findall(r"dropping (\d+) one-shot", text))
    st = Storage.for_url(root)
    state = CoordinatorState()
    r2 = recover(st)
    state.load(r2.snapshot, r2.records)
    left = sum(1 for t in state.txns if t.startswith("txnlog-write-"))
    return (f"Spark: {n} df.write calls in {wall:.0f} s: {created} ids created one-shot "
            f"(InitProducerId one_shot), {dropped} tombstones after the {retention_ms} ms "
            f"retention, {left} write ids left in the state")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1000,10000,100000")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--retention-ms", type=int, default=2000)
    ap.add_argument("--columns", default="after,before")
    ap.add_argument("--before-counts", default=None,
                    help="counts for the 'before' column (default: --counts); it grows "
                         "linearly, so a shorter run shows the slope")
    ap.add_argument("--spark", type=int, default=50, help="real df.write calls (0: skip)")
    ap.add_argument("--no-s3", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.counts.split(",")]
    work = Path(tempfile.mkdtemp(prefix="txnlog-statebench-"))
    server = None
    if not args.no_s3:
        from s3_server import S3Server
        server = S3Server.start()
        server.create_bucket("bench")
        os.environ.update(server.env())  # the standard AWS variables, as bench/coordinator.py
    print(f"# {os.cpu_count()} cpus, load at start {load()}; writers {args.procs} procs x "
          f"{args.threads} threads through TxnlogBatchWriter; retention 'after' "
          f"{args.retention_ms} ms (short for the bench; default 600000), 'before' {KEEP_MS} "
          f"ms; work dir {work}", flush=True)
    results: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        for column in args.columns.split(","):
            retention = args.retention_ms if column == "after" else KEEP_MS
            root = (work / f"root-{column}").as_uri()
            proc, endpoint = start_coordinator(root, retention, work / f"coord-{column}.log")
            done = 0
            results[column] = {}
            col_counts = counts if column == "after" or not args.before_counts else \
                [int(x) for x in args.before_counts.split(",")]
            try:
                coord_log = work / f"coord-{column}.log"
                for n in col_counts:
                    seen = coord_log.stat().st_size
                    wall = run_writes(root, endpoint, n - done, args.procs, args.threads)
                    rate = (n - done) / wall
                    done = n
                    snaps = snapshots_written(coord_log, seen)
                    s3_root = None if server is None else \
                        f"s3://bench/{uuid.uuid4().hex[:8]}-{column}-{n}"
                    m = measure(root, s3_root)
                    m["rate"], m["load"] = rate, load()
                    # What the coordinator really wrote during these writes (its log), and
                    # the CPU that took at the serialization cost measured above per byte.
                    m["snaps_per_s"] = len(snaps) / wall
                    m["snap_cpu_ms_per_s"] = sum(snaps) * m["snap_cpu_ms"] / m["bytes"] / wall
                    results[column][n] = m
                    print(f"{column} {n:>7,}: {json.dumps(m)}", flush=True)
            finally:
                stop(proc)
        print()
        print("| column | writes | snapshot bytes (x) | snapshot CPU ms (x) | CPU ms/s at 1 "
              "snapshot/5 s | snapshots/s written, CPU ms/s | restart on S3 s (x) | ids / "
              "producers in state | writes/s | load |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for column, rows in results.items():
            base = rows[counts[0]]
            for n, m in rows.items():
                restart = "—" if "restart_s" not in m else \
                    f"{m['restart_s']:.2f} ({m['restart_s'] / base['restart_s']:.2f}x)"
                print(f"| {column} | {n:,} | {m['bytes']:,} ({m['bytes'] / base['bytes']:.2f}x) "
                      f"| {m['snap_cpu_ms']:.1f} "
                      f"({m['snap_cpu_ms'] / max(base['snap_cpu_ms'], 1e-3):.2f}x) "
                      f"| {m['snap_cpu_ms'] / 5:.2f} "
                      f"| {m['snaps_per_s']:.2f}, {m['snap_cpu_ms_per_s']:.2f} "
                      f"| {restart} | {m['ids']:,} / "
                      f"{m['producers']:,} | {m['rate']:.0f} | {m['load']} |", flush=True)
        if args.spark:
            print()
            print(spark_phase(args.spark, args.retention_ms, work), flush=True)
        print(f"# load at end {load()}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    threading.excepthook = lambda a: None  # lingering heartbeat threads of finished writes
    main()
