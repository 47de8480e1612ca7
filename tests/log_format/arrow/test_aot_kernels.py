"""The codec kernels compiled ahead of time: used without numba, numba when they are not.

A fresh Spark Python worker that reads or writes calls the kernels once per task; loading
them through numba cost it ~0.3 s of CPU (``import numba`` and its cached code). The
session's ``warm_up()`` (conftest) builds the module from the kernels' source; here:

- a fresh process that encodes, routes, scans and decodes as tasks do never imports numba;
- without the module (none built, or built from other kernel source) numba's kernels run,
  with the same results and a log line saying why;
- an entry called with argument types it was not compiled for runs numba's kernel;
- both give the same bytes and the same Arrow columns for any records (property test).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from txnlog.log_format.arrow import aot_kernels
from txnlog.log_format.arrow.arrow_codec import (
    AbortedFilter,
    decode_to_arrow,
    encode_arrow,
    scan_batches,
)
from txnlog.log_format.arrow.arrow_encode import StreamEncoder
from txnlog.log_format.arrow.kernel_loading import rebound
from txnlog.log_format.codec.partitioner import partitions_for_keys

REPO = Path(__file__).resolve().parents[3]

# A write task's routing and encoding and a read task's scan and decode, in miniature; prints
# what ran them and a digest of every result.
WORKLOAD = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np, pyarrow as pa
    import txnlog.datasource.write.task_writer, txnlog.datasource.read.stream_reader
    from txnlog.log_format.arrow.arrow_encode import StreamEncoder, prepare_columns
    from txnlog.log_format.codec.partitioner import partitions_for_keys
    from txnlog.log_format.arrow.arrow_codec import AbortedFilter, decode_to_arrow, scan_batches
    from txnlog.log_format.arrow.warmup import kernels_in_use

    n = 3000
    h = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    batch = pa.record_batch({
        "key": pa.array([b"%016d" % i if i % 7 else None for i in range(n)], pa.binary()),
        "value": pa.array([b"v" * (i % 50) for i in range(n)], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"x"}] if i % 3 else [] for i in range(n)],
                            pa.list_(h)),
        "timestamp": pa.array(np.arange(n) * 1000, pa.timestamp("us", tz="Etc/UTC")),
    })
    # as a Spark task gets it: Arrow IPC, read-only buffers
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    batch = pa.ipc.open_stream(sink.getvalue()).read_next_batch()
    digest = hashlib.sha256()
    parts = partitions_for_keys(batch.column("key"), 4)
    parts_writable = partitions_for_keys(pa.array(batch.column("key").to_pylist()), 4)
    assert (parts == parts_writable).all()
    digest.update(parts.tobytes())
    enc = StreamEncoder(producer_id=7, producer_epoch=0, base_sequence=0, transactional=True,
                        max_batch_bytes=4096)
    enc.append(prepare_columns(batch, 1), np.flatnonzero(parts == parts[1]))
    data = bytes(enc.finish().stamp_base_offset(0))
    digest.update(data)
    digest.update(scan_batches(data).tobytes())
    view = memoryview(data).toreadonly()
    got = decode_to_arrow(view, topic="t", partition=0, include_headers=True,
                          aborted=AbortedFilter([])).batch
    for col in got.columns:
        digest.update(str(col.to_pylist()).encode())
    print(json.dumps({"rows": got.num_rows, "kernels": kernels_in_use(),
                      "digest": digest.hexdigest(),
                      "numba": sorted(m for m in ("numba", "llvmlite") if m in sys.modules)}))
""")


def _run(code: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TXNLOG_KERNELS"}
    return {**env, **extra}


@pytest.fixture(scope="module")
def built() -> Path:
    """The module the session's warm_up() built (conftest; built here when the session ran
    with TXNLOG_KERNELS=jit): it must exist (a C compiler and the Python headers are part
    of the test set-up)."""
    aot_kernels.forget()
    if aot_kernels.load()[0] is None:
        subprocess.run([sys.executable, "-c", "from txnlog.log_format import warm_up; "
                        "warm_up()"], env=_env(), check=True, timeout=900)
        aot_kernels.forget()
    module, why = aot_kernels.load()
    assert module is not None, why
    return Path(module.__file__)


@pytest.fixture(scope="module")
def aot_run(built: Path) -> dict[str, Any]:
    return _run(WORKLOAD, _env())[0]


def test_a_fresh_process_runs_the_kernels_without_numba(aot_run: dict[str, Any]) -> None:
    assert aot_run["rows"] > 0
    assert set(aot_run["kernels"].values()) == {"aot"}, aot_run["kernels"]
    assert aot_run["numba"] == []


def test_without_the_module_numba_runs_them(tmp_path: Path, aot_run: dict[str, Any]) -> None:
    out, err = _run(WORKLOAD, _env(TXNLOG_KERNEL_DIR=str(tmp_path / "none")))
    assert set(out["kernels"].values()) == {"jit"}, out["kernels"]
    assert "numba" in out["numba"]
    assert "no ahead-of-time module in" in err and "numba's JIT" in err, err
    assert out["digest"] == aot_run["digest"]
    forced, err = _run(WORKLOAD, _env(TXNLOG_KERNELS="jit"))
    assert set(forced["kernels"].values()) == {"jit"}
    assert forced["digest"] == aot_run["digest"]


def test_a_module_built_from_other_kernel_source_is_not_used(tmp_path: Path,
                                                             built: Path) -> None:
    """The same package with one kernel module edited (a comment: the key must not try to
    be clever about what changed) does not load the module built from the original."""
    tree = tmp_path / "tree"
    pkg = tree / "txnlog"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("coordinator", "datasource"):
        (pkg / name).symlink_to(REPO / name, target_is_directory=True)
    shutil.copytree(REPO / "log_format", pkg / "log_format",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(pkg / "log_format" / "arrow" / "_decode_kernels.py", "a") as f:
        f.write("# edited\n")
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    for p in built.parent.glob(built.name.split(".")[0] + ".*"):
        shutil.copy(p, kdir)  # the module and its manifest, built from the original source
    code = ("import json, sys, pyarrow as pa\n"
            "from txnlog.log_format.arrow import aot_kernels\n"
            "from txnlog.log_format.codec.partitioner import partitions_for_keys\n"
            "from txnlog.log_format.arrow.warmup import kernels_in_use\n"
            "assert aot_kernels.__file__.startswith(sys.argv[-1]), aot_kernels.__file__\n"
            "p = partitions_for_keys(pa.array([b'a', b'bb', None, b'cccc']), 7)\n"
            "print(json.dumps({'p': p.tolist(), 'kernels': kernels_in_use(), "
            "'key': aot_kernels.build_key()}))")
    proc = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True,
                          text=True, timeout=900, cwd=tmp_path,
                          env=_env(PYTHONPATH=str(tree), TXNLOG_KERNEL_DIR=str(kdir),
                                   NUMBA_CACHE_DIR=str(tmp_path / "numba")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["key"] != aot_kernels.build_key()
    assert out["kernels"]["partitioner"] == "jit"
    assert "built from other kernel source" in proc.stderr and "(stale)" in proc.stderr
    want = partitions_for_keys(pa.array([b"a", b"bb", None, b"cccc"]), 7).tolist()
    assert out["p"] == want


def test_other_argument_types_run_numba(built: Path) -> None:
    """A strided key-offset array is not what the module was compiled for (numba would
    compile another specialisation): numba's kernel runs it, and says so."""
    code = textwrap.dedent("""
        import json, logging, sys
        import numpy as np
        logging.basicConfig(level=logging.INFO)
        from txnlog.log_format.codec import partitioner as P
        from txnlog.log_format.arrow.warmup import kernels_in_use
        data = np.frombuffer(b"abcdefgh", np.uint8)  # read-only, as the kernel takes it
        off = np.array([0, 0, 1, 1, 3, 3, 8, 8, 8, 8], np.int64)  # 4 keys, 5 offsets
        valid = np.ones(4, np.uint8)
        a = np.empty(4, np.int32)
        b = np.empty(4, np.int32)
        P._partitions(np.ascontiguousarray(off[::2]), valid, data, 5, a)
        first = kernels_in_use()["partitioner"]
        P._partitions(off[::2], valid, data, 5, b)
        print(json.dumps({"first": first, "then": kernels_in_use()["partitioner"],
                          "same": a.tolist() == b.tolist(), "numba": "numba" in sys.modules}))
    """)
    out, err = _run(code, _env())
    assert out == {"first": "aot", "then": "jit", "same": True, "numba": True}, out
    assert "_partitions argument 0" in err, err


# ------------------------------------------------------------- the same bytes, both ways


def _must_not_fall_back(name: str, *args: Any) -> Any:
    raise AssertionError(f"the ahead-of-time entry {name} fell back to numba")


record = st.tuples(
    st.integers(-(2**41), 2**41),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.none() | st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)),
                         max_size=3),
)
HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def _both(fn: Any) -> tuple[Any, Any]:
    with rebound("aot", _must_not_fall_back):  # entries that must not fall back
        a = fn()
    with rebound("jit"):
        j = fn()
    return a, j


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record, min_size=1, max_size=40), max_batch=st.integers(0, 3000),
       transactional=st.booleans(), headers=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_ahead_of_time_and_numba_give_the_same_bytes(records: list[tuple], max_batch: int,
                                                     transactional: bool, headers: bool,
                                                     seed: int) -> None:
    cols = {"key": pa.array([r[1] for r in records], pa.binary()),
            "value": pa.array([r[2] for r in records], pa.binary()),
            "timestamp": pa.array([r[0] for r in records], pa.int64())}
    if headers:
        cols["headers"] = pa.array([None if r[3] is None else
                                    [{"key": k, "value": v} for k, v in r[3]]
                                    for r in records], pa.list_(HEADER))
    rb = pa.record_batch(cols)
    rows = np.random.default_rng(seed).permutation(len(records))[:max(1, len(records) // 2)]
    pid = dict(producer_id=3, producer_epoch=0, base_sequence=5) if transactional else {}

    def encode() -> tuple[bytes, bytes, bytes]:
        whole = bytes(encode_arrow(rb, max_batch_bytes=max_batch, transactional=transactional,
                                   **pid).data)
        stream = StreamEncoder(transactional=transactional, max_batch_bytes=max_batch, **pid)
        stream.append(rb, rows=rows)
        stream.append(rb.slice(len(records) // 3))
        routed = bytes(stream.finish().data)
        return whole, routed, partitions_for_keys(rb.column("key"), 5).tobytes()

    (a_whole, a_routed, a_parts), jit = _both(encode)
    assert (a_whole, a_routed, a_parts) == jit

    def decode() -> list[Any]:
        out: list[Any] = [hashlib.sha256(scan_batches(a_whole).tobytes()).hexdigest()]
        for data in (a_whole, a_routed):
            for start in (0, len(records) // 2):
                res = decode_to_arrow(data, topic="t", partition=0, start_offset=start,
                                      include_headers=True,
                                      aborted=AbortedFilter([]) if transactional else None)
                out += [res.next_offset, res.batch.to_pydict()]
        return out

    a, j = _both(decode)
    assert a == j
