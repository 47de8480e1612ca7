"""Spark's own batch writes declare their transactional ids one-shot, and the coordinator
drops them after the retention period; a ``transactional.id`` option stays reusable.

One test (a Spark session is costly): real ``df.write`` calls against a coordinator
process whose retention period is 0, so each write's id is dropped at the coordinator's
next timer tick after its commit answered.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from coordinator_proc import CoordinatorProc

pytestmark = pytest.mark.spark


def _dropped(log: str) -> int:
    return sum(int(n) for n in re.findall(r"dropping (\d+) one-shot", log))


def test_spark_batch_writes_use_one_shot_ids(spark, file_root: str, tmp_path: Path) -> None:
    with CoordinatorProc(file_root, log_path=tmp_path / "c.log",
                         extra=["--one-shot-id-retention-ms", "0"]) as proc:
        proc.wait_healthy()
        df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary").coalesce(1)
        for _ in range(2):  # the root's registered coordinator, found as users find it
            df.write.format("txnlog").option("topic", "os").mode("append").save(file_root)
        (df.write.format("txnlog").option("topic", "os").option("transactional.id", "keep")
         .mode("append").save(file_root))
        deadline = time.monotonic() + 60
        while _dropped(proc.log_text()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.client().describe_txn("keep")["state"] == "CompleteCommit"
        log = proc.log_text()
    created = re.findall(r"init_producer_id '([^']+)' -> pid \d+ epoch \d+( \(one-shot\))?",
                         log)
    one_shot = sorted(tid for tid, flag in created if flag)
    assert len(one_shot) == 2 and all(t.startswith("txnlog-write-") for t in one_shot)
    assert ("keep", "") in created  # the option's id: reusable
    assert _dropped(log) == 2
    got = spark.read.format("txnlog").option("subscribe", "os").load(file_root)
    assert got.count() == 3
