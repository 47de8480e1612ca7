"""The codec's kernels compiled ahead of time against numba's JIT, in one process.

    python bench/kernels_ab.py [--rounds 9] [--records 1000000]

Both forms of the same kernels (log_format/arrow/kernel_loading.py) are bound in turn in
this process, alternating round by round, and each op's CPU time (``time.process_time``)
is compared: encode, decode and scan of --records records (16-byte keys, 100-byte values,
1 MiB batches), partitioning by key, and 2,000 calls each of a 10-record encode and decode
(the per-call cost of the entries' argument check). Run ``warm_up()`` first: the module
must exist.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import pyarrow as pa
from txnlog.log_format.arrow import aot_kernels
from txnlog.log_format.arrow.arrow_codec import decode_to_arrow, encode_arrow, scan_batches
from txnlog.log_format.arrow.kernel_loading import rebound
from txnlog.log_format.arrow.warmup import warm_up
from txnlog.log_format.codec.partitioner import partitions_for_keys


def _no_fallback(name: str, *args: object) -> None:
    raise SystemExit(f"the ahead-of-time entry {name} fell back to numba: argument types "
                     "differ")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    warm_up()
    module, why = aot_kernels.load()
    if module is None:
        raise SystemExit(f"no ahead-of-time module: {why}")
    n = args.records
    rng = np.random.default_rng(1)
    keys = pa.array([bytes(x) for x in rng.integers(0, 256, (n, 16), dtype=np.uint8)])
    rb = pa.record_batch({"key": keys, "value": pa.array([b"v" * 100] * n)})
    data = bytes(encode_arrow(rb, max_batch_bytes=1 << 20).data)
    small = rb.slice(0, 10)
    small_data = bytes(encode_arrow(small).data)

    def repeat(f, k=2000):  # type: ignore[no-untyped-def]
        def run() -> None:
            for _ in range(k):
                f()
        return run

    ops = {"encode": lambda: encode_arrow(rb, max_batch_bytes=1 << 20),
           "decode": lambda: decode_to_arrow(data, topic="t", partition=0),
           "scan": lambda: scan_batches(data),
           "partition": lambda: partitions_for_keys(keys, 64),
           "encode 10 x2000": repeat(lambda: encode_arrow(small)),
           "decode 10 x2000": repeat(lambda: decode_to_arrow(small_data, topic="t",
                                                              partition=0))}
    got: dict[tuple[str, str], list[float]] = {}
    load0 = os.getloadavg()[0]
    for mode in ("aot", "jit"):
        with rebound(mode, _no_fallback):
            for f in ops.values():
                f()
    for r in range(args.rounds):
        for mode in (("aot", "jit") if r % 2 == 0 else ("jit", "aot")):
            with rebound(mode, _no_fallback):
                for op, f in ops.items():
                    t = time.process_time()
                    f()
                    got.setdefault((mode, op), []).append(time.process_time() - t)
    print(f"# {n:,} records, {args.rounds} alternating rounds, medians of CPU time; load "
          f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print("| op | ahead of time ms | numba ms | ratio |")
    print("|---|---:|---:|---:|")
    for op in ops:
        a = statistics.median(got[("aot", op)])
        j = statistics.median(got[("jit", op)])
        print(f"| {op} | {a * 1e3:.1f} | {j * 1e3:.1f} | {a / j:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
