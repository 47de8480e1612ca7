"""Committed transactions/s and commit latency through a real coordinator, vs Delta Lake.

What it measures: committed transactions per second inside a fixed window, on ONE machine
where the coordinator and all writers share the cores (so the number is bounded by the
machine's free CPU as much as by the coordinator: see the CPU lines it prints).

Workload: W writers (``--procs`` processes x ``--threads`` threads, so client-side Python and
its GIL are not what is measured), each running transactions that write one small record
batch into each of P partitions: reserve -> put-if-absent of the P batches (in parallel) ->
EndTxn(commit, written=...) — two RPCs, the Confirm rides in EndTxn as in
``TransactionalProducer.commit_transaction`` — for P in 1/4/16, on local files and (with
--s3) on a SeaweedFS S3 server. W defaults to 64: a commit waits for three sequential
storage round trips (each an fsync pair locally), so with W = 32 the writers' own cycle
time, not the coordinator, capped throughput around 500 txn/s.
The same transactions as Delta Lake appends (delta-rs ``write_deltalake``, one
append of P rows each) run on the same storage in the same run, for the ratio.

Besides txn/s and EndTxn latency it reports, from the coordinator's /metrics:
- sequential storage round trips on the EndTxn critical path (mean and max) and the storage
  calls on it, counted where the engine makes them (``CommitTrace``);
- objects written per committed transaction: coordinator log objects, markers, .txnindex,
  fences, stable snapshots, plus the writers' data objects.
- CPU per committed transaction: coordinator (and its event-loop thread alone), writers;
  and, derived and labelled as such, the txn/s the coordinator's CPU would allow if the
  writers ran on another machine (min of 1000 / event-loop ms and cores x 1000 /
  coordinator ms) — a statement about the coordinator, not a measurement;
- RPCs per committed transaction (from the coordinator's request counters).
Each point runs ``--repeat`` times; the table shows medians. The machine load
(``os.getloadavg()``) is printed with every point: the numbers mean little without it.

    python bench/coordinator.py [--seconds 5] [--procs 4] [--threads 16] [--repeat 3] [--s3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import urllib3
from coordinator_proc import CoordinatorProc
from prometheus_client.parser import text_string_to_metric_families
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.log_format import layout
from txnlog.log_format.codec.records import encode_batch
from txnlog.log_format.storage import Storage

OBJECT_KINDS = ("marker", "txnindex", "fence", "stable")


# ------------------------------------------------------------------------------ txnlog
def _txn_writer_proc(endpoint: str, root: str, topic: str, parts: int, threads: int,
                     seconds: float, barrier: Any, start: Any, out: Any) -> None:
    """One writer process: ``threads`` transactional ids, each committing in a loop."""
    storage = Storage.for_url(root)
    io = ThreadPoolExecutor(max_workers=max(1, min(16, parts * threads)))
    results: list[tuple[float, float]] = []  # (end wall time, EndTxn latency ms)
    puts = [0]
    lock = threading.Lock()
    inited = threading.Barrier(threads + 1)
    go = threading.Barrier(threads + 1)

    def run(i: int) -> None:
        c = CoordinatorClient(endpoint)
        tid = f"bench-{os.getpid()}-{i}"
        pid, ep = c.init_producer_id(tid)
        value = b"x" * 100
        inited.wait()
        go.wait()
        stop = start.value + seconds
        local: list[tuple[float, float]] = []
        n_puts = 0
        while time.time() < stop:
            res = c.reserve(pid, ep, {(topic, p): (0, 1) for p in range(parts)})

            def put(item: tuple[tuple[str, int], int], pid: int = pid, ep: int = ep) -> bool:
                (t, p), base = item
                data = encode_batch([(None, value, [], None)], base_offset=base,
                                    producer_id=pid, producer_epoch=ep, base_sequence=0,
                                    transactional=True)
                return storage.put_if_absent(layout.segment_path(t, p, base), data)

            if parts == 1:
                ok = [put(next(iter(res.items())))]
            else:
                ok = list(io.map(put, res.items()))
            if not all(ok):
                raise RuntimeError("a data object was fenced: the bench is broken")
            n_puts += len(ok)
            t1 = time.monotonic()
            # Confirm rides in EndTxn (what TransactionalProducer.commit_transaction does).
            answer = c.end_txn(tid, pid, ep, True,
                               written=[(t, p, b) for (t, p), b in res.items()])
            t2 = time.monotonic()
            pid, ep = answer["producer_id"], answer["epoch"]
            local.append((time.time(), (t2 - t1) * 1000))
        with lock:
            results.extend(local)
            puts[0] += n_puts

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    inited.wait()
    barrier.wait()  # every producer id of every process is initialised ...
    barrier.wait()  # ... and the parent has set start.value: go
    go.wait()
    cpu0 = _self_cpu()
    for w in workers:
        w.join()
    out.put({"results": results, "puts": puts[0], "cpu": _self_cpu() - cpu0})


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _metrics(endpoint: str) -> dict[str, float]:
    """Flat {name{labels}: value} of the coordinator's /metrics."""
    body = urllib3.request("GET", f"{endpoint}/metrics", timeout=10).data.decode()
    flat: dict[str, float] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            flat[f"{s.name}{{{labels}}}"] = s.value
    return flat


def _delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def _max_bucket(after: dict[str, float], before: dict[str, float], name: str) -> float:
    """The smallest histogram bucket bound holding every observation of the interval."""
    total = _delta(after, before, f"{name}_count{{}}")
    bounds = sorted(float(k.split("le=")[1].rstrip("}")) for k in after
                    if k.startswith(f"{name}_bucket{{"))
    for le in bounds:
        label = "+Inf" if le == float("inf") else repr(le)
        if _delta(after, before, f"{name}_bucket{{le={label}}}") >= total:
            return le
    return float("nan")


def txnlog_run(root: str, parts: int, procs: int, threads: int, seconds: float
               ) -> dict[str, Any]:
    log = Path(tempfile.gettempdir()) / f"bench-coord-{os.getpid()}.log"
    with CoordinatorProc(root, log_path=log, extra=["--log-level", "WARNING"]) as proc:
        assert proc.endpoint is not None
        topic = f"b{parts}"
        proc.client().create_topic(topic, parts)
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(procs + 1)
        start = ctx.Value("d", 0.0)
        out = ctx.Queue()
        children = [ctx.Process(target=_txn_writer_proc,
                                args=(proc.endpoint, root, topic, parts, threads, seconds,
                                      barrier, start, out)) for _ in range(procs)]
        for ch in children:
            ch.start()
        barrier.wait(timeout=600)  # every writer is ready (processes started, ids inited)
        before = _metrics(proc.endpoint)
        load0 = os.getloadavg()[0]
        start.value = time.time() + 0.05
        t0 = start.value
        coord_cpu0 = _proc_cpu(proc.pid)
        loop_cpu0 = _proc_cpu(proc.pid, proc.pid)
        barrier.wait(timeout=60)  # go
        reports = [out.get(timeout=seconds + 300) for _ in children]
        for ch in children:
            ch.join()
        after = _metrics(proc.endpoint)
        load1 = os.getloadavg()[0]
        coord_cpu = _proc_cpu(proc.pid) - coord_cpu0
        loop_cpu = _proc_cpu(proc.pid, proc.pid) - loop_cpu0
    cpu = coord_cpu + sum(r["cpu"] for r in reports)
    ends = sorted((end, lat) for r in reports for end, lat in r["results"])
    in_window = [lat for end, lat in ends if end <= t0 + seconds]
    lat = sorted(lat for _, lat in ends)
    commits = len(ends)
    tr = "txnlog_coordinator_commit_round_trips"
    calls = "txnlog_coordinator_commit_storage_calls"
    n_rt = _delta(after, before, f"{tr}_count{{}}") or 1.0
    objects = {k: _delta(after, before, f"txnlog_coordinator_objects_written_total{{kind={k}}}")
               for k in OBJECT_KINDS}
    objects["log"] = _delta(after, before, "txnlog_coordinator_log_objects_written{}")
    objects["data"] = float(sum(r["puts"] for r in reports))
    records = _delta(after, before, "txnlog_coordinator_log_records_written{}")
    return {"system": "txnlog", "partitions": parts, "writers": procs * threads,
            "txn_per_s": len(in_window) / seconds,
            "commit_p50_ms": statistics.median(lat),
            "commit_p99_ms": lat[max(0, int(len(lat) * 0.99) - 1)],
            "round_trips_mean": _delta(after, before, f"{tr}_sum{{}}") / n_rt,
            "round_trips_max": _max_bucket(after, before, tr),
            "critical_path_calls": _delta(after, before, f"{calls}_sum{{}}") / n_rt,
            "objects_per_txn": sum(objects.values()) / max(1, commits),
            "objects": {k: v / max(1, commits) for k, v in objects.items()},
            "log_records_per_object": records / max(1.0, objects["log"]),
            "cpu_ms_per_txn": cpu * 1000 / max(1, commits),
            "coordinator_cpu_ms_per_txn": coord_cpu * 1000 / max(1, commits),
            # The event-loop thread: the one part of the coordinator that cannot spread
            # over cores, so 1000 / this is its throughput ceiling.
            "coordinator_loop_cpu_ms_per_txn": loop_cpu * 1000 / max(1, commits),
            "writer_cpu_ms_per_txn": (cpu - coord_cpu) * 1000 / max(1, commits),
            "rpcs_per_txn": sum(_delta(after, before, k) for k in after
                                if k.startswith("txnlog_coordinator_requests_total{"))
            / max(1, commits),
            "load": [round(load0, 2), round(load1, 2)]}


def _ceiling(t: dict[str, Any]) -> float:
    """txn/s the coordinator's measured CPU per transaction allows on this machine if it
    had it to itself: its event loop is one thread; the rest (storage calls) spread."""
    loop = max(t["coordinator_loop_cpu_ms_per_txn"], 1e-9)
    total = max(t["coordinator_cpu_ms_per_txn"], 1e-9)
    return min(1000 / loop, (os.cpu_count() or 1) * 1000 / total)


def _proc_cpu(pid: int, tid: int | None = None) -> float:
    """CPU seconds (user + sys) a live process (or one of its threads) used (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------- delta
def _delta_writer_proc(uri: str, parts: int, threads: int, seconds: float,
                       opts: dict[str, str] | None, barrier: Any, start: Any, out: Any
                       ) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    table = pa.table({"partition": pa.array(range(parts), pa.int32()),
                      "value": pa.array([b"x" * 100] * parts)})
    from deltalake.exceptions import CommitFailedError

    results: list[tuple[float, float]] = []
    failed = [0]
    lock = threading.Lock()

    def run() -> None:
        stop = start.value + seconds
        local = []
        while time.time() < stop:
            t0 = time.monotonic()
            try:
                write_deltalake(uri, table, mode="append", storage_options=opts)
            except CommitFailedError:  # gave up after its conflict retries: not committed
                with lock:
                    failed[0] += 1
                continue
            local.append((time.time(), (time.monotonic() - t0) * 1000))
        with lock:
            results.extend(local)

    barrier.wait()  # ready (imports done)
    barrier.wait()  # start.value is set
    cpu0 = _self_cpu()
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put({"results": results, "cpu": _self_cpu() - cpu0, "failed": failed[0]})


def _count_objects(uri: str, opts: dict[str, str] | None) -> int:
    if not uri.startswith("s3://"):
        return sum(len(files) for _, _, files in os.walk(uri))
    import s3fs

    fs = s3fs.S3FileSystem(key=opts["AWS_ACCESS_KEY_ID"], secret=opts["AWS_SECRET_ACCESS_KEY"],
                           client_kwargs={"endpoint_url": opts["AWS_ENDPOINT_URL"]},
                           skip_instance_cache=True, use_listings_cache=False)
    return len(fs.find(uri[len("s3://"):]))


def delta_run(uri: str, parts: int, procs: int, threads: int, seconds: float,
              opts: dict[str, str] | None) -> dict[str, Any]:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = pa.table({"partition": pa.array(range(parts), pa.int32()),
                      "value": pa.array([b"x" * 100] * parts)})
    write_deltalake(uri, table, mode="append", storage_options=opts)
    objects0 = _count_objects(uri, opts)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    start = ctx.Value("d", 0.0)
    out = ctx.Queue()
    children = [ctx.Process(target=_delta_writer_proc,
                            args=(uri, parts, threads, seconds, opts, barrier, start, out))
                for _ in range(procs)]
    for ch in children:
        ch.start()
    barrier.wait(timeout=600)
    load0 = os.getloadavg()[0]
    start.value = time.time()
    t0 = start.value
    barrier.wait(timeout=60)
    reports = [out.get(timeout=seconds + 300) for _ in children]
    for ch in children:
        ch.join()
    ends = sorted((end, lat) for r in reports for end, lat in r["results"])
    in_window = [lat for end, lat in ends if end <= t0 + seconds]
    lat = sorted(lat for _, lat in ends)
    version = DeltaTable(uri, storage_options=opts).version()
    if version != len(ends):  # every append is one version: lost or doubled commits?
        raise RuntimeError(f"delta table at version {version} after {len(ends)} appends")
    objects = _count_objects(uri, opts) - objects0
    cpu = sum(r["cpu"] for r in reports)
    return {"system": "delta", "partitions": parts, "writers": procs * threads,
            "txn_per_s": len(in_window) / seconds,
            "commit_p50_ms": statistics.median(lat),
            "commit_p99_ms": lat[max(0, int(len(lat) * 0.99) - 1)],
            "objects_per_txn": objects / max(1, len(ends)),
            "cpu_ms_per_txn": cpu * 1000 / max(1, len(ends)),
            "commit_failures": sum(r["failed"] for r in reports),
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}


# -------------------------------------------------------------------------------- main
def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric field over repeated runs (txn/s picks the run shown)."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and key not in ("partitions", "writers"):
            out[key] = statistics.median(r[key] for r in rows)
    out["txn_per_s_runs"] = [round(r["txn_per_s"], 1) for r in rows]
    out["load"] = [r["load"] for r in rows]
    return out


def _fmt_load(loads: list[list[float]]) -> str:
    flat = [x for pair in loads for x in pair]
    return f"{min(flat):.1f}-{max(flat):.1f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ("storage", "P", "txnlog txn/s", "p50 ms", "p99 ms", "RTs (max)", "calls",
            "obj/txn", "delta txn/s", "delta p50", "delta obj/txn", "ratio", "load")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|")
    for t in rows:
        if t["system"] != "txnlog":
            continue
        d = t["delta"]
        print(f"| {t['storage']} | {t['partitions']} | {t['txn_per_s']:.0f} "
              f"({'/'.join(f'{x:.0f}' for x in t['txn_per_s_runs'])}) | "
              f"{t['commit_p50_ms']:.1f} | {t['commit_p99_ms']:.1f} | "
              f"{t['round_trips_mean']:.2f} ({t['round_trips_max']:.0f}) | "
              f"{t['critical_path_calls']:.1f} | {t['objects_per_txn']:.2f} | "
              f"{d['txn_per_s']:.0f} | {d['commit_p50_ms']:.0f} | {d['objects_per_txn']:.1f} | "
              f"{t['txn_per_s'] / d['txn_per_s']:.1f}x | "
              f"{_fmt_load(t['load'] + d['load'])} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--procs", type=int, default=4, help="writer processes (txnlog)")
    ap.add_argument("--threads", type=int, default=16, help="writer threads per process")
    ap.add_argument("--delta-procs", type=int, default=4,
                    help="Delta appender processes (1 thread each; more only adds conflicts)")
    ap.add_argument("--partitions", default="1,4,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--s3", action="store_true", help="also run on a SeaweedFS S3 server")
    ap.add_argument("--no-file", action="store_true", help="skip local files")
    ap.add_argument("--no-delta", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    envs: list[tuple[str, Any]] = [] if args.no_file else [("file", None)]
    server = None
    if args.s3:
        from s3_server import S3Server
        server = S3Server.start()
        server.create_bucket("bench")
        os.environ.update(server.env())
        envs.append(("s3", server))
    print(f"# measured: committed txn/s in a {args.seconds:.0f}s window, coordinator and "
          f"{args.procs}x{args.threads} txnlog writers (reserve + put + EndTxn, 2 RPCs) on "
          f"this machine's {os.cpu_count()} cpus together; load at start "
          f"{os.getloadavg()}, delta writers {args.delta_procs}, {args.repeat} runs per point",
          flush=True)
    rows = []
    ncpu = os.cpu_count() or 1
    try:
        for env, srv in envs:
            for parts in [int(x) for x in args.partitions.split(",")]:
                t_runs, d_runs = [], []
                for _ in range(args.repeat):
                    if srv is None:
                        base = Path(tempfile.mkdtemp(prefix="txnlog-bench-"))
                        root, delta_uri, opts = (base / "root").as_uri(), str(base / "delta"), \
                            None
                    else:
                        prefix = uuid.uuid4().hex[:8]
                        root = f"s3://bench/{prefix}/root"
                        delta_uri = f"s3://bench/{prefix}/delta"
                        # delta-rs >= 1.0 commits with a conditional PUT (If-None-Match: *)
                        # on S3; SeaweedFS honours it, so no locking provider and no unsafe
                        # rename: concurrent appenders are safe (checked: version == appends).
                        opts = {"AWS_ENDPOINT_URL": srv.endpoint,
                                "AWS_ACCESS_KEY_ID": srv.access_key,
                                "AWS_SECRET_ACCESS_KEY": srv.secret_key,
                                "AWS_REGION": srv.region, "AWS_ALLOW_HTTP": "true",
                                "conditional_put": "etag"}
                    t_runs.append(txnlog_run(root, parts, args.procs, args.threads,
                                             args.seconds))
                    if not args.no_delta:
                        d_runs.append(delta_run(delta_uri, parts, args.delta_procs, 1,
                                                args.seconds, opts))
                    if not args.json:
                        t = t_runs[-1]
                        print(f"# {env} P={parts}: txnlog {t['txn_per_s']:.0f} txn/s p50 "
                              f"{t['commit_p50_ms']:.1f} ms, RTs {t['round_trips_mean']:.2f}, "
                              f"obj/txn {t['objects_per_txn']:.2f} "
                              f"({', '.join(f'{k} {v:.2f}' for k, v in t['objects'].items())})"
                              f", log records/object {t['log_records_per_object']:.1f}"
                              f", RPCs/txn {t['rpcs_per_txn']:.2f}"
                              f", CPU ms/txn {t['cpu_ms_per_txn']:.2f} (coordinator "
                              f"{t['coordinator_cpu_ms_per_txn']:.2f} of which event loop "
                              f"{t['coordinator_loop_cpu_ms_per_txn']:.2f}, writers "
                              f"{t['writer_cpu_ms_per_txn']:.2f})"
                              + (f" | delta {d_runs[-1]['txn_per_s']:.0f} txn/s"
                                 if d_runs else "")
                              + f" | load {t['load']}", flush=True)
                        print(f"#   not measured, derived: with the writers on another "
                              f"machine the coordinator's CPU would allow ~"
                              f"{_ceiling(t):.0f} txn/s here (event loop "
                              f"{1000 / max(t['coordinator_loop_cpu_ms_per_txn'], 1e-9):.0f}"
                              f", all {os.cpu_count()} cores "
                              f"{ncpu * 1000 / max(t['coordinator_cpu_ms_per_txn'], 1e-9):.0f})",
                              flush=True)
                t = _median_row(t_runs)
                t["storage"] = env
                if d_runs:
                    d = _median_row(d_runs)
                    d["storage"] = env
                    t["delta"] = d
                    t["ratio_vs_delta"] = t["txn_per_s"] / d["txn_per_s"]
                    rows.append(d)
                rows.append(t)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        print(json.dumps(rows, indent=1))
    elif not args.no_delta:
        print_table(rows)
    print(f"# load at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
