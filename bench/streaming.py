"""End-to-end streaming throughput (txnlog -> Spark -> txnlog) and the sink's commit overhead.

    python bench/streaming.py [--records 400000] [--per-batch 100000] [--no-s3]

For a local folder and (unless --no-s3) the SeaweedFS S3 server of tests/s3_server.py:
writes ``--records`` records (16 B key, 100 B value, 4 partitions) with a Spark batch
write, then drains them with a ``Trigger.AvailableNow`` query, ``maxOffsetsPerTrigger =
--per-batch``, that rewrites every value into another txnlog topic — one transaction per
micro-batch. Prints records/s over the query's batches and, per batch, the time spent in
the sink's ``commit()`` (add_offsets + EndTxn: Prepare, markers, Complete + stable
snapshot) against the whole micro-batch; commit times come from the sink's test hook
(``TXNLOG_STREAM_TEST_DIR`` files' times), batch times from Spark's query progress.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def run(spark, url: str, endpoint: str, tmp: Path, records: int, per_batch: int  # type: ignore[no-untyped-def]
        ) -> dict[str, float]:
    from txnlog.coordinator.client import CoordinatorClient

    CoordinatorClient(endpoint).create_topic("in", 4, exist_ok=True)
    (spark.range(records, numPartitions=4)
     .selectExpr("CAST(lpad(CAST(id % 100000 AS STRING), 16, '0') AS BINARY) AS key",
                 "CAST(rpad(CAST(id AS STRING), 100, 'x') AS BINARY) AS value")
     .write.format("txnlog").option("topic", "in").option("coordinator", endpoint)
     .mode("append").save(url))

    hooks = Path(os.environ["TXNLOG_STREAM_TEST_DIR"])
    for f in hooks.iterdir():
        f.unlink()
    t0 = time.perf_counter()
    q = (spark.readStream.format("txnlog").option("subscribe", "in")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_batch))
         .option("groupId", "bench").option("coordinator", endpoint).load(url)
         .selectExpr("key", "concat(value, CAST('!' AS BINARY)) AS value")
         .writeStream.format("txnlog").option("topic", "out").option("coordinator", endpoint)
         .option("checkpointLocation", str(tmp / "ckpt")).trigger(availableNow=True)
         .start(url))
    q.awaitTermination()
    wall = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    batch_ms = {p["batchId"]: p["durationMs"]["triggerExecution"] for p in progress}
    commit_ms = {}
    for b in batch_ms:
        start, end = hooks / f"reached-before_commit-{b}", hooks / f"reached-after_commit-{b}"
        if start.exists() and end.exists():
            commit_ms[b] = (end.stat().st_mtime - start.stat().st_mtime) * 1000
    rows = sum(p["numInputRows"] for p in progress)
    busy = sum(batch_ms.values()) / 1000
    return {"records": rows, "batches": len(progress), "wall_s": wall,
            "records_per_s": rows / busy if busy else 0.0,
            "batch_ms": statistics.median(batch_ms.values()),
            "commit_ms": statistics.median(commit_ms.values()) if commit_ms else float("nan"),
            "commit_share": sum(commit_ms.values()) / sum(batch_ms.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--per-batch", type=int, default=100_000)
    ap.add_argument("--no-s3", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="txnlog-bench-stream-"))
    server = None
    coords = []
    try:
        from coordinator_proc import CoordinatorProc

        roots = [("file", (tmp / "root").as_uri())]
        if not args.no_s3:
            from s3_server import S3Server

            server = S3Server.start(tmp / "weed")
            server.create_bucket("bench")
            os.environ.update(server.env())  # before the JVM: workers inherit it
            roots.append(("s3", "s3://bench/stream"))
        os.environ["PYSPARK_PYTHON"] = sys.executable
        # The sink's commit() runs in planner workers, which inherit the JVM's environment.
        (tmp / "hooks").mkdir()
        os.environ["TXNLOG_STREAM_TEST_DIR"] = str(tmp / "hooks")
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("txnlog-bench-streaming")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g")
                 .config("spark.sql.shuffle.partitions", "4").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        results = {}
        for name, url in roots:
            if name == "file":
                (tmp / "root").mkdir()
            coord = CoordinatorProc(url, log_path=tmp / f"coord-{name}.log")
            coords.append(coord)
            endpoint = coord.wait_healthy()
            work = tmp / name
            work.mkdir()
            results[name] = run(spark, url, endpoint, work, args.records, args.per_batch)
        spark.stop()
    finally:
        for c in coords:
            c.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{args.records:,} records (16 B key, 100 B value, 4 partitions), "
          f"maxOffsetsPerTrigger={args.per_batch:,}, local[2], cpus={os.cpu_count()}, "
          f"load avg {os.getloadavg()[0]:.1f}")
    print(f"{'root':<6} {'batches':>7} {'records/s':>11} {'batch p50':>10} {'commit p50':>11} "
          f"{'commit share':>13} {'wall s':>7}")
    for name, r in results.items():
        print(f"{name:<6} {r['batches']:>7} {r['records_per_s']:>11,.0f} "
              f"{r['batch_ms']:>8.0f}ms {r['commit_ms']:>9.0f}ms {r['commit_share']:>12.1%} "
              f"{r['wall_s']:>7.1f}")


if __name__ == "__main__":
    main()
