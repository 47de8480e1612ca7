"""The codec's numba kernels load from numba's on-disk cache in a fresh process.

(numba's kernels are the fallback when no module compiled ahead of time is there:
``TXNLOG_KERNELS=jit`` makes these processes use them; test_aot_kernels tests that module.)

A Spark Python worker is a fresh process: if a kernel's cache entry missed (another source
timestamp, a signature the cache never saw), the worker's first task would compile it for
seconds. Here ``warm_up()`` fills an empty cache of the test's own (not the session's,
which other tests fill), then new interpreters run the calls Spark's tasks make — the task
writer's routing and encoding into its aligned buffers, a decode of a segment memory-mapped
from storage, as ``PartitionReader`` reads, the planning code — and count numba's cache
misses (each one is a compilation), and check that the loads skipped numba's whole-target
refresh (``kernel_loading``). Also: the driver-side
processes of a stream (the source's planner, the sink's commit) import no numba at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# What a Spark write task and a read task do, in miniature (no Spark, no coordinator: the
# kernels see the same argument types).
WORKLOAD = textwrap.dedent("""
    import json, sys
    import numpy as np, pyarrow as pa
    from txnlog.datasource.write.task_writer import _take_buffer
    from txnlog.log_format.arrow.arrow_encode import StreamEncoder, prepare_columns
    from txnlog.log_format.codec.partitioner import partitions_for_keys
    from txnlog.log_format.arrow.arrow_codec import AbortedFilter, decode_to_arrow
    from txnlog.log_format.storage import Storage
    from txnlog.log_format.arrow.warmup import kernel_cache_stats

    n = 40000
    batch = pa.record_batch({
        "key": pa.array([b"%016d" % i for i in range(n)], pa.binary()),
        "value": pa.array([b"v" * 100] * n, pa.binary()),
        "timestamp": pa.array(np.arange(n) * 1000, pa.timestamp("us", tz="Etc/UTC")),
    })
    parts = partitions_for_keys(batch.column("key"), 4)
    rows = np.flatnonzero(np.asarray(parts) == parts[0])
    enc = StreamEncoder(producer_id=7, producer_epoch=0, base_sequence=0,
                        transactional=True, buffer=_take_buffer(4 << 20))
    enc.append(prepare_columns(batch, 1), rows)
    data = bytes(enc.finish().stamp_base_offset(0))
    root = sys.argv[1]
    storage = Storage.for_url(root)
    path = "topics/t/0/" + "0" * 20 + ".log"
    storage.put_if_absent(path, data)
    view = storage.get_view(path, 0, len(data))  # a read-only memory map, as tasks read
    assert isinstance(view, memoryview), type(view)
    got = decode_to_arrow(view, topic="t", partition=0, start_offset=0, end_offset=n,
                          aborted=AbortedFilter([])).batch.num_rows
    from numba.core import entrypoints
    print(json.dumps({"rows": got, "expected": len(rows), "kernels": kernel_cache_stats(),
                      "full_refresh": "numba.np.linalg" in sys.modules,
                      "entry_points": entrypoints._already_initialized,
                      "crc32c_package": "crc32c" in sys.modules}))
""")


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_a_fresh_process_compiles_no_kernel(tmp_path: Path) -> None:
    """From an empty cache of its own: ``warm_up()`` in one process, then the tasks' calls
    in fresh ones must not compile anything. (Against the session's shared cache an earlier
    test may already have compiled what warm_up missed: here nothing has.) Found this way:
    multi-batch decodes passed strided index columns, a signature warm_up's one-batch
    decode never compiled, so every fresh cache cost the first read task a compilation of
    decode_records (seconds)."""
    cache = tmp_path / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "TXNLOG_KERNELS": "jit"}
    _run("from txnlog.log_format.arrow.warmup import warm_up; warm_up(); print('warm')", env=env)
    for i in range(2):  # the second fresh process too: what the first saved must hit
        out = json.loads(_run(WORKLOAD, (tmp_path / f"root{i}").as_uri(), env=env))
        assert out["rows"] == out["expected"] > 0
        called = {k: v for k, v in out["kernels"].items() if v["hits"] or v["misses"]}
        assert {"_decode_kernels.scan", "_decode_kernels.decode_records",
                "_encode_kernels.encode", "partitioner._partitions"} <= set(called), called
        missed = {k: v["misses"] for k, v in called.items() if v["misses"]}
        assert not missed, f"process {i}: warm_up did not compile what tasks call: {missed}"
        assert all(str(cache) in v["cache_path"] for v in out["kernels"].values())
        # Loaded without numba's whole-target refresh (kernel_loading): its lowering
        # registries (numba.np.linalg, which imports SciPy, ...) were never imported.
        assert not out["full_refresh"]
        # nor numba's scan of every distribution's entry points, nor the crc32c package's
        # own version lookup (kernel_loading, codec.crc): ~70 ms of a fresh worker's CPU
        assert not out["entry_points"]
        assert not out["crc32c_package"]


def test_warm_up_loads_every_kernel_from_the_cache() -> None:
    out = json.loads(_run("from txnlog.log_format.arrow.warmup import warm_up, kernel_cache_stats\n"
                          "import json\nwarm_up()\nprint(json.dumps(kernel_cache_stats()))",
                          env={**os.environ, "TXNLOG_KERNELS": "jit"}))
    assert all(v["misses"] == 0 for v in out.values()), out
    assert sum(v["hits"] for v in out.values()) >= 4
    assert all("__pycache__" in v["cache_path"] for v in out.values())


def test_stream_driver_processes_import_no_numba() -> None:
    """The stream source's planner (latestOffset, partitions) and the sink's streamWriter()
    and commit() run in driver-side Python processes that never decode or encode: importing
    them must not load numba (~0.5 s of CPU, more on a loaded machine, per process)."""
    code = ("import sys\n"
            "import pyspark_txnlog, txnlog.datasource.read.stream_reader, "
            "txnlog.datasource.write.stream_writer, txnlog.datasource.write.batch_writer, "
            "txnlog.datasource.read.planning, txnlog.log_format.reader\n"
            "print(sorted(m for m in ('numba', 'pyarrow.compute', 'fsspec') "
            "if m in sys.modules))")
    assert _run(code) == "[]"


def test_a_read_imports_no_encode_side(tmp_path: Path) -> None:
    """A read task decodes, never encodes: the codec's decode names load without the encode
    module and pyarrow.compute (~0.06 s of a fresh Spark worker's CPU), and a cache miss
    still compiles with numba's extension entry points run first."""
    code = ("import sys\n"
            "from txnlog.log_format.arrow.arrow_codec import AbortedFilter, decode_to_arrow, "
            "read_schema, scan_batches\n"
            "print(sorted(m for m in ('txnlog.log_format.arrow.arrow_encode', "
            "'pyarrow.compute', 'crc32c') if m in sys.modules))")
    assert _run(code) == "[]"
    from txnlog.log_format.arrow import arrow_codec

    assert arrow_codec.encode_arrow.__module__.endswith("arrow_encode")
    # A miss (an empty cache of its own): the kernel compiles, entry points initialised.
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "empty-cache"),
           "TXNLOG_KERNELS": "jit"}
    miss = ("from txnlog.log_format.codec.partitioner import partitions_for_keys\n"
            "import pyarrow as pa\n"
            "from numba.core import entrypoints\n"
            "from txnlog.log_format.arrow.warmup import kernel_cache_stats\n"
            "print(list(partitions_for_keys(pa.array([b'a', b'b']), 3)), "
            "entrypoints._already_initialized, "
            "kernel_cache_stats()['partitioner._partitions']['misses'])")
    assert _run(miss, env=env).endswith("True 1")
