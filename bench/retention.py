"""What a retention pass costs as history and partitions grow.

Every ``--retention-check-interval-ms`` the coordinator's retention role
(``coordinator/log_retention.py``) looks at every partition with merged objects, on the
coordinator's event loop, while commits wait. This bench builds a real ``CoordinatorState``
(through its own ``apply``: ``topic`` records, then ``merge``/``merged`` records naming
closed segments) with P partitions of H closed segments each, and times ``LogRetention.tick``
— the real pass — in two cases:

- nothing due (the steady state between deletions): pure CPU, no storage request;
- ``retention.bytes`` set (one LIST of the small objects per partition, on a file root).

Ratios are against the baseline P=100, H=10 measured in the same run, interleaved (each
point's repeats alternate with the baseline's), with the load average printed.

    python bench/retention.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

POINTS = [(100, 10), (100, 100), (100, 1000), (1000, 10), (10000, 10)]
BASELINE = (100, 10)


def build(partitions: int, history: int, retention_bytes: bool) -> Any:
    from txnlog.coordinator.maintenance.log_retention import LogRetention
    from txnlog.coordinator.state.coordinator_state import CoordinatorState
    from txnlog.coordinator.state.runtime import Observer
    from txnlog.coordinator.state.txn_log_records import LogRecord
    from txnlog.log_format.storage import Storage

    state = CoordinatorState()
    cfg = {"retention.bytes": str(1 << 60)} if retention_bytes else {}
    state.apply(LogRecord("topic", {"id": "t", "name": "t", "partitions": partitions,
                                    "config": cfg}))
    now = int(time.time() * 1000)
    for p in range(partitions):
        key = f"t-{p}"
        for i in range(history):
            base, end = i * 100, (i + 1) * 100
            state.apply(LogRecord("merge", {
                "id": key, "topic": "t", "p": p, "seq": i + 1,
                "inputs": [[-1, base, end, 5000, 0, 0]],
                "output": [0, base, end, 5000, 0, now], "open_since_ms": 0,
                "grace_ms": 60_000, "ms": now}))
            state.apply(LogRecord("merged", {"id": key, "seq": i + 1, "ms": now}))
        state.merges[key].garbage.clear()
    root = Path(tempfile.mkdtemp(prefix="txnlog-bench-retention-")).as_uri()

    class IO:  # the coordinator's StorageIO shape: run a storage call off the loop
        def __init__(self) -> None:
            self.storage = Storage.for_url(root)

        async def run(self, fn: Any, *args: Any) -> Any:
            return fn(*args)

    return LogRetention(state, None, IO(), Observer(), lambda t, p: 0,  # type: ignore[arg-type]
                        lambda: None, check_interval_ms=0)


def time_pass(ret: Any) -> float:
    t0 = time.perf_counter()
    done = asyncio.run(ret.tick())
    elapsed = time.perf_counter() - t0
    assert done == 0, "nothing may be due in this bench"
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for rb in (False, True):
        base_ret = build(*BASELINE, rb)
        for point in POINTS:
            if rb and point[0] > 1000:
                continue  # one LIST per partition: 10,000 LISTs say nothing new
            ret = build(*point, rb)
            base_t, t = [], []
            for _ in range(args.repeats):
                base_t.append(time_pass(base_ret))
                t.append(time_pass(ret))
            b, m = statistics.median(base_t), statistics.median(t)
            row = {"case": "retention.bytes (LIST per partition)" if rb else "nothing due",
                   "partitions": point[0], "segments_per_partition": point[1],
                   "pass_ms": round(m * 1000, 3), "baseline_ms": round(b * 1000, 3),
                   "ratio": round(m / b, 2), "per_partition_us": round(m / point[0] * 1e6, 2),
                   "load": round(os.getloadavg()[0], 1)}
            rows.append(row)
            print(json.dumps(row) if args.json else
                  f"{row['case']:38s} P={point[0]:6d} H={point[1]:5d}: pass "
                  f"{row['pass_ms']:9.3f} ms, x{row['ratio']:7.2f} baseline "
                  f"({row['baseline_ms']:.3f} ms), {row['per_partition_us']:.2f} us/partition,"
                  f" load {row['load']}", flush=True)


if __name__ == "__main__":
    main()
