"""``spark.python.daemon.module=txnlog.datasource.worker_daemon`` (a fast first query):
a batch write, a read and an exactly-once stream through task workers forked from a daemon
that preloaded txnlog, in a Spark session of its own (daemon_driver.py). The workers'
parent has the codec's compiled kernels (the module compiled ahead of time, else numba's
LLVM) and Arrow loaded: the preload happened before the fork (the plain ``pyspark.daemon``
imports neither); the preloaded objects are frozen out of the workers'
garbage collections; and pyspark comes from the installed, compiled copy, not from Spark's
``pyspark.zip`` (byte-identical to it here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
DRIVER = Path(__file__).with_name("daemon_driver.py")


def test_txnlog_tasks_run_in_workers_of_the_preloading_daemon(coord, file_root: str,
                                                               tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(DRIVER), file_root, coord.endpoint,
                           str(tmp_path / "ckpt")], capture_output=True, text=True,
                          timeout=540)
    out = proc.stdout
    assert proc.returncode == 0, out[-2000:] + proc.stderr[-4000:]
    steps = {line.split()[1]: json.loads(line.split(" ", 2)[2])
             for line in out.splitlines() if line.startswith("OK ")}
    assert steps["batch"] == {"rows": 2000, "exact": True}
    assert steps["stream"]["rows"] == 2000 and steps["stream"]["exact"]
    assert steps["stream"]["batches"] >= 3
    daemon = next(json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
                  if line.startswith("DAEMON "))
    assert daemon and all(d["kernels"] and d["arrow"] for d in daemon), daemon
    assert all("txnlog.datasource.worker_daemon" in d["cmd"] for d in daemon), daemon
    assert all(d["frozen"] > 10_000 for d in daemon), daemon
    # pip's pyspark is the same source as Spark's pyspark.zip: imported compiled
    assert all(".zip" not in d["pyspark"] for d in daemon), daemon
    assert "preload failed" not in proc.stderr
