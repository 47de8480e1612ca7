"""A PySpark worker daemon that loads txnlog's codec once, before it forks task workers.

Spark starts Python task workers by forking them from one daemon per executor
(``pyspark.daemon``). Every fresh worker then imports what its task needs: for a txnlog read
or write that is the datasource modules, pyarrow, numba and the codec's compiled kernels,
about a second of CPU per worker. A streaming query's first micro-batch starts several such
workers at once (a read worker and a write worker per concurrent task), so the first query
of every application, and of every restart, pays that several times over on the cores the
tasks need.

With ``spark.python.daemon.module=txnlog.datasource.worker_daemon`` the daemon imports those
modules and loads the kernels from numba's cache once; each forked worker inherits them
(copy on write) and starts its task at once. Everything else is ``pyspark.daemon``'s: this
module only runs ``pyspark.daemon.manager()`` after the preload.

The daemon then freezes what it loaded (``gc.freeze()``) before forking: pyspark.daemon runs
``gc.collect()`` in a worker after every task, and without the freeze each collection walks
the ~115,000 inherited objects (~0.08 s the first time in a worker, ~0.06 s after) and
writes to their pages, copying them into every worker.

The daemon also prefers the installed, compiled pyspark to Spark's ``pyspark.zip`` when the
two hold the same source (``prefer_compiled_pyspark``): Spark puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on a Python process's ``PYTHONPATH``, and that
zip holds no bytecode, so every fresh Python process of Spark compiles each pyspark module it
imports from source (measured: ``import pyspark.worker`` 0.75 s of CPU from the zip, 0.11 s
installed; the daemon's whole preload 1.9 s -> 1.3 s). With a pip-installed pyspark the zip
and the installed package are the same files; the daemon checks that byte for byte (size and
CRC-32 of every module both have, ~30-50 ms) and otherwise keeps the zip, as Spark set it.
Modules only the zip has (its tests) stay importable from it.

Only the executor's task daemon runs this module: Spark starts its driver-side planner
daemons (``python -m pyspark.daemon pyspark.sql.worker.create_data_source``, ...,
``write_into_data_source``, ``python_streaming_sink_runner``) and the streaming source
runner with ``pyspark.daemon`` or as plain processes whatever ``spark.python.daemon.module``
says (PySpark 4.3: ``PythonPlannerRunner`` passes Spark's default daemon module), so they
keep compiling pyspark from the zip (~0.8 s of CPU per planner daemon, measured by
``bench/first_query.py --by-role``). A worker module other than ``pyspark.worker`` in
``argv[1]`` gets no preload.

A preload that fails (txnlog not importable in this Python) is reported on stderr and the
daemon serves as ``pyspark.daemon`` would: a missing preload only costs the time it would
have saved.

Threads: ``pyspark.daemon`` imports the worker module after the fork because a thread
started before ``fork()`` does not exist in the child. The preload starts none: numba's
kernels are loaded, not run in parallel, pyarrow creates its thread pools lazily and
re-creates them in a forked child (Arrow's at-fork handlers).
``tests/spark/test_worker_daemon.py`` runs real queries through this
daemon.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
import zipfile
import zipimport
import zlib
from importlib.machinery import ModuleSpec, PathFinder

# The worker modules whose tasks read or write txnlog: the executor's task worker. Spark
# passes a daemon its worker module as argv[1] only when it is not the default one.
TASK_WORKER_MODULES = ("pyspark.worker",)


def _same_source(zip_path: str, package_dir: str) -> bool:
    """Whether every module of the zip's ``pyspark`` that ``package_dir`` also has holds the
    same bytes there (a pip install leaves out the zip's tests and benchmarks), its
    ``version.py`` included."""
    parent = os.path.dirname(package_dir)
    shared = set()
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.startswith("pyspark/") or not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(parent, name), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
                return False
            shared.add(name)
    return "pyspark/version.py" in shared


class _ZipOnlyModules:
    """The last meta path finder: a ``pyspark.*`` module the installed copy lacks (the zip's
    tests and benchmarks) is imported from the zip, as it was before the swap."""

    def __init__(self, zips: list[str]) -> None:
        self.zips = zips

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> ModuleSpec | None:
        if not fullname.startswith("pyspark."):
            return None
        folder = fullname.rpartition(".")[0].replace(".", "/")
        for z in self.zips:
            try:
                spec = zipimport.zipimporter(f"{z}/{folder}").find_spec(fullname)
            except zipimport.ZipImportError:
                continue
            if spec is not None:
                return spec
        return None


def prefer_compiled_pyspark() -> str | None:
    """Drop Spark's ``pyspark.zip`` from ``sys.path`` when the pyspark installed further down
    the path holds the same source, so pyspark's modules load from their compiled bytecode
    instead of being compiled from the zip in this process and every worker it forks.
    Modules only the zip has stay importable from it (``_ZipOnlyModules``). The installed
    package's directory if it did, None if it left ``sys.path`` as it was (no zip, no
    installed copy, a different one, or pyspark already imported)."""
    if "pyspark" in sys.modules:
        return None
    zips = [p for p in sys.path if os.path.basename(p) == "pyspark.zip" and os.path.isfile(p)]
    if not zips:
        return None
    rest = [p for p in sys.path if p not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or not spec.submodule_search_locations:
        return None
    package_dir = next(iter(spec.submodule_search_locations))
    try:
        if not all(_same_source(z, package_dir) for z in zips):
            return None
    except (OSError, zipfile.BadZipFile):
        return None
    sys.path[:] = rest
    sys.meta_path.append(_ZipOnlyModules(zips))
    return package_dir


def preload() -> float:
    """Import what a txnlog task imports and load the codec's kernels; the seconds it took."""
    t0 = time.perf_counter()
    import pyspark.worker  # noqa: F401 - what every forked worker runs
    from txnlog.log_format.arrow.warmup import warm_up

    # every kernel loaded: compiled ahead of time, else from numba's cache (compiled on a
    # cold cache); not the ahead-of-time build itself (seconds: warm_up() elsewhere does it)
    warm_up(build=False)
    return time.perf_counter() - t0


def main() -> None:
    worker_module = sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker"
    prefer_compiled_pyspark()
    if worker_module in TASK_WORKER_MODULES:
        try:
            preload()
        except Exception:  # serve as the plain daemon; say why once
            print("txnlog worker daemon: preload failed, workers will load txnlog "
                  "themselves:\n" + traceback.format_exc(), file=sys.stderr, flush=True)
    # What is loaded now lives as long as the daemon: out of the collector's sight, so a
    # forked worker's gc.collect() (pyspark.daemon runs one after every task) neither walks
    # it nor writes to its pages (which would copy them, page by page, into every worker).
    gc.collect()
    gc.freeze()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
