"""A PySpark worker daemon that loads txnlog's codec once, before it forks task workers.

Spark starts Python task workers by forking them from one daemon per executor
(``pyspark.daemon``). Every fresh worker then imports what its task needs: for a txnlog read
or write that is the datasource modules, pyarrow, numba and the codec's compiled kernels,
about a second of CPU per worker. A streaming query's first micro-batch starts several such
workers at once (a read worker and a write worker per concurrent task), so the first query
of every application, and of every restart, pays that several times over on the cores the
tasks need (issue 17).

With ``spark.python.daemon.module=txnlog.datasource.worker_daemon`` the daemon imports those
modules and loads the kernels from numba's cache once; each forked worker inherits them
(copy on write) and starts its task at once. Everything else is ``pyspark.daemon``'s: this
module only runs ``pyspark.daemon.manager()`` after the preload.

Only the task daemon preloads. Spark also starts daemons for its driver-side Python
planners (a worker module other than ``pyspark.worker`` is passed as ``argv[1]``); those never
decode or encode, so they start as plain daemons. A preload that fails (txnlog not
importable in this Python) is reported on stderr and the daemon serves as ``pyspark.daemon``
would: a missing preload only costs the time it would have saved.

Threads: ``pyspark.daemon`` imports the worker module after the fork because a thread
started before ``fork()`` does not exist in the child. The preload starts none: numba's
kernels are loaded, not run in parallel, and pyarrow creates its thread pools lazily and
re-creates them in a forked child (Arrow's at-fork handlers). ``tests/spark/
test_worker_daemon.py`` runs real queries through this daemon.
"""

from __future__ import annotations

import sys
import time
import traceback

# The worker modules whose tasks read or write txnlog: the executor's task worker. Spark
# passes a daemon its worker module as argv[1] only when it is not the default one.
TASK_WORKER_MODULES = ("pyspark.worker",)


def preload() -> float:
    """Import what a txnlog task imports and load the codec's kernels; the seconds it took."""
    t0 = time.perf_counter()
    import pyspark.worker  # noqa: F401 - what every forked worker runs
    from txnlog.datasource import (  # noqa: F401 - unpickled by read and write tasks
        batch_reader,
        stream_reader,
        stream_writer,
        task_writer,
    )
    from txnlog.log_format.warmup import warm_up

    warm_up()  # every kernel loaded from numba's cache (compiled on a cold cache)
    return time.perf_counter() - t0


def main() -> None:
    worker_module = sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker"
    if worker_module in TASK_WORKER_MODULES:
        try:
            preload()
        except Exception:  # serve as the plain daemon; say why once
            print("txnlog worker daemon: preload failed, workers will load txnlog "
                  "themselves:\n" + traceback.format_exc(), file=sys.stderr, flush=True)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
