"""Before/after in one run: a bench script at a git revision vs the working tree, interleaved.

A refactor is "within noise" only if both sides ran on the same machine, under the same load,
at the same time. This driver checks the revision out into a temporary git worktree, builds an
import tree for it (``txnlog.log_format`` / ``.coordinator`` / ``.datasource`` pointing at the
worktree's folders) and runs the revision's own copy of the bench script with that tree first
on ``PYTHONPATH`` — so its coordinator subprocesses run the old code too — alternating with
the working tree's script, B A A B B A ... (so neither side always runs first on a warm
machine). Each bench is run with ``--json`` and must print a JSON list of row objects last.

For every numeric field named with ``--metric`` it prints each round's value, the median of
each side, and the median of the per-round ratios (after / before), with the machine load.

    python bench/ab.py --rev HEAD~5 --rounds 3 --metric txn_per_s --metric cpu_ms_per_txn \
        -- coordinator.py --partitions 1 --repeat 1 --no-delta --seconds 5
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
COMPONENTS = ("log_format", "coordinator", "datasource")


def _import_tree(worktree: Path, into: Path) -> Path:
    """A directory holding ``txnlog/`` whose components are the worktree's folders. It has an
    ``__init__.py`` of its own so it shadows the installed ``txnlog`` package whatever kind
    (namespace or regular) that is."""
    pkg = into / "txnlog"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""txnlog at a baseline revision (bench/ab.py)."""\n')
    for name in COMPONENTS:
        (pkg / name).symlink_to(worktree / name, target_is_directory=True)
    return into


def _last_json(stdout: str) -> list[dict[str, Any]]:
    """The last JSON list the bench printed (comment lines may come before and after)."""
    start = stdout.rfind("\n[")
    start = start + 1 if start >= 0 else stdout.find("[")
    rows, _ = json.JSONDecoder().raw_decode(stdout, max(start, 0))
    if not isinstance(rows, list):
        raise ValueError("bench --json must print a JSON list of rows")
    return rows


def _run(side: str, script: Path, args: list[str], pythonpath: str | None) -> list[dict]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, str(script), *args, "--json"], env=env,
                          cwd=script.parent.parent, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{side} bench failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return _last_json(proc.stdout)


def _values(rows: list[dict], metric: str) -> list[float]:
    return [float(r[metric]) for r in rows if isinstance(r.get(metric), int | float)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the baseline git revision")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each side (>= 1)")
    ap.add_argument("--metric", action="append", required=True,
                    help="numeric row field to compare (repeatable)")
    ap.add_argument("--script-from-working-tree", action="store_true",
                    help="run the working tree's bench script on both sides (a reworked "
                         "bench measuring the old code), not the revision's own copy")
    ap.add_argument("--warm-up", action="store_true",
                    help="compile each side's numba kernels (warm_up) before the rounds, so "
                         "no round pays a compilation (the revision's tree is a fresh "
                         "checkout with an empty cache)")
    ap.add_argument("bench", nargs=argparse.REMAINDER,
                    help="-- SCRIPT [ARGS]: a script in bench/ and its arguments")
    args = ap.parse_args()
    bench = [a for a in args.bench if a != "--"] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        ap.error("name the bench script after --, e.g. -- coordinator.py --repeat 1")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    script_name, script_args = bench[0], bench[1:]
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", args.rev + "^{commit}"],
                         capture_output=True, text=True)
    if rev.returncode != 0:
        ap.error(f"--rev {args.rev!r} is not a commit of {REPO}")
    sha = rev.stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="txnlog-ab-"))
    worktree = tmp / "worktree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(worktree),
                    sha], check=True)
    try:
        tree = _import_tree(worktree, tmp / "imports")
        before_script = (REPO if args.script_from_working_tree else worktree) / "bench"
        sides = {"before": (before_script / script_name, str(tree)),
                 "after": (REPO / "bench" / script_name, None)}
        for side, (script, _) in sides.items():
            if not script.is_file():
                ap.error(f"{side}: no bench script {script}")
        print(f"# A/B of bench/{script_name} {' '.join(script_args)}: before = {sha[:10]}, "
              f"after = working tree; {args.rounds} rounds, {os.cpu_count()} cpus, "
              f"load at start {os.getloadavg()}", flush=True)
        if args.warm_up:
            for side, (_, pp) in sides.items():
                env = dict(os.environ)
                if pp is not None:
                    env["PYTHONPATH"] = pp + (os.pathsep + env["PYTHONPATH"]
                                              if env.get("PYTHONPATH") else "")
                subprocess.run([sys.executable, "-c", "from txnlog.log_format.arrow.warmup import "
                                "warm_up; warm_up()"], env=env, check=True)
                print(f"# {side}: kernels warmed up", flush=True)
        results: dict[str, list[list[dict]]] = {"before": [], "after": []}
        for i in range(args.rounds):
            order = ["before", "after"] if i % 2 else ["after", "before"]
            for side in order:
                script, pp = sides[side]
                rows = _run(side, script, script_args, pp)
                results[side].append(rows)
                shown = ", ".join(f"{m} {v:.3g}" for m in args.metric
                                  for v in _values(rows, m))
                print(f"# round {i + 1} {side}: {shown} | load {os.getloadavg()}", flush=True)
        print("| metric | row | before (median) | after (median) | after/before "
              "(median of rounds) |")
        print("|---|---:|---:|---:|---:|")
        for metric in args.metric:
            n_rows = min(len(_values(r, metric)) for side in results.values() for r in side)
            for j in range(n_rows):
                b = [_values(r, metric)[j] for r in results["before"]]
                a = [_values(r, metric)[j] for r in results["after"]]
                ratios = [x / y for x, y in zip(a, b, strict=True) if y]
                print(f"| {metric} | {j} | {statistics.median(b):.4g} | "
                      f"{statistics.median(a):.4g} | "
                      f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")
        print(f"# load at end {os.getloadavg()}")
        return 0
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                        str(worktree)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
