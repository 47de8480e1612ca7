"""A Spark write whose coordinator dies in the middle of the commit.

Once PrepareCommit is durable the write commits, whatever happens next: commit() must keep
asking until it learns that, and report success, or the user would rerun the write and
duplicate it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from coordinator_proc import CoordinatorProc, free_port


def test_coordinator_killed_after_prepare_commit(spark, tmp_path: Path) -> None:
    root = (tmp_path / "root").as_uri()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    first = CoordinatorProc(root, faults="after_prepare", log_path=tmp_path / "c1.log",
                            extra=["--port", str(port)])
    first.wait_healthy()
    first.client().create_topic("crash", 2)
    restarted: list[CoordinatorProc] = []

    def restart_when_dead() -> None:
        first.wait(timeout=300)  # the fault point SIGKILLs it right after PrepareCommit
        second = CoordinatorProc(root, log_path=tmp_path / "c2.log",
                                 extra=["--port", str(port)])
        restarted.append(second)
        second.wait_healthy()

    watcher = threading.Thread(target=restart_when_dead, daemon=True)
    watcher.start()
    try:
        df = spark.range(0, 500, numPartitions=4).selectExpr(
            "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
        (df.write.format("txnlog").option("topic", "crash").option("coordinator", endpoint)
           .mode("append").save(root))  # must not raise: the commit was decided
        watcher.join(timeout=120)
        assert first.wait(timeout=1) != 0, "the fault point never fired"
        assert restarted, "the coordinator was not restarted"
        rows = (spark.read.format("txnlog").option("subscribe", "crash").load(root)
                .selectExpr("CAST(value AS STRING) AS v").collect())
        assert sorted(int(r.v) for r in rows) == list(range(500))
    finally:
        first.kill()
        for proc in restarted:
            proc.kill()
