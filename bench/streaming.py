"""Streaming throughput and micro-batch latency: txnlog and Spark's parquet stream, one session.

    python bench/streaming.py [--sizes 500000,50000,1000] [--batches 4,8,20] [--rounds 3]
                              [--no-s3] [--no-file] [--pipelines ...] [--json]

For a local folder and (unless --no-s3) the SeaweedFS S3 server of tests/s3_server.py, and
for each records-per-trigger size P: the same rows (16 B key, 100 B value) are written once
into a 4-partition txnlog topic (one Spark batch write) and once as parquet files of exactly
P rows each. Four ``Trigger.AvailableNow`` queries then drain them, P records per trigger
(txnlog: ``maxOffsetsPerTrigger`` = P; parquet: ``maxFilesPerTrigger`` = 1):

- ``txnlog>txnlog``: exactly once, one transaction per micro-batch with the source's
  consumer-group offsets in it (``groupId``), as a Kafka-style pipeline runs;
- ``txnlog>noop``: the source alone;
- ``parquet>parquet``: Spark's own file source and sink (no Python at all) - the baseline;
- ``parquet>txnlog``: the sink alone;
- ``pyceiling>pyceiling``: a Python source that yields ready Arrow batches of txnlog's
  read columns into a Python sink that drops them (bench/python_ceiling.py): what Spark's
  Python Data Source machinery alone costs, i.e. the best any Python source and sink
  could do in this pipeline.

What one query pays is its own: each query starts once the run's processes are idle
(``quiesce``), the input is merged by the coordinator before the timed rounds, and a txnlog
sink's output topic is deleted after its query, so the coordinator's merging of one query's
output never lands in the next query (a long-running stream pays that merging in the
background: bench/merge_isolation.py and docs/performance.md measure what it costs).

One Spark session (``local[2]``) per root; a small parquet -> noop query warms the JVM first
(no Python), so round 1's first txnlog query is the first query that starts Python workers:
it pays what a restarted streaming application pays (worker start, imports, the codec
kernels, the coordinator connection). Round 1 is the "first" round; later rounds are the
steady state (medians), and they run the pipelines in alternating order (A B, B A, ...) so
a host that speeds up or slows down favours none. Reported per pipeline and size: records/s
over the query's micro-batches (rows / sum of triggerExecution), the micro-batch latency
(p50 of triggerExecution), the wall time of the whole query (start to end), and the ratios
to parquet>parquet measured in the same round, and to pyceiling>pyceiling (the Python Data
Source ceiling, same columns; with the range of the rounds' ratios) when it runs; every
micro-batch the query ran counts, one that read no record too (a batch of commit markers
only costs a whole trigger), and the table gives their number. ``--profile`` prints where a
micro-batch's time goes by Spark's own phases (durationMs: latestOffset, queryPlanning,
addBatch, walCommit, commitOffsets), medians over the steady rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Spark binds its driver to this host's first non-loopback address unless told otherwise;
# the bench talks to 127.0.0.0/8 only.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
import python_ceiling  # noqa: E402
from txnlog.coordinator.client.coordinator_client import CoordinatorClient  # noqa: E402

python_ceiling.add_to_python_path()  # before any JVM starts: its Python processes import it

# CPU of a query: the bench process and its descendants (JVM, Python workers, coordinator,
# S3 server), as bench/spark_rw.py counts it; other agents' processes never count.
CPU_MARKER = "txnlog-bench-streaming-cpu"
PIPELINES = ("txnlog>txnlog", "txnlog>noop", "parquet>parquet", "parquet>txnlog",
             "pyceiling>pyceiling")
PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
PARTITIONS = 4  # of the input and output topics
KV = ("CAST(lpad(CAST(id % 100000 AS STRING), 16, '0') AS BINARY) AS key",
      "CAST(rpad(CAST(id AS STRING), 100, 'x') AS BINARY) AS value")


# The S3 server's process (SeaweedFS, on the same cores as Spark): its CPU per query is
# reported apart, being the storage's cost rather than txnlog's or Spark's.
SERVER_PID: int | None = None


def load() -> float:
    return os.getloadavg()[0]


class Inputs:
    """One size's input rows, in txnlog and in parquet, and fresh names for each query."""

    def __init__(self, spark: Any, url: str, endpoint: str, work: Path, per_batch: int,
                 batches: int) -> None:
        self.url, self.endpoint, self.per_batch = url, endpoint, per_batch
        self.work = work
        self.topic = f"in{per_batch}"
        self.parquet = str(work / f"in{per_batch}.parquet")
        rows = (spark.range(per_batch * batches, numPartitions=4).selectExpr(*KV))
        (rows.write.format("txnlog").option("topic", self.topic)
         .option("partitions", str(PARTITIONS))
         .option("coordinator", endpoint).mode("append").save(url))
        # Files of exactly per_batch rows: maxFilesPerTrigger=1 gives per_batch per trigger.
        (rows.coalesce(1).write.option("maxRecordsPerFile", str(per_batch))
         .mode("overwrite").parquet(self.parquet))
        self.rows = per_batch * batches
        self.runs = 0

    def wait_merged(self, limit_s: float = 180.0) -> None:
        """Wait until the coordinator merged the input (idle partitions are merged after
        30 s): a merge of the input must not run inside a timed query, and every round
        reads the same, merged, input."""
        from txnlog.log_format.manifest import read_latest_manifest
        from txnlog.log_format.storage import Storage

        st = Storage.for_url(self.url)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < limit_s:
            if all(read_latest_manifest(st, self.topic, p) is not None
                   for p in range(PARTITIONS)):
                return
            time.sleep(1.0)
        raise RuntimeError(f"input {self.topic} was not merged within {limit_s:.0f} s")

    def fresh(self) -> str:
        self.runs += 1
        return f"{self.per_batch}-{self.runs}"


def quiesce(window_s: float = 0.5, idle_cpu: float = 0.1, limit_s: float = 60.0) -> float:
    """Wait until the run's processes are idle: the coordinator merging the last query's
    output (or Spark finishing its last job's cleanup) must not run into the next query,
    which would charge one pipeline's work to another. Idle: under ``idle_cpu`` of a core
    over ``window_s``. Returns the seconds waited (``limit_s`` at most)."""
    from spark_rw import _run_cpu

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        a = sum(_run_cpu(os.getpid(), CPU_MARKER).values())
        time.sleep(window_s)
        if sum(_run_cpu(os.getpid(), CPU_MARKER).values()) - a < idle_cpu * window_s:
            break
    return time.perf_counter() - t0


def run_query(spark: Any, pipeline: str, inp: Inputs) -> dict[str, Any]:
    """One query; run again (with fresh names) if Spark gave up on a Python worker starting:
    on an overloaded machine a fresh worker can miss the JVM's fixed connect-back timeout
    (``Python worker failed to connect back``), which says nothing about the pipeline."""
    for attempt in range(3):
        try:
            return _run_query(spark, pipeline, inp)
        except Exception as exc:
            if "connect back" not in str(exc) or attempt == 2:
                raise
            print(f"# {pipeline}: a Python worker missed Spark's connect-back timeout "
                  f"(load {load():.1f}); running the query again", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def _run_query(spark: Any, pipeline: str, inp: Inputs) -> dict[str, Any]:
    name = inp.fresh()
    ckpt = str(inp.work / f"ckpt-{pipeline.replace('>', '-')}-{name}")
    src, sink = pipeline.split(">")
    if src == "txnlog":
        df = (spark.readStream.format("txnlog").option("subscribe", inp.topic)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(inp.per_batch))
              .option("groupId", f"bench-{name}").option("coordinator", inp.endpoint)
              .load(inp.url).select("key", "value"))
    elif src == "pyceiling":
        df = (spark.readStream.format("pyceiling").option("rows", str(inp.rows))
              .option("perTrigger", str(inp.per_batch)).load().select("key", "value"))
    else:
        df = (spark.readStream.schema("key binary, value binary")
              .option("maxFilesPerTrigger", "1").parquet(inp.parquet))
    w = df.writeStream.option("checkpointLocation", ckpt).trigger(availableNow=True)
    if sink == "txnlog":
        w = (w.format("txnlog").option("topic", f"out{name}")
             .option("partitions", str(PARTITIONS))
             .option("coordinator", inp.endpoint))
        target = inp.url
    elif sink == "pyceiling":
        w, target = w.format("pyceiling"), None
    elif sink == "noop":
        w, target = w.format("noop"), None
    else:
        w, target = w.format("parquet"), str(inp.work / f"out-{name}.parquet")
    from spark_rw import _run_cpu

    quiesce()
    cpu0 = _run_cpu(os.getpid(), CPU_MARKER)
    t0 = time.perf_counter()
    q = w.start(target) if target else w.start()
    q.awaitTermination()
    wall = time.perf_counter() - t0
    cpu1 = _run_cpu(os.getpid(), CPU_MARKER)
    if sink == "txnlog":
        # What the coordinator would do with the output later (merging it once idle) must
        # not land in another pipeline's query: the output goes. Its own merging during
        # the query counted above.
        CoordinatorClient(inp.endpoint).delete_topic(f"out{name}")
    # the S3 server is one of the run's processes: its share of the same reading
    server_cpu = cpu1.get(SERVER_PID, 0.0) - cpu0.get(SERVER_PID, 0.0) if SERVER_PID else 0.0
    cpu = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items())
    # every micro-batch that ran (an AvailableNow query's last progress may run none)
    progress = [p for p in q.recentProgress if "addBatch" in p["durationMs"]]
    if len(progress) < 2:
        raise RuntimeError(f"{pipeline}: {len(progress)} micro-batches (raise --batches)")
    trig = [p["durationMs"]["triggerExecution"] for p in progress]
    rows = sum(p["numInputRows"] for p in progress)
    phases = {ph: statistics.median(p["durationMs"].get(ph, 0) for p in progress)
              for ph in PHASES}
    return {"records": rows, "batches": len(progress), "wall_s": wall, "cpu_s": cpu,
            "server_cpu_s": server_cpu,
            "batch_phases": [{"rows": p["numInputRows"], **p["durationMs"]} for p in progress],
            "records_per_s": rows / (sum(trig) / 1000), "batch_ms": statistics.median(trig),
            "phases": phases, "load": load()}


def bench_root(root_name: str, url: str, endpoint: str, work: Path, sizes: list[int],
               batches: list[int], rounds: int, pipelines: list[str]) -> list[dict[str, Any]]:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("txnlog-bench-streaming")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    python_ceiling.register(spark)
    try:
        # JVM warm-up without Python: a small parquet stream into noop.
        warm = work / "warm.parquet"
        spark.range(1000).selectExpr(*KV).write.mode("overwrite").parquet(str(warm))
        (spark.readStream.schema("key binary, value binary").parquet(str(warm))
         .writeStream.format("noop").option("checkpointLocation", str(work / "warm-ckpt"))
         .trigger(availableNow=True).start().awaitTermination())
        # The inputs are written through Spark before the timed rounds: that starts Python
        # workers. Stop them so round 1 meets fresh workers, as a restarted application does.
        inputs = {p: Inputs(spark, url, endpoint, work, p, b)
                  for p, b in zip(sizes, batches, strict=True)}
        for inp in inputs.values():
            inp.wait_merged()
        spark.stop()
        spark = (SparkSession.builder.master("local[2]").appName("txnlog-bench-streaming")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g")
                 .config("spark.sql.shuffle.partitions", "4").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        python_ceiling.register(spark)
        (spark.readStream.schema("key binary, value binary").parquet(str(warm))
         .writeStream.format("noop").option("checkpointLocation", str(work / "warm-ckpt2"))
         .trigger(availableNow=True).start().awaitTermination())
        out = []
        for r in range(rounds):
            # Steady rounds alternate the pipelines' order (A B, then B A), so a host that
            # speeds up or slows down over a round favours no pipeline in the ratios.
            order = pipelines if r % 2 == 0 else pipelines[::-1]
            for size in sizes:
                for pipeline in order:
                    res = run_query(spark, pipeline, inputs[size])
                    res.update(root=root_name, round=r + 1, per_trigger=size,
                               pipeline=pipeline)
                    out.append(res)
                    print(f"# {root_name} round {r + 1} {pipeline:<16} {size:>7,}/trigger: "
                          f"{res['records_per_s']:>10,.0f} rec/s in {res['batches']} "
                          f"micro-batches, batch p50 "
                          f"{res['batch_ms']:>6.0f} ms, wall {res['wall_s']:5.1f} s, "
                          f"cpu {res['cpu_s']:5.1f} s (S3 server {res['server_cpu_s']:4.1f}), "
                          f"load {res['load']:.1f}", file=sys.stderr, flush=True)
        return out
    finally:
        spark.stop()


def summarize(raw: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Per root, size and pipeline: round 1 (first) and the median of later rounds (steady),
    with per-round ratios to parquet>parquet of the same round, root and size."""
    def find(root: str, size: int, pipeline: str, rnd: int) -> dict[str, Any] | None:
        for r in raw:
            if (r["root"], r["per_trigger"], r["pipeline"], r["round"]) == \
                    (root, size, pipeline, rnd):
                return r
        return None

    rows = []
    keys = sorted({(r["root"], r["per_trigger"], r["pipeline"]) for r in raw},
                  key=lambda k: (k[0], -k[1], PIPELINES.index(k[2])))
    steady_rounds = range(2, rounds + 1) if rounds > 1 else range(1, 2)
    for root, size, pipeline in keys:
        first = find(root, size, pipeline, 1)
        steady = [x for i in steady_rounds if (x := find(root, size, pipeline, i))]
        ratios_tp, ratios_lat, ratios_ceil = [], [], []
        for i in steady_rounds:
            mine, base = find(root, size, pipeline, i), find(root, size, "parquet>parquet", i)
            if mine and base:
                ratios_tp.append(mine["records_per_s"] / base["records_per_s"])
                ratios_lat.append(mine["batch_ms"] / base["batch_ms"])
            ceil = find(root, size, "pyceiling>pyceiling", i)
            if mine and ceil:
                ratios_ceil.append(mine["records_per_s"] / ceil["records_per_s"])
        row: dict[str, Any] = {
            "root": root, "per_trigger": size, "pipeline": pipeline,
            "first_records_per_s": first["records_per_s"] if first else float("nan"),
            "first_wall_s": first["wall_s"] if first else float("nan"),
            "first_cpu_s": first["cpu_s"] if first else float("nan"),
            "cpu_s": statistics.median(x["cpu_s"] for x in steady),
            "server_cpu_s": statistics.median(x.get("server_cpu_s", 0.0) for x in steady),
            "records_per_s": statistics.median(x["records_per_s"] for x in steady),
            "batch_ms": statistics.median(x["batch_ms"] for x in steady),
            "wall_s": statistics.median(x["wall_s"] for x in steady),
            "vs_parquet_records_per_s": statistics.median(ratios_tp) if ratios_tp else None,
            "vs_parquet_batch_ms": statistics.median(ratios_lat) if ratios_lat else None,
            "vs_ceiling_records_per_s": statistics.median(ratios_ceil) if ratios_ceil
            else None,
            "vs_ceiling_range": (min(ratios_ceil), max(ratios_ceil)) if ratios_ceil else None,
            "batches": sorted({x["batches"] for x in steady}),
            "load": statistics.median(x["load"] for x in steady),
        }
        row["first_extra_s"] = row["first_wall_s"] - row["wall_s"]
        row["first_extra_cpu_s"] = row["first_cpu_s"] - row["cpu_s"]
        for ph in PHASES:
            row[f"{ph}_ms"] = statistics.median(x["phases"][ph] for x in steady)
        rows.append(row)
    return rows


def main() -> None:
    global SERVER_PID
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="500000,50000,1000",
                    help="records per trigger, comma-separated (the first size runs first)")
    ap.add_argument("--batches", default="4,8,20", help="micro-batches per query, per size")
    ap.add_argument("--rounds", type=int, default=3, help="round 1 = first query; >= 2")
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-file", action="store_true")
    ap.add_argument("--profile", action="store_true", help="print Spark's per-phase medians")
    ap.add_argument("--json", action="store_true", help="print the summary rows as JSON last")
    ap.add_argument("--raw", type=Path, help="write every query's result, with each "
                    "micro-batch's durationMs, to this JSON file")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    pipelines = [p.strip() for p in args.pipelines.split(",")]
    if len(batches) != len(sizes) or any(p not in PIPELINES for p in pipelines):
        ap.error("--batches needs one count per size; pipelines are " + ", ".join(PIPELINES))
    if "parquet>parquet" not in pipelines:
        pipelines.insert(0, "parquet>parquet")  # the baseline of every ratio

    tmp = Path(tempfile.mkdtemp(prefix="txnlog-bench-stream-"))
    server = None
    coords = []
    raw: list[dict[str, Any]] = []
    load_start = os.getloadavg()
    try:
        from coordinator_proc import CoordinatorProc

        roots = [] if args.no_file else [("file", (tmp / "root").as_uri())]
        if not args.no_s3:
            from s3_server import S3Server

            server = S3Server.start(tmp / "weed")
            server.create_bucket("bench")
            SERVER_PID = server.process.pid
            os.environ.update(server.env())  # before the JVM: workers inherit it
            roots.append(("s3", "s3://bench/stream"))
        os.environ["PYSPARK_PYTHON"] = sys.executable
        for name, url in roots:
            if name == "file":
                (tmp / "root").mkdir()
            coord = CoordinatorProc(url, log_path=tmp / f"coord-{name}.log")
            coords.append(coord)
            endpoint = coord.wait_healthy()
            work = tmp / name
            work.mkdir()
            raw += bench_root(name, url, endpoint, work, sizes, batches, args.rounds,
                              pipelines)
    finally:
        for c in coords:
            c.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    if args.raw:
        args.raw.write_text(json.dumps(raw, indent=1))
    rows = summarize(raw, args.rounds)
    print(f"16 B keys, 100 B values, {PARTITIONS} partitions, Trigger.AvailableNow, local[2], "
          f"cpus={os.cpu_count()}, {args.rounds} rounds (1 = first query, then steady: "
          f"medians); load {load_start[0]:.1f} at start, {load():.1f} at end")
    print("| root | per trigger | pipeline | micro-batches | steady rec/s | vs parquet>parquet |"
          " vs pyceiling>pyceiling (rounds' range) | batch p50 ms |"
          " vs parquet>parquet | first rec/s | wall s: first / steady (extra) |"
          " CPU s: first / steady (extra) | of which S3 server (steady) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        tp = r["vs_parquet_records_per_s"]
        lat = r["vs_parquet_batch_ms"]
        ceil = r["vs_ceiling_records_per_s"]
        spread = r["vs_ceiling_range"]
        ceil_cell = "-" if ceil is None else \
            f"{ceil:.2f}x ({spread[0]:.2f}-{spread[1]:.2f})"
        print(f"| {r['root']} | {r['per_trigger']:,} | {r['pipeline']} | "
              f"{'/'.join(str(n) for n in r['batches'])} | "
              f"{r['records_per_s']:,.0f} | {tp:.2f}x | "
              f"{ceil_cell} | {r['batch_ms']:.0f} | {lat:.2f}x | "
              f"{r['first_records_per_s']:,.0f} | {r['first_wall_s']:.1f} / "
              f"{r['wall_s']:.1f} ({r['first_extra_s']:+.1f}) | {r['first_cpu_s']:.1f} / "
              f"{r['cpu_s']:.1f} ({r['first_extra_cpu_s']:+.1f}) | {r['server_cpu_s']:.1f} |")
    if args.profile:
        print("\nWhere a micro-batch's time goes (Spark's durationMs, ms, steady medians):")
        print("| root | per trigger | pipeline | " + " | ".join(PHASES) + " |")
        print("|---|---:|---|" + "---:|" * len(PHASES))
        for r in rows:
            print(f"| {r['root']} | {r['per_trigger']:,} | {r['pipeline']} | "
                  + " | ".join(f"{r[f'{ph}_ms']:.0f}" for ph in PHASES) + " |")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
