"""Committed transactions/s and commit latency through a real coordinator, vs Delta Lake.

Workload: W concurrent writers (threads), each running transactions that write one small
record batch into each of P partitions (reserve -> put-if-absent -> confirm -> EndTxn), for
P in 1/4/16, on local files and (with --s3) on a SeaweedFS S3 server. The same number of
Delta Lake appends (delta-rs ``write_deltalake``, one append of P rows per transaction) runs
on the same storage for the ratio. Prints a table; ``--json`` for machines.

    python bench/coordinator.py [--seconds 5] [--writers 16] [--s3]
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
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from coordinator_proc import CoordinatorProc
from txnlog.coordinator.client import CoordinatorClient
from txnlog.log_format import layout
from txnlog.log_format.records import encode_batch
from txnlog.log_format.storage import Storage


def txnlog_run(root: str, parts: int, writers: int, seconds: float) -> dict[str, Any]:
    with CoordinatorProc(root, log_path=Path(tempfile.gettempdir()) / "bench-coord.log",
                         extra=["--log-level", "WARNING"]) as proc:
        topic = f"b{parts}"
        proc.client().create_topic(topic, parts)
        storage = Storage.for_url(root)
        latencies: list[float] = []
        commits = [0]
        lock = threading.Lock()
        stop = time.monotonic() + seconds

        def writer(i: int) -> None:
            c = CoordinatorClient(proc.endpoint)
            tid = f"bench-{i}"
            pid, ep = c.init_producer_id(tid)
            while time.monotonic() < stop:
                t0 = time.monotonic()
                res = c.reserve(pid, ep, {(topic, p): (0, 1) for p in range(parts)})
                for (t, p), base in res.items():
                    data = encode_batch([(None, b"x" * 100, [], None)], base_offset=base,
                                        producer_id=pid, producer_epoch=ep, base_sequence=0,
                                        transactional=True)
                    storage.put_if_absent(layout.segment_path(t, p, base), data)
                c.confirm(pid, ep, [(t, p, b) for (t, p), b in res.items()])
                t1 = time.monotonic()
                out = c.end_txn(tid, pid, ep, True)
                t2 = time.monotonic()
                pid, ep = out["producer_id"], out["epoch"]
                with lock:
                    commits[0] += 1
                    latencies.append((t2 - t1) * 1000)
                del t0

        t_start = time.monotonic()
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t_start
    latencies.sort()
    return {"system": "txnlog", "partitions": parts, "writers": writers,
            "txn_per_s": commits[0] / elapsed,
            "commit_p50_ms": statistics.median(latencies),
            "commit_p99_ms": latencies[int(len(latencies) * 0.99) - 1]}


def delta_run(uri: str, parts: int, writers: int, seconds: float,
              storage_options: dict[str, str] | None) -> dict[str, Any]:
    import pyarrow as pa
    from deltalake import write_deltalake

    table = pa.table({"partition": pa.array(range(parts), pa.int32()),
                      "value": pa.array([b"x" * 100] * parts)})
    write_deltalake(uri, table, mode="append", storage_options=storage_options)
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def writer() -> None:
        while time.monotonic() < stop:
            t0 = time.monotonic()
            write_deltalake(uri, table, mode="append", storage_options=storage_options)
            with lock:
                latencies.append((time.monotonic() - t0) * 1000)

    t_start = time.monotonic()
    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t_start
    latencies.sort()
    return {"system": "delta", "partitions": parts, "writers": writers,
            "txn_per_s": len(latencies) / elapsed,
            "commit_p50_ms": statistics.median(latencies),
            "commit_p99_ms": latencies[int(len(latencies) * 0.99) - 1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--writers", type=int, default=16)
    ap.add_argument("--delta-writers", type=int, default=4,
                    help="concurrent Delta appenders (more only adds commit conflicts)")
    ap.add_argument("--partitions", default="1,4,16")
    ap.add_argument("--s3", action="store_true", help="also run on a SeaweedFS S3 server")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    envs: list[tuple[str, Any]] = [("file", None)]
    server = None
    if args.s3:
        from s3_server import S3Server
        server = S3Server.start()
        server.create_bucket("bench")
        os.environ.update(server.env())
        envs.append(("s3", server))
    try:
        for env, srv in envs:
            for parts in [int(x) for x in args.partitions.split(",")]:
                if srv is None:
                    base = Path(tempfile.mkdtemp(prefix="txnlog-bench-"))
                    root, delta_uri, opts = (base / "root").as_uri(), str(base / "delta"), None
                else:
                    prefix = uuid.uuid4().hex[:8]
                    root = f"s3://bench/{prefix}/root"
                    delta_uri = f"s3://bench/{prefix}/delta"
                    opts = {"AWS_ENDPOINT_URL": srv.endpoint, "AWS_ACCESS_KEY_ID": srv.access_key,
                            "AWS_SECRET_ACCESS_KEY": srv.secret_key, "AWS_REGION": srv.region,
                            "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
                t = txnlog_run(root, parts, args.writers, args.seconds)
                d = delta_run(delta_uri, parts, args.delta_writers, args.seconds, opts)
                for r in (t, d):
                    r["storage"] = env
                t["ratio_vs_delta"] = t["txn_per_s"] / d["txn_per_s"]
                rows += [t, d]
                if not args.json:
                    print(f"{env:5} P={parts:2} txnlog {t['txn_per_s']:8.1f} txn/s "
                          f"p50 {t['commit_p50_ms']:7.1f} ms p99 {t['commit_p99_ms']:7.1f} ms | "
                          f"delta {d['txn_per_s']:7.1f} txn/s p50 {d['commit_p50_ms']:7.1f} ms "
                          f"| ratio {t['ratio_vs_delta']:5.1f}x", flush=True)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
