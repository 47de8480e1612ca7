"""One Spark session for every Spark test: a session costs 10-25 s to start.

``local[2,4]``: two cores, and up to four attempts per task, so task-retry tests run in the
same session as everything else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))

from coordinator_proc import CoordinatorProc


@pytest.fixture(scope="session")
def spark(s3_server: object) -> Iterator[object]:
    """The session starts after the S3 server: Spark's Python workers inherit the JVM's
    environment, so the server's AWS_* settings must be exported before the JVM starts."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("txnlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def coord(file_root: str) -> Iterator[CoordinatorProc]:
    """A coordinator process for the test's file root, healthy, stopped after the test."""
    proc = CoordinatorProc(file_root)
    try:
        proc.wait_healthy()
        yield proc
    finally:
        proc.stop()
