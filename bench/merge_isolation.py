"""Does merging slow commits? One-partition commit latency with merging in a worker process
(the default on remote storage), merging on the coordinator's threads, and merging off.

    python bench/merge_isolation.py [--commits 600] [--rounds 2] [--no-s3] [--file]

Merging must never slow commits measurably. On S3 each merge is some 70
requests, and the S3 client spends milliseconds of Python CPU on each: on the coordinator's
threads that CPU holds the GIL against the event loop answering commits; sent all at once,
they are a burst the S3 server serves ahead of the commits' requests.

Each point is bench/breadth.py's measurement (one-record transactions into ``hot-0`` of an
11-partition root, one at a time after a warm-up: EndTxn p50/p99; the coordinator's CPU per
commit from /proc, with the merge worker's; the S3 server's CPU per commit, which shares
this machine's cores here and would not on S3) with the coordinator started with
``--merge-process on``, ``--merge-process off`` or ``--no-merge``, interleaved per round
(the order reversed every other round), and the ratios against merging off measured in the
same run. 615 commits leave ~1,230 small objects: about 13 merges of 32 in the measured
window (the merge thresholds are the defaults), and enough commits that the p99 is not one
unlucky commit (with 150 commits it was the second worst).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

import breadth  # noqa: E402

SIDES = {"merge in a worker process": ["--merge-process", "on"],
         "merge on the coordinator's threads": ["--merge-process", "off"],
         "merging off (baseline)": ["--no-merge"]}
BASELINE = "merging off (baseline)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--file", action="store_true", help="also on a local root")
    args = ap.parse_args()
    breadth.LOG_SNAPSHOTS.update(SIDES)
    backends: list[str] = ([] if args.no_s3 else ["s3"]) + (["file"] if args.file else [])
    server = None
    tmp = Path(tempfile.mkdtemp(prefix="merge-isolation-"))
    rows: dict[tuple[str, str], list[dict]] = {}
    try:
        if "s3" in backends:
            from s3_server import S3Server
            server = S3Server.start(tmp / "seaweedfs")
            server.create_bucket(breadth.BUCKET)
            os.environ.update(server.env())
            breadth.SERVER_PID = server.process.pid
        print(f"# bench/merge_isolation.py: {args.commits} commits per point after "
              f"{args.warmup} warm-up, {args.rounds} rounds, {os.cpu_count()} cpus, "
              f"load {', '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        for r in range(args.rounds):
            for backend in backends:
                order = list(SIDES) if r % 2 == 0 else list(SIDES)[::-1]
                for side in order:
                    root = ((tmp / f"root-{uuid.uuid4().hex[:8]}").as_uri()
                            if backend == "file"
                            else f"s3://{breadth.BUCKET}/{uuid.uuid4().hex[:8]}")
                    row = breadth.measure(root, 11, args.commits, args.warmup, side)
                    rows.setdefault((backend, side), []).append(row)
                    print(f"{backend:>4} {side:<36} p50 {row['p50_ms']:7.1f} ms  p99 "
                          f"{row['p99_ms']:7.1f} ms  coordinator CPU "
                          f"{row['coord_cpu_ms']:6.2f} ms/commit  S3 server CPU "
                          f"{row['server_cpu_ms']:6.2f} ms/commit  | load "
                          f"{row['load'][0]:.1f}", flush=True)
        print("\n| backend | side | p50 ms | p99 ms | CPU ms/commit | S3 server CPU ms/commit "
              "| p50 / baseline | p99 / baseline | CPU / baseline | server CPU / baseline |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for backend in backends:
            med = {side: {m: statistics.median(x[m] for x in rows[(backend, side)])
                          for m in ("p50_ms", "p99_ms", "coord_cpu_ms", "server_cpu_ms")}
                   for side in SIDES}
            base = med[BASELINE]
            for side in SIDES:
                m = med[side]
                server_col = (f"{m['server_cpu_ms']:.2f} | " if base["server_cpu_ms"] else "- | ")
                server_ratio = (f"{m['server_cpu_ms'] / base['server_cpu_ms']:.2f}x |"
                                if base["server_cpu_ms"] else "- |")
                print(f"| {backend} | {side} | {m['p50_ms']:.1f} | {m['p99_ms']:.1f} | "
                      f"{m['coord_cpu_ms']:.2f} | {server_col}"
                      f"{m['p50_ms'] / base['p50_ms']:.2f}x | "
                      f"{m['p99_ms'] / base['p99_ms']:.2f}x | "
                      f"{m['coord_cpu_ms'] / base['coord_cpu_ms']:.2f}x | {server_ratio}")
        print(f"# load at end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
