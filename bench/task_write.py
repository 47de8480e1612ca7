"""The task side of a txnlog write outside Spark: CPU per row of TaskWriter, steadier than Spark.

    python bench/task_write.py [--rows 5000000] [--dir DIR] [--repeat 3] [--flush-bytes N]

Feeds 10,000-row Arrow batches (16-byte random keys, 100-byte random values: what Spark hands
a task in bench/spark_rw.py) to ``run_task`` — routing, encoding, reserve, put-if-absent with
fsync — as one Spark task would, against the root's real (embedded) coordinator, and
commits the transaction (its EndTxn confirms the task's runs, as the driver's does). Prints
wall time and the CPU time of this process (all its threads) and of the coordinator per
run, scaled to 10 M rows. ``--dir /dev/shm`` leaves out the
disk's fsync; ``--profile`` wraps the runs in cProfile (py-spy on this pid works too).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

BATCH = 10_000


def batches(seed: int, count: int = 16) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)

    def fixed_binary(width: int) -> pa.Array:
        data = pa.py_buffer(rng.integers(0, 256, BATCH * width, dtype=np.uint8).tobytes())
        offsets = pa.py_buffer((np.arange(BATCH + 1, dtype=np.int32) * width).tobytes())
        return pa.Array.from_buffers(pa.binary(), BATCH, [None, offsets, data])

    return [pa.RecordBatch.from_arrays([fixed_binary(16), fixed_binary(100)],
                                       names=["key", "value"]) for _ in range(count)]


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows per run (one task)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="parent folder of the root (default: /tmp)")
    ap.add_argument("--flush-bytes", type=int, default=None)
    ap.add_argument("--profile", default=None, help="write cProfile stats to this file")
    args = ap.parse_args()

    from txnlog.coordinator.client.embedded import coordinator_for_root
    from txnlog.datasource.options import parse_write_options
    from txnlog.datasource.write import task_writer
    from txnlog.datasource.write.batch_writer import coordinator_client, ensure_topic
    from txnlog.datasource.write.commit_messages import runs_to_confirm
    from txnlog.datasource.write.task_writer import Membership, run_task

    if args.flush_bytes:
        task_writer.FLUSH_BYTES = args.flush_bytes
    parent = Path(tempfile.mkdtemp(prefix="txnlog-taskbench-", dir=args.dir))
    root = parent.as_uri()
    endpoint = coordinator_for_root(root, idle_exit_s=30)
    coord_pid = None
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if str(parent).encode() in f.read() and int(entry) != os.getpid():
                        coord_pid = int(entry)
            except OSError:
                pass
    data = batches(1)
    n_batches = args.rows // BATCH
    print(f"rows={n_batches * BATCH:,} root={root} coordinator pid={coord_pid} "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    try:
        for r in range(args.repeat + 1):  # run 0 warms up (numba caches, buffers)
            opts = parse_write_options({"path": root, "topic": f"t{r}", "partitions": "2",
                                        "coordinator": endpoint})
            client = coordinator_client(opts)
            ensure_topic(client, opts)
            tid = f"bench-{r}"
            pid, epoch = client.init_producer_id(tid, 600_000)
            it = (data[i % len(data)] for i in range(n_batches))
            c0 = time.process_time()
            k0 = proc_cpu(coord_pid) if coord_pid else 0.0
            t0 = time.perf_counter()
            if profiler and r:
                profiler.enable()
            msg = run_task(it, opts, client, Membership(tid, pid, epoch))
            if profiler and r:
                profiler.disable()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            kcpu = (proc_cpu(coord_pid) if coord_pid else 0.0) - k0
            client.end_txn(tid, pid, epoch, commit=True, members=[msg.member_id],
                           written=runs_to_confirm(client, [msg]))
            scale = 10_000_000 / (n_batches * BATCH)
            print(f"{'warm-up' if r == 0 else f'run {r}'}: {wall:.2f} s wall, {cpu:.2f} s CPU "
                  f"(coordinator {kcpu:.2f} s); per 10 M rows: {cpu * scale:.2f} s CPU task, "
                  f"{kcpu * scale:.2f} s coordinator; load {os.getloadavg()[0]:.1f}",
                  flush=True)
            for topic_dir in parent.glob(f"t{r}-*"):
                shutil.rmtree(topic_dir, ignore_errors=True)
    finally:
        if profiler:
            profiler.dump_stats(args.profile)
        if coord_pid:
            os.kill(coord_pid, 15)
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
