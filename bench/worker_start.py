"""What a fresh Python worker pays to run its first txnlog read or write task (CPU).

    python bench/worker_start.py [--runs 7] [--records 20000] [--json]

A Spark Python worker is a fresh interpreter: its first task imports txnlog's modules and
loads the codec's kernels before it reads or writes a record. Here fresh interpreters
(after ``import pyspark.worker``, which every worker imports anyway) do what the tasks do
in miniature — a read worker decodes a segment memory-mapped from storage, a write worker
routes rows to partitions by key and encodes them — and report their CPU time from then on
(``time.process_time``), and whether numba was imported. Roles alternate run by run;
medians are printed (``--json``: a JSON list of rows last, for bench/ab.py).

The codec's kernels run compiled ahead of time when ``warm_up()`` built the module (the
default), or by numba's JIT with ``TXNLOG_KERNELS=jit``; this bench calls ``warm_up()``
first, so neither side pays a compilation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROLES = {
    "read": textwrap.dedent("""
        from txnlog.datasource.read import batch_reader, stream_reader  # noqa: F401
        from txnlog.log_format.arrow.arrow_codec import AbortedFilter, decode_to_arrow
        from txnlog.log_format.storage import Storage
        storage = Storage.for_url(ROOT)
        view = storage.get_view(PATH, 0, SIZE)
        rows = decode_to_arrow(view, topic="t", partition=0, include_headers=True,
                               aborted=AbortedFilter([])).batch.num_rows
    """),
    "write": textwrap.dedent("""
        import numpy as np, pyarrow as pa
        from txnlog.datasource.write import stream_writer, task_writer  # noqa: F401
        from txnlog.log_format.arrow.arrow_encode import StreamEncoder, prepare_columns
        from txnlog.log_format.codec.partitioner import partitions_for_keys
        batch = pa.record_batch({"key": pa.array([b"%016d" % i for i in range(N)]),
                                 "value": pa.array([b"v" * 100] * N)})
        parts = partitions_for_keys(batch.column("key"), 4)
        cols = prepare_columns(batch, 1)
        rows = 0
        for p in range(4):
            enc = StreamEncoder(producer_id=7, producer_epoch=0, base_sequence=0,
                                transactional=True)
            enc.append(cols, np.flatnonzero(parts == p))
            rows += enc.finish().record_count
    """),
}

CHILD = textwrap.dedent("""
    import json, sys, time
    import pyspark.worker  # noqa: F401 - every Python worker imports it first
    ROOT, PATH, SIZE, N = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t0 = time.process_time()
    {body}
    cpu = time.process_time() - t0
    print(json.dumps({{"cpu_s": cpu, "rows": rows, "numba": "numba" in sys.modules}}))
""")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import pyarrow as pa
    from txnlog.log_format.arrow.arrow_codec import encode_arrow
    from txnlog.log_format.arrow.warmup import warm_up
    from txnlog.log_format.storage import Storage

    warm_up()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="txnlog-bench-worker-") as tmp:
        root = Path(tmp).as_uri()
        n = args.records
        data = encode_arrow(pa.record_batch({
            "key": pa.array([b"%016d" % i for i in range(n)]),
            "value": pa.array([b"v" * 100] * n)}), producer_id=7, producer_epoch=0,
            base_sequence=0, transactional=True).with_base_offset(0)
        path = "topics/t/0/" + "0" * 20 + ".log"
        Storage.for_url(root).put_if_absent(path, data)
        got: dict[str, list[dict]] = {r: [] for r in ROLES}
        for i in range(args.runs):
            for role in (ROLES if i % 2 == 0 else list(ROLES)[::-1]):
                code = CHILD.format(body=textwrap.indent(ROLES[role], ""))
                proc = subprocess.run([sys.executable, "-c", code, root, path,
                                       str(len(data)), str(n)],
                                      capture_output=True, text=True, check=True)
                got[role].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = [{"role": role, "cpu_s": statistics.median(r["cpu_s"] for r in runs),
             "cpu_min_s": min(r["cpu_s"] for r in runs), "runs": len(runs),
             "numba_imported": any(r["numba"] for r in runs),
             "kernels": os.environ.get("TXNLOG_KERNELS", "auto")}
            for role, runs in got.items()]
    print(f"# fresh worker CPU after `import pyspark.worker`, medians of {args.runs} runs; "
          f"load {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print("| role | CPU s (median) | min | numba imported |")
    print("|---|---:|---:|---|")
    for r in rows:
        print(f"| {r['role']} | {r['cpu_s']:.3f} | {r['cpu_min_s']:.3f} | "
              f"{r['numba_imported']} |")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
