"""Failover time: SIGKILL of the serving coordinator until the first commit after it.

    python bench/failover.py [--repeat 5] [--heartbeats 300,1000] [--misses 3] [--no-s3]

For each root (a local folder, and a SeaweedFS S3 server from tests/s3_server.py) and each
heartbeat interval, two ways back from a ``kill -9`` of the serving coordinator, each timed
from the kill to the moment a transactional producer's next commit returns (the client
follows ``_coordinator.json`` after connection failures, with its usual backoff):

- ``restart`` (the baseline): a supervisor starts a new coordinator on the same root at
  once after the kill (systemd ``Restart=always`` with no delay) — recovery + takeover;
- ``standby``: a ``txnlog coordinator --standby`` already running takes over once the dead
  one has missed ``--misses`` heartbeats — detection + recovery + takeover.

Before the kill each run commits ``--warm`` transactions, so recovery replays a small log.
Printed: median / min / max seconds per case, and the standby's median as a ratio of the
restart's measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from coordinator_proc import CoordinatorProc
from txnlog.coordinator.client.coordinator_client import CoordinatorClient
from txnlog.coordinator.client.producer import TransactionalProducer


def one_run(root: str, mode: str, heartbeat_ms: int, misses: int, warm: int,
            logs: Path) -> float:
    """Seconds from SIGKILL of the serving coordinator to the next commit's return."""
    flags = ["--heartbeat-ms", str(heartbeat_ms), "--log-level", "INFO"]
    tag = uuid.uuid4().hex[:6]
    primary = CoordinatorProc(root, extra=flags, log_path=logs / f"{tag}-primary.log")
    others: list[CoordinatorProc] = []
    try:
        endpoint = primary.wait_healthy()
        CoordinatorClient(endpoint).create_topic("t", 1, exist_ok=True)
        if mode == "standby":
            others.append(CoordinatorProc(
                root, extra=[*flags, "--standby", "--standby-misses", str(misses)],
                log_path=logs / f"{tag}-standby.log"))
            time.sleep(2 * heartbeat_ms / 1000)  # it has seen the primary heartbeat
        with TransactionalProducer(root, f"fo-{tag}", coordinator=endpoint) as prod:
            prod.init_transactions()
            for i in range(warm):
                prod.begin_transaction()
                prod.send("t", f"warm-{i}".encode())
                prod.commit_transaction()
            prod.begin_transaction()
            prod.send("t", b"across the kill")
            prod.flush()
            t0 = time.monotonic()
            primary.kill()
            if mode == "restart":
                others.append(CoordinatorProc(root, extra=flags,
                                              log_path=logs / f"{tag}-restart.log"))
            prod.commit_transaction()
            return time.monotonic() - t0
    finally:
        primary.stop()
        for p in others:
            p.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--heartbeats", default="300,1000", help="heartbeat intervals (ms)")
    ap.add_argument("--misses", type=int, default=3)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-file", action="store_true")
    args = ap.parse_args()
    os.environ.pop("TXNLOG_COORDINATOR_TOKEN", None)
    logs = Path(tempfile.mkdtemp(prefix="txnlog-failover-"))
    envs: list[str] = [] if args.no_file else ["file"]
    server = None
    if not args.no_s3:
        from s3_server import S3Server

        server = S3Server.start(logs / "seaweedfs")
        server.create_bucket("bench")
        os.environ.update(server.env())
        envs.append("s3")
    print(f"# failover: SIGKILL of the serving coordinator -> next commit returns; "
          f"{args.repeat} runs per case, {os.cpu_count()} cpus, load {os.getloadavg()}, "
          f"standby takes over after {args.misses} missed heartbeats; logs in {logs}",
          flush=True)
    print(f"{'root':5} {'hb ms':>6} {'mode':8} {'median s':>9} {'min s':>7} {'max s':>7} "
          f"{'vs restart':>10}")
    try:
        for env in envs:
            for hb in [int(x) for x in args.heartbeats.split(",")]:
                results: dict[str, list[float]] = {"restart": [], "standby": []}
                for _ in range(args.repeat):  # interleaved: the same load for both
                    for mode in results:
                        base = f"s3://bench/{uuid.uuid4().hex[:8]}" if env == "s3" else \
                            Path(tempfile.mkdtemp(prefix="txnlog-fo-")).as_uri()
                        results[mode].append(one_run(base, mode, hb, args.misses, args.warm,
                                                     logs))
                baseline = statistics.median(results["restart"])
                for mode, xs in results.items():
                    med = statistics.median(xs)
                    print(f"{env:5} {hb:>6} {mode:8} {med:>9.2f} {min(xs):>7.2f} "
                          f"{max(xs):>7.2f} {med / baseline:>9.2f}x", flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
