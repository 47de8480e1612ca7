"""Spark Connect: a ``SparkSession.builder.remote("local[2]")`` client writes,
reads and runs an exactly-once stream through txnlog (connect_driver.py, its own process:
a Connect session cannot share a Python process with the suite's classic session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).resolve().parent / "connect_driver.py"


def test_spark_connect_write_read_and_exactly_once_stream(tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PYSPARK_PYTHON"] = sys.executable
    proc = subprocess.run([sys.executable, str(DRIVER), root, str(tmp_path / "ckpt")],
                          env=env, capture_output=True, text=True, timeout=540)
    out = proc.stdout
    errors = [line for line in proc.stderr.splitlines()
              if "Error" in line or "Exception" in line][:20]
    assert proc.returncode == 0, "\n".join([out, *errors, proc.stderr[-2000:]])
    assert "OK batch_write 200" in out
    assert "OK batch_read 200" in out
    assert "OK stream 300 exactly_once" in out
