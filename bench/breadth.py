"""Breadth: what a one-partition commit costs with 11 vs 20,001 partitions in the root.

Why: every commit once rewrote the stable snapshot of every partition of the root (569 KB at
20,001 partitions: 80 ms per commit instead of 9). With heads over bases (log_format/
stable.py) a commit writes a delta of the partitions changed since the base. This bench
measures, for a root holding topic ``hot`` (1 partition) and ``other`` (10 or 20,000):

- commit latency (EndTxn, p50 and p99) of one-record transactions into ``hot-0``, one at a
  time, after a warm-up, and the coordinator process's CPU time per commit (user + system,
  from /proc: the cost itself, which a loaded machine does not hide the way it hides
  latency behind waiting);
- bytes published per commit: the stable objects (heads, and bases) written during the
  measured commits, divided by the commits;
- a fresh reader: the storage requests (LIST, GET) and the time ``read_latest_stable`` takes
  to give the stable state of the root, cold (new storage object, connected by one LIST of
  ``_meta/topics`` first, no cached base).

It runs "before" (a git revision, default the commit before heads over bases: every commit a
full snapshot) and "after" (the working tree) in the same run, interleaved per point (B A,
then A B ...), on local files and on a SeaweedFS S3 server (tests/s3_server.py), and prints
each side's 20,001/11 ratio. Every point runs in its own process whose ``txnlog`` (and
coordinator subprocess) is that side's code (bench/ab.py's import tree). The machine load
(``os.getloadavg()``) is printed with every point: the numbers mean little without it.

    python bench/breadth.py [--commits 150] [--rounds 2] [--rev REV] [--no-s3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

DEFAULT_REV = "0cd64e4~1"  # the last commit publishing a full snapshot per commit
SIZES = (11, 20_001)
BUCKET = "txnlog-bench"


# ------------------------------------------------------------------- one point (worker)
def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the coordinator process and its live children (the merge
    worker, coordinator/merge_worker.py) have used: what a commit costs it whatever else the
    machine runs (latency on a loaded machine is mostly waiting)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _stable_objects(storage: Any) -> dict[str, int]:
    return {o.name: o.size for o in storage.list("_stable")}


# The coordinator's own log snapshots (state.to_snapshot: every partition, on the event loop,
# every 50 log objects or 5 s) are not publishing, but they cost the root's size too: "rare"
# moves them out of the measured window, so the two costs can be told apart.
# the S3 server's process, when a bench wants its CPU per commit too (bench/merge_isolation.py:
# on this machine the server shares the cores with the coordinator; on S3 it does not)
SERVER_PID: int | None = None

LOG_SNAPSHOTS = {"default": [],
                 "rare": ["--snapshot-every-objects", "1000000", "--snapshot-every-s", "3600",
                          "--snapshot-every-records", "1000000000"]}


def measure(root: str, partitions: int, commits: int, warmup: int, log_snapshots: str
            ) -> dict[str, Any]:
    """One point, with whatever ``txnlog`` this process imports (before or after)."""
    from coordinator_proc import CoordinatorProc
    from txnlog.log_format import layout
    from txnlog.log_format.codec.records import encode_batch
    from txnlog.log_format.storage import Storage

    log_path = Path(tempfile.mkdtemp(prefix="breadth-log-")) / "coordinator.log"
    extra = LOG_SNAPSHOTS[log_snapshots]
    proc = CoordinatorProc(root, log_path=log_path, extra=extra)
    try:
        proc.wait_healthy(120)
        _wait_for_merge_worker(proc, root, extra)
        client = proc.client(timeout=120)
        client.create_topic("hot", 1)
        if partitions > 1:
            client.create_topic("other", partitions - 1)
        storage = Storage.for_url(root)
        pid, epoch = client.init_producer_id("bench")
        value = b"x" * 100

        def commit() -> float:
            nonlocal pid, epoch
            res = client.reserve(pid, epoch, {("hot", 0): (0, 1)})
            ((topic, p), base), = res.items()
            data = encode_batch([(None, value, [], None)], base_offset=base, producer_id=pid,
                                producer_epoch=epoch, base_sequence=0, transactional=True)
            assert storage.put_if_absent(layout.segment_path(topic, p, base), data)
            t0 = time.perf_counter()
            answer = client.end_txn("bench", pid, epoch, True, written=[(topic, p, base)])
            ms = (time.perf_counter() - t0) * 1000
            pid, epoch = answer["producer_id"], answer["epoch"]
            return ms

        for _ in range(warmup):
            commit()
        before = _stable_objects(storage)
        cpu0 = _cpu_s(proc.pid)
        server0 = _cpu_s(SERVER_PID) if SERVER_PID else 0.0
        lat = [commit() for _ in range(commits)]
        cpu_ms = (_cpu_s(proc.pid) - cpu0) * 1000 / commits
        server_ms = ((_cpu_s(SERVER_PID) - server0) * 1000 / commits) if SERVER_PID else 0.0
        after = _stable_objects(storage)
        new = {n: s for n, s in after.items() if n not in before}
        heads = [s for n, s in new.items() if layout.parse_stable_name(n) is not None]
        bases = [s for n, s in new.items() if n.endswith(".base.json")]
        # heads are pruned to the newest few: their mean size stands for every commit's head
        published = (statistics.mean(heads) if heads else 0.0) + sum(bases) / commits
        reader = fresh_reader(root)
    finally:
        proc.stop()
    return {"partitions": partitions, "commits": commits, "log_snapshots": log_snapshots,
            "p50_ms": statistics.median(lat), "p99_ms": _pct(lat, 0.99),
            "coord_cpu_ms": cpu_ms, "server_cpu_ms": server_ms,
            "bytes_per_commit": published, "head_bytes": statistics.mean(heads) if heads else 0,
            "bases_written": len(bases), **reader, "load": list(os.getloadavg())}


def _wait_for_merge_worker(proc: Any, root: str, extra: list[str]) -> None:
    """Measure the steady state: a coordinator that spawns its merge worker as it starts
    spends about a second of CPU on it then; wait for it to be ready
    rather than measure commits beside it. A start that never shows fails the point."""
    from txnlog.coordinator.maintenance import merge_worker

    if (not root.startswith("s3://") or "--no-merge" in extra
            or "--merge-process off" in " ".join(extra)
            or not hasattr(merge_worker.MergeWorker, "start")):
        return  # no worker, or one started at the first merge (older revisions)
    proc.wait_merge_worker_ready(120)


def fresh_reader(root: str, repeat: int = 5) -> dict[str, Any]:
    """Requests and time of a cold ``read_latest_stable`` (median of ``repeat``)."""
    from txnlog.log_format import stable
    from txnlog.log_format.storage import Storage

    times, counts = [], {}
    for _ in range(repeat):
        Storage.clear_cache()
        if hasattr(stable, "clear_base_cache"):
            stable.clear_base_cache()
        st = Storage.for_url(root)
        st.list("_meta/topics")  # connected (client set-up is not the stable state's cost)
        calls = {"LIST": 0, "GET": 0}
        real_get, real_list = st.get, st.list

        def get(path: str, *a: Any, _g: Any = real_get, _c: dict = calls) -> bytes:
            _c["GET"] += 1
            return _g(path, *a)

        def lst(d: str, _l: Any = real_list, _c: dict = calls) -> Any:
            _c["LIST"] += 1
            return _l(d)

        st.get, st.list = get, lst  # type: ignore[method-assign]
        t0 = time.perf_counter()
        snap = stable.read_latest_stable(st)
        times.append((time.perf_counter() - t0) * 1000)
        assert snap is not None and len(snap.partitions) >= 1
        counts = calls
    return {"reader_ms": statistics.median(times), "reader_list": counts["LIST"],
            "reader_get": counts["GET"]}


# ---------------------------------------------------------------------------- driver
def _point(side: str, pythonpath: str | None, root: str, partitions: int, args: Any,
           env_extra: dict[str, str], log_snapshots: str) -> dict[str, Any]:
    env = dict(os.environ, **env_extra)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one",
                           "--root", root, "--partitions", str(partitions),
                           "--commits", str(args.commits), "--warmup", str(args.warmup),
                           "--log-snapshots", log_snapshots],
                          env=env, capture_output=True, text=True, cwd=str(REPO))
    if proc.returncode != 0:
        raise SystemExit(f"{side} point failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["side"] = side
    return row


def _fmt(row: dict[str, Any]) -> str:
    return (f"{row['side']:>6} {row['backend']:>4} {row['log_snapshots']:>7} "
            f"{row['partitions']:>6} parts: "
            f"p50 {row['p50_ms']:6.1f} ms  p99 {row['p99_ms']:6.1f} ms  "
            f"coordinator CPU {row['coord_cpu_ms']:5.2f} ms/commit  "
            f"{row['bytes_per_commit']:9.0f} B/commit (bases {row['bases_written']})  "
            f"reader {row['reader_list']} LIST + {row['reader_get']} GET "
            f"{row['reader_ms']:6.1f} ms  | load {', '.join(f'{x:.1f}' for x in row['load'])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--partitions", type=int, default=11, help=argparse.SUPPRESS)
    ap.add_argument("--commits", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rev", default=DEFAULT_REV, help="the 'before' git revision")
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--log-snapshots", default="rare,default",
                    help="coordinator log snapshot cadences to run: rare, default or both")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON last")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.root, args.partitions, args.commits, args.warmup,
                                 args.log_snapshots)))
        return 0

    from ab import _import_tree

    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify",
                          args.rev + "^{commit}"], capture_output=True, text=True,
                         check=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="txnlog-breadth-"))
    worktree = tmp / "worktree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q",
                    str(worktree), sha], check=True)
    server = None
    rows: list[dict[str, Any]] = []
    try:
        # both sides from an import tree, so "after" is this checkout whatever txnlog the
        # interpreter has installed
        sides = {"before": str(_import_tree(worktree, tmp / "imports")),
                 "after": str(_import_tree(REPO, tmp / "imports-after"))}
        backends: list[tuple[str, dict[str, str]]] = [("file", {})]
        if not args.no_s3:
            from s3_server import S3Server
            server = S3Server.start(tmp / "seaweedfs")
            server.create_bucket(BUCKET)
            backends.append(("s3", server.env()))
        print(f"# bench/breadth.py: before = {sha[:10]}, after = working tree; "
              f"{args.commits} one-partition commits per point after {args.warmup} warm-up, "
              f"{args.rounds} rounds; {os.cpu_count()} cpus, load {os.getloadavg()}",
              flush=True)
        cadences = args.log_snapshots.split(",")
        for r in range(args.rounds):
            for backend, env in backends:
                for n, cadence in [(n, c) for c in cadences for n in SIZES]:
                    order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                    for side in order:
                        name = uuid.uuid4().hex[:10]
                        root = ((tmp / f"root-{name}").as_uri() if backend == "file"
                                else f"s3://{BUCKET}/{name}")
                        row = _point(side, sides[side], root, n, args, env, cadence)
                        row.update(backend=backend, round=r + 1)
                        rows.append(row)
                        print(_fmt(row), flush=True)
                        if backend == "file":
                            shutil.rmtree(tmp / f"root-{name}", ignore_errors=True)
        print("\n| backend | log snapshots | side | metric | 11 parts | 20,001 parts "
              "| 20,001/11 |")
        print("|---|---|---|---|---:|---:|---:|")
        for backend, cadence, side in [(b, c, s) for b, _ in backends for c in cadences
                                       for s in ("before", "after")]:
            for metric in ("p50_ms", "p99_ms", "coord_cpu_ms", "bytes_per_commit", "reader_ms",
                           "reader_get"):
                vals = {n: statistics.median(x[metric] for x in rows
                                             if x["backend"] == backend
                                             and x["log_snapshots"] == cadence
                                             and x["side"] == side and x["partitions"] == n)
                        for n in SIZES}
                ratio = vals[SIZES[1]] / vals[SIZES[0]] if vals[SIZES[0]] else float("nan")
                print(f"| {backend} | {cadence} | {side} | {metric} | {vals[SIZES[0]]:.4g} | "
                      f"{vals[SIZES[1]]:.4g} | {ratio:.2f}x |")
        print(f"# load at end {os.getloadavg()}")
        if args.json:
            print(json.dumps(rows))
        return 0
    finally:
        if server is not None:
            server.stop()
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                        str(worktree)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
